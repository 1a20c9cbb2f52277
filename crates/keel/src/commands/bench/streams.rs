//! `keel bench --serve --idle-streams N`: N conversations on a `keel serve` child (SQLite,
//! `keel mock-provider` as the model), each with its event stream (`GET
//! /v1/conversations/{id}/events`) held open by this process over its own connection, as N
//! users' clients would hold them. Once every stream is open and idle, the daemon's memory is
//! read against a baseline taken before they were opened; then `--probes` messages go to
//! random conversations at [`PROBES_PER_S`] a second, each a 1-iteration run at 0 ms, and the
//! delivery of each run's [`TIMED_EVENT`] is timed from the event's own `ts` (stamped by the
//! daemon when it emitted it; the same machine's clock) to the moment its frame arrived on that
//! conversation's stream here.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde::Serialize;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::daemon::{Api, DaemonProcess, admin_key, prepare_home, script};
use super::mock_process::MockProcess;
use super::report::{Spread, cpu_time, cpu_time_of, rss_kib};
use crate::cli::BenchArgs;
use crate::config::ConfigError;

/// The event whose delivery is timed: `agent.model.request`, the first event of a run that the
/// engine stamps and hands to the hub in one call. The run's earlier frames
/// (`agent_run.started`, `agent.checkpoint`) are stamped before the boundary's store commit and
/// sent after it, so their `ts` would count the SQLite write as delivery.
pub const TIMED_EVENT: &str = "agent.model.request";

/// The probes' pace: modest, so that what is timed is delivery, not a queue of runs.
pub const PROBES_PER_S: u32 = 50;

/// Streams being opened at once: more would only overflow the daemon's accept backlog.
const OPENING_AT_ONCE: usize = 256;

/// Conversations being created at once.
const CREATING_AT_ONCE: usize = 32;

/// How long a probe's frame may take after the last probe was accepted before it counts lost.
const GRACE: Duration = Duration::from_secs(5);

/// What `keel bench --serve --idle-streams` measured.
#[derive(Debug, Serialize)]
pub struct StreamsReport {
    /// Streams asked for (one per conversation).
    pub streams: usize,
    /// Streams whose response (200, `text/event-stream`) came.
    pub opened: usize,
    /// Streams that ended while held (the daemon closed them).
    pub broken: usize,
    /// The first failure to open a stream or send a probe, if any.
    pub failure: Option<String>,
    /// From the first stream asked for to the last one open, in seconds.
    pub open_s: f64,
    /// The daemon's limit on open files (soft, from `/proc/PID/limits`).
    pub daemon_open_files_limit: Option<u64>,
    /// The daemon's `[serve] max_connections`: the streams plus room for the probes.
    pub daemon_max_connections: usize,
    /// The daemon's resident memory at each step.
    pub daemon_rss: DaemonMemory,
    /// (idle − baseline) / streams opened, in KiB: what one idle stream costs the daemon.
    pub daemon_kib_per_stream: f64,
    /// The daemon's CPU time while the streams were opened, in milliseconds.
    pub daemon_cpu_open_ms: f64,
    /// The daemon's CPU time with every stream open and nothing sent, in milliseconds, over
    /// `idle_window_s`.
    pub daemon_cpu_idle_ms: f64,
    /// The idle window, in seconds (it grows with the streams, up to 2 s).
    pub idle_window_s: f64,
    /// The daemon's CPU time per probe (its run, its events to the stream), in microseconds.
    pub daemon_cpu_per_probe_us: f64,
    /// The mock's CPU time over the whole bench, in milliseconds.
    pub mock_cpu_ms: f64,
    /// This process's peak resident memory, in MiB.
    pub generator_peak_rss_mib: f64,
    /// This process's CPU time over the whole bench, in milliseconds.
    pub generator_cpu_ms: f64,
    /// Probes asked for.
    pub probes: usize,
    /// Probes whose message was accepted (202, a run id).
    pub accepted: usize,
    /// Accepted probes whose timed frame arrived on their conversation's stream.
    pub delivered: usize,
    /// Accepted probes whose timed frame never arrived.
    pub lost: usize,
    /// Probes accepted per second, first to last.
    pub probe_rate_per_s: f64,
    /// The event timed.
    pub timed_event: &'static str,
    /// From the event's `ts` to its frame's arrival on the stream, in microseconds.
    pub delivery_us: Spread,
}

/// The daemon's resident memory at each step of the bench, in MiB.
#[derive(Debug, Default, Serialize)]
pub struct DaemonMemory {
    /// Started and warmed up (one run), nothing else.
    pub started: f64,
    /// With the N conversations created, before any stream: the baseline.
    pub baseline: f64,
    /// With every stream open and idle.
    pub idle: f64,
    /// After the probes.
    pub after_probes: f64,
    /// Its peak.
    pub peak: f64,
}

