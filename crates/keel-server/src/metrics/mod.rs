//! Prometheus metrics: what the runs did, counted as they go, and what the store holds, read
//! at scrape time; served at the API's `GET /metrics` (an admin key) and, with
//! `[telemetry] metrics_bind`, on a listener of its own without a key ([`route`]).
//!
//! The recorder is this daemon's own (no global recorder: several daemons share a test
//! process). Its counters and histograms are fed by [`Metrics`]' [`keel_core::EventSink`]
//! (one of the engine's sink, [`crate::engine::Engine::sink`]) and by the engine itself (lane
//! rejections, reconciler actions); the gauges and the token log's families are read when
//! scraped ([`scrape`]). The names are listed in [`names`].

mod handles;
pub mod names;
mod record;
pub mod route;
pub mod scrape;

use std::sync::{Mutex, RwLock};
use std::time::Duration;

use metrics::{Histogram, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use handles::{FixedSeries, Series};
use record::RunTracks;

/// The buckets of the model latency and tool duration histograms, in seconds.
const CALL_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// The buckets of the loop overhead histogram, in seconds (tens of microseconds is usual).
const OVERHEAD_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// How often histogram samples are folded into their buckets when nobody scrapes (a scrape
/// folds them too), so they never pile up.
pub const UPKEEP_EVERY: Duration = Duration::from_secs(10);

/// The daemon's metrics: its recorder, the cached handles of its series, and what it follows
/// of each run being driven (to time the loop's own overhead).
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    runs: FixedSeries,
    model_calls: Series<metrics::Counter>,
    retries: Series<metrics::Counter>,
    fallbacks: Series<metrics::Counter>,
    tool_calls: Series<metrics::Counter>,
    approvals: FixedSeries,
    lane_rejections: FixedSeries,
    reconciler: FixedSeries,
    model_latency: Series<Histogram>,
    tool_duration: Series<Histogram>,
    loop_overhead: Histogram,
    tracks: Mutex<RunTracks>,
    channels: RwLock<Vec<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Metrics with nothing counted yet.
    pub fn new() -> Metrics {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(names::MODEL_LATENCY.into()), CALL_BUCKETS)
            .and_then(|b| {
                b.set_buckets_for_metric(Matcher::Full(names::TOOL_DURATION.into()), CALL_BUCKETS)
            })
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full(names::LOOP_OVERHEAD.into()),
                    OVERHEAD_BUCKETS,
                )
            });
        // The bucket lists are constants, never empty: the builder cannot refuse them.
        let recorder = builder.unwrap_or_default().build_recorder();
        let handle = recorder.handle();
        for &(name, unit, help) in names::DESCRIBED {
            let help = SharedString::const_str(help);
            match unit {
                Some(Unit::Seconds) => recorder.describe_histogram(name.into(), None, help),
                _ => recorder.describe_counter(name.into(), None, help),
            }
        }
        let loop_overhead = recorder.register_histogram(
            &metrics::Key::from_static_name(names::LOOP_OVERHEAD),
            &metrics::Metadata::new(module_path!(), metrics::Level::INFO, None),
        );
        Metrics {
            runs: FixedSeries::new(names::RUNS, ["state", "reason"]),
            model_calls: Series::new(names::MODEL_CALLS, ["model", "error"]),
            retries: Series::new(names::RETRIES, ["model", "error"]),
            fallbacks: Series::new(names::FALLBACKS, ["from", "error"]),
            tool_calls: Series::new(names::TOOL_CALLS, ["tool", "outcome"]),
            approvals: FixedSeries::new(names::APPROVALS, ["decision", ""]),
            lane_rejections: FixedSeries::new(names::LANE_REJECTIONS, ["reason", ""]),
            reconciler: FixedSeries::new(names::RECONCILER_ACTIONS, ["action", ""]),
            model_latency: Series::new(names::MODEL_LATENCY, ["model", ""]),
            tool_duration: Series::new(names::TOOL_DURATION, ["tool", ""]),
            loop_overhead,
            tracks: Mutex::new(RunTracks::default()),
            channels: RwLock::new(Vec::new()),
            recorder,
            handle,
        }
    }

    /// Counts a message refused because its conversation's lane was full (`queue_full`) or
    /// busy under the `reject` policy (`busy`).
    pub fn lane_rejected(&self, reason: &'static str) {
        self.lane_rejections.add(&self.recorder, [reason, ""], 1);
    }

    /// Counts `n` reconciler actions of one kind: `timed_out` (a run whose worker died),
    /// `cancelled` (a cancel that timed out), `resumed` (a timed-out run resumed without a
    /// human).
    pub fn reconciled(&self, action: &'static str, n: u64) {
        if n > 0 {
            self.reconciler.add(&self.recorder, [action, ""], n);
        }
    }

    /// Counts `n` runs that ended without the loop telling it: cancelled while queued
    /// (`queued`), or folded into another run (`steered`, `collected`).
    pub fn runs_ended_queued(&self, reason: &'static str, n: u64) {
        if n > 0 {
            self.runs.add(&self.recorder, ["cancelled", reason], n);
        }
    }

    /// The channels whose outbox backlog is reported (`keel serve` sets them once they start).
    pub fn set_channels(&self, names: &[String]) {
        *self.channels.write().unwrap_or_else(|e| e.into_inner()) = names.to_vec();
    }

    /// The channels whose outbox backlog is reported.
    pub fn channels(&self) -> Vec<String> {
        self.channels
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops following a run that is no longer driven here (it ended, paused or was dropped).
    pub fn forget_run(&self, run_id: &str) {
        self.lock_tracks().remove(run_id);
    }

    /// Folds histogram samples into their buckets (a scrape does it too).
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// The event-driven series, in the Prometheus text format.
    pub fn render_recorded(&self) -> String {
        self.handle.render()
    }

    /// How many runs are followed for their timing (0 once they all ended: it stays bounded).
    pub fn runs_followed(&self) -> usize {
        self.lock_tracks().len()
    }

    fn lock_tracks(&self) -> std::sync::MutexGuard<'_, RunTracks> {
        self.tracks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests;