/// One timed frame, as a stream saw it.
struct Delivery {
    run_id: String,
    delay: Duration,
}

/// Runs `keel bench --serve --idle-streams N`.
pub async fn bench(args: &BenchArgs, database: Option<&str>) -> anyhow::Result<ExitCode> {
    let streams = args.idle_streams.unwrap_or(0);
    if streams == 0 {
        return Err(ConfigError("--idle-streams must be at least 1".into()).into());
    }
    if database.is_some() || args.daemons != 1 {
        return Err(ConfigError(
            "--idle-streams measures one keel serve on SQLite: drop --database and --daemons"
                .into(),
        )
        .into());
    }
    // One socket per stream here; `keel serve` raises its own limit to the hard one, which it
    // inherits from this process.
    super::raise_open_files(streams as u64 + 256)?;
    let cpu_started = cpu_time();
    let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
    let mock = MockProcess::start(&script(1, 0), dir.path())?;
    let home = prepare_home(dir.path(), &mock, false, 2, 64)?;
    // Past `[serve] max_connections` (1,024 by default) the daemon answers 503 and closes: room
    // for every stream, the probes and the pool. `[serve]` is the file's last table.
    let config = home.join("keel.toml");
    let mut toml = String::new();
    for line in std::fs::read_to_string(&config)?.lines() {
        if !line.starts_with("max_connections") {
            toml.push_str(line);
            toml.push('\n');
        }
    }
    toml.push_str(&format!("max_connections = {}\n", max_connections(streams)));
    std::fs::write(&config, toml)?;
    let key = admin_key(&home, None)?;
    let daemon = DaemonProcess::start(&home, None)?;
    keel_providers::install_crypto_provider();
    let api = Api {
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(CREATING_AT_ONCE + 16)
            .build()?,
        base: daemon.url.clone(),
        key,
    };
    // Unmeasured: tokenizer tables, statements, connections.
    api.warm_up().await?;
    let mut memory = DaemonMemory {
        started: mib(daemon.rss_kib()),
        ..DaemonMemory::default()
    };

    let conversations: Vec<String> = futures::stream::iter(0..streams)
        .map(|_| api.conversation())
        .buffer_unordered(CREATING_AT_ONCE)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()
        .context("cannot create the conversations")?;
    memory.baseline = mib(daemon.rss_kib());

    // Streams get a client of their own: each holds its connection for good.
    let holder = Api {
        http: reqwest::Client::builder().build()?,
        ..api.clone()
    };
    let (delivered, mut deliveries) = mpsc::unbounded_channel();
    let broken = Arc::new(AtomicUsize::new(0));
    let opening = Arc::new(Semaphore::new(OPENING_AT_ONCE));
    let cpu_before_open = daemon.cpu_time();
    let open_started = Instant::now();
    let mut held = JoinSet::new();
    for conversation in &conversations {
        let permit = opening.clone().acquire_owned().await?;
        let (api, conversation) = (holder.clone(), conversation.clone());
        let (delivered, broken) = (delivered.clone(), broken.clone());
        held.spawn(async move {
            let response = api.conversation_events(&conversation).await;
            drop(permit);
            let response = response?;
            tokio::spawn(hold(response, delivered, broken));
            anyhow::Ok(())
        });
    }
    let mut opened = 0;
    let mut failure = None;
    while let Some(joined) = held.join_next().await {
        match joined.context("a stream's task panicked")? {
            Ok(()) => opened += 1,
            Err(error) => {
                failure.get_or_insert(format!("a stream did not open: {error:#}"));
            }
        }
    }
    let open = open_started.elapsed();
    let daemon_cpu_open = daemon.cpu_time().saturating_sub(cpu_before_open);

    // Every stream's task subscribes within moments of its response; the window lets them
    // settle and shows what held streams cost while nothing happens.
    let idle_window = (Duration::from_micros(200) * u32::try_from(streams)?)
        .clamp(Duration::from_millis(50), Duration::from_secs(2));
    let cpu_before_idle = daemon.cpu_time();
    tokio::time::sleep(idle_window).await;
    let daemon_cpu_idle = daemon.cpu_time().saturating_sub(cpu_before_idle);
    memory.idle = mib(daemon.rss_kib());

    let cpu_before_probes = daemon.cpu_time();
    let (accepted, probing, probe_failure) = probe(&api, &conversations, args.probes).await;
    if let Some(probe_failure) = probe_failure {
        failure.get_or_insert(probe_failure);
    }
    let mut arrived: HashMap<String, Duration> = HashMap::new();
    let deadline = Instant::now() + GRACE;
    while accepted.iter().any(|run_id| !arrived.contains_key(run_id)) {
        match tokio::time::timeout_at(deadline, deliveries.recv()).await {
            Ok(Some(delivery)) => {
                arrived.entry(delivery.run_id).or_insert(delivery.delay);
            }
            Ok(None) | Err(_) => break,
        }
    }
    let daemon_cpu_probes = daemon.cpu_time().saturating_sub(cpu_before_probes);
    memory.after_probes = mib(daemon.rss_kib());
    memory.peak = mib(daemon.peak_rss_kib());
    let delays: Vec<Duration> = accepted
        .iter()
        .filter_map(|run_id| arrived.get(run_id).copied())
        .collect();

    let report = StreamsReport {
        streams,
        opened,
        broken: broken.load(Ordering::Relaxed),
        failure,
        open_s: open.as_secs_f64(),
        daemon_open_files_limit: open_files_limit(daemon.pid()),
        daemon_max_connections: max_connections(streams),
        daemon_kib_per_stream: (memory.idle - memory.baseline) * 1024.0 / opened.max(1) as f64,
        daemon_rss: memory,
        daemon_cpu_open_ms: ms(daemon_cpu_open),
        daemon_cpu_idle_ms: ms(daemon_cpu_idle),
        idle_window_s: idle_window.as_secs_f64(),
        daemon_cpu_per_probe_us: ms(daemon_cpu_probes) * 1e3 / accepted.len().max(1) as f64,
        mock_cpu_ms: ms(cpu_time_of(&mock.pid().to_string())),
        generator_peak_rss_mib: mib(rss_kib().1),
        generator_cpu_ms: ms(cpu_time().saturating_sub(cpu_started)),
        probes: args.probes,
        accepted: accepted.len(),
        delivered: delays.len(),
        lost: accepted.len() - delays.len(),
        probe_rate_per_s: accepted.len() as f64 / probing.as_secs_f64().max(1e-9),
        timed_event: TIMED_EVENT,
        delivery_us: Spread::of(delays),
    };
    drop(daemon);
    let failed =
        report.failure.is_some() || report.lost > 0 || report.broken > 0 || report.opened < streams;
    super::report::finish(&report, args.json, text, failed)
}

/// Reads a conversation's stream for good: each [`TIMED_EVENT`] frame's delay goes to
/// `delivered`; a stream that ends is counted in `broken`.
async fn hold(
    response: reqwest::Response,
    delivered: mpsc::UnboundedSender<Delivery>,
    broken: Arc<AtomicUsize>,
) {
    let mut frames = response.bytes_stream().eventsource();
    while let Some(frame) = frames.next().await {
        let Ok(frame) = frame else { break };
        if frame.event != TIMED_EVENT {
            continue;
        }
        let now = Utc::now();
        if let Some(delivery) = delivery(&frame.data, now) {
            let _ = delivered.send(delivery);
        }
    }
    broken.fetch_add(1, Ordering::Relaxed);
}

/// The run and the delay of a frame whose data is an event arriving at `now`: `now − ts`
/// (zero if the clock stepped back).
fn delivery(data: &str, now: DateTime<Utc>) -> Option<Delivery> {
    let event: serde_json::Value = serde_json::from_str(data).ok()?;
    let ts = DateTime::parse_from_rfc3339(event["ts"].as_str()?).ok()?;
    let delay = (now - ts.with_timezone(&Utc)).to_std().unwrap_or_default();
    Some(Delivery {
        run_id: event["run_id"].as_str()?.to_string(),
        delay,
    })
}

/// Sends `probes` messages to conversations picked at random (the same sequence every time),
/// the i-th scheduled at i / [`PROBES_PER_S`] s; the run ids accepted, how long sending took
/// and the first failure.
async fn probe(
    api: &Api,
    conversations: &[String],
    probes: usize,
) -> (Vec<String>, Duration, Option<String>) {
    let mut pick = SplitMix(0x6b65_656c);
    let started = Instant::now();
    let mut sending = JoinSet::new();
    for i in 0..probes {
        let at = started + Duration::from_secs(i as u64) / PROBES_PER_S;
        let conversation = conversations[pick.below(conversations.len())].clone();
        let api = api.clone();
        sending.spawn(async move {
            tokio::time::sleep_until(at).await;
            api.send(&conversation).await.map(|(_, run_id)| run_id)
        });
    }
    let mut accepted = Vec::with_capacity(probes);
    let mut failure = None;
    while let Some(joined) = sending.join_next().await {
        match joined {
            Ok(Ok(run_id)) => accepted.push(run_id),
            Ok(Err(error)) => {
                failure.get_or_insert(format!("a probe was not accepted: {error:#}"));
            }
            Err(error) => {
                failure.get_or_insert(format!("a probe's task failed: {error}"));
            }
        }
    }
    (accepted, started.elapsed(), failure)
}

/// SplitMix64: a fixed, repeatable choice of conversations, nothing to seed from outside.
struct SplitMix(u64);

impl SplitMix {
    /// A number below `n` (at least 1).
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z % n.max(1) as u64) as usize
    }
}

/// The daemon's `[serve] max_connections` for `streams` held streams.
fn max_connections(streams: usize) -> usize {
    streams + 256
}

/// The soft limit on open files of process `pid`, from `/proc/PID/limits`.
fn open_files_limit(pid: u32) -> Option<u64> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    soft_open_files(&limits)
}

fn soft_open_files(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn text(r: &StreamsReport) -> String {
    let m = &r.daemon_rss;
    let d = &r.delivery_us;
    let limit = r
        .daemon_open_files_limit
        .map_or("unknown".to_string(), |limit| limit.to_string());
    let failure = r
        .failure
        .as_ref()
        .map_or(String::new(), |f| format!("  first failure    {f}\n"));
    format!(
        "keel bench --serve --idle-streams: {} conversations' event streams held open on one keel \
         serve (SQLite) over HTTP\n  streams          {}/{} open in {:.2} s, {} broken (daemon's \
         open-files limit {limit}, max_connections {})\n  daemon memory    {:.0} MiB started, {:.0} MiB with the \
         conversations, {:.0} MiB with every stream open ({:.1} KiB per stream), {:.0} MiB after \
         the probes, {:.0} MiB peak\n  daemon CPU       {:.0} ms to open the streams, {:.0} ms \
         over {:.1} s idle, {:.0} µs per probe\n  probes           {} at {PROBES_PER_S}/s: {} \
         accepted ({:.1}/s), {} delivered, {} lost\n  delivery         {}: p50 {:.2} ms, p99 \
         {:.2} ms, max {:.2} ms (event's ts → its frame on the conversation's stream)\n  \
         generator        {:.0} MiB peak RSS, {:.0} ms CPU; mock {:.0} ms CPU\n{failure}",
        r.streams,
        r.opened,
        r.streams,
        r.open_s,
        r.broken,
        r.daemon_max_connections,
        m.started,
        m.baseline,
        m.idle,
        r.daemon_kib_per_stream,
        m.after_probes,
        m.peak,
        r.daemon_cpu_open_ms,
        r.daemon_cpu_idle_ms,
        r.idle_window_s,
        r.daemon_cpu_per_probe_us,
        r.probes,
        r.accepted,
        r.probe_rate_per_s,
        r.delivered,
        r.lost,
        r.timed_event,
        d.p50 / 1e3,
        d.p99 / 1e3,
        d.max / 1e3,
        r.generator_peak_rss_mib,
        r.generator_cpu_ms,
        r.mock_cpu_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_timed_from_its_events_stamp() {
        let data = r#"{"ts":"2026-11-30T01:00:00.000250Z","run_id":"r1","session_id":"s",
            "event":"agent.model.request"}"#;
        let now: DateTime<Utc> = "2026-11-30T01:00:00.001750Z".parse().unwrap();
        let delivery = delivery(data, now).unwrap();
        assert_eq!(delivery.run_id, "r1");
        assert_eq!(delivery.delay, Duration::from_micros(1500));
        // A clock stepped back is no negative delay.
        let early: DateTime<Utc> = "2026-11-30T00:59:59Z".parse().unwrap();
        assert_eq!(delivery_of(data, early), Duration::ZERO);
        assert!(super::delivery("not json", now).is_none());
    }

    fn delivery_of(data: &str, now: DateTime<Utc>) -> Duration {
        delivery(data, now).unwrap().delay
    }

    #[test]
    fn the_daemons_soft_limit_is_read_from_its_limits() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max processes             63704                63704                processes\n\
                      Max open files            20000                20000                files\n";
        assert_eq!(soft_open_files(limits), Some(20000));
        assert_eq!(soft_open_files("nothing"), None);
    }

    #[test]
    fn probes_pick_every_conversation_in_a_fixed_order() {
        let picks = |n| {
            let mut pick = SplitMix(1);
            (0..200).map(|_| pick.below(n)).collect::<Vec<_>>()
        };
        assert_eq!(picks(7), picks(7));
        let mut seen = picks(7);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, (0..7).collect::<Vec<_>>());
    }
}
