//! Counting the runs' events as they happen: [`Metrics`] is an [`EventSink`]. Each event that
//! counts finds its series' handle in a cache and adds to it; only the events that time the
//! loop's overhead touch the per-run state, under a short lock.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use keel_core::{AgentState, Event, EventKind, EventSink};

use super::Metrics;

/// What is followed of each run being driven, by run id.
pub(super) type RunTracks = HashMap<String, RunTrack>;

/// One run's model and where its current iteration's gap stands.
#[derive(Debug, Default)]
pub(super) struct RunTrack {
    /// The model of its latest model call, as asked for (an error does not name it).
    model: String,
    /// When its latest model call answered, while the loop works towards the next one.
    answered_at: Option<DateTime<Utc>>,
    /// The first tool start and last tool end since then.
    tools: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// Something else than the loop took time since then (a compaction's summary, a person):
    /// the gap is not the loop's overhead.
    spoilt: bool,
}

impl RunTrack {
    /// The loop's own time from the answer to `now`, less the tools' span; `None` when the gap
    /// was spoilt or not open. Closes the gap.
    fn close_gap(&mut self, now: DateTime<Utc>) -> Option<f64> {
        let answered = self.answered_at.take()?;
        let tools = self.tools.take();
        if std::mem::take(&mut self.spoilt) {
            return None;
        }
        let mut gap = (now - answered).num_microseconds()?;
        if let Some((from, to)) = tools {
            gap -= (to - from).num_microseconds()?;
        }
        Some(gap.max(0) as f64 / 1e6)
    }
}

impl EventSink for Metrics {
    fn emit(&self, event: &Event) {
        let recorder = &self.recorder;
        match &event.kind {
            EventKind::ModelRequest { model, .. } => {
                let overhead = {
                    let mut tracks = self.lock_tracks();
                    let track = match tracks.get_mut(event.run_id.as_str()) {
                        Some(track) => track,
                        None => tracks.entry(event.run_id.clone()).or_default(),
                    };
                    if track.model != *model {
                        track.model.clone_from(model);
                    }
                    track.close_gap(event.ts)
                };
                if let Some(seconds) = overhead {
                    self.loop_overhead.record(seconds);
                }
            }
            EventKind::ModelResponse { latency_ms, .. } => {
                let mut tracks = self.lock_tracks();
                let Some(track) = tracks.get_mut(event.run_id.as_str()) else {
                    return;
                };
                track.answered_at = Some(event.ts);
                track.tools = None;
                track.spoilt = false;
                self.model_calls
                    .with(recorder, &track.model, "none", |c| c.increment(1));
                self.model_latency.with(recorder, &track.model, "", |h| {
                    h.record(*latency_ms as f64 / 1e3)
                });
            }
            EventKind::ModelError { kind, .. } => {
                let tracks = self.lock_tracks();
                let model = tracks
                    .get(event.run_id.as_str())
                    .map_or("", |track| track.model.as_str());
                self.model_calls
                    .with(recorder, model, kind.as_str(), |c| c.increment(1));
            }
            EventKind::ToolStarted { .. } | EventKind::ToolCompleted { .. } => {
                if let EventKind::ToolCompleted {
                    name,
                    ok,
                    duration_ms,
                    ..
                } = &event.kind
                {
                    let outcome = if *ok { "ok" } else { "error" };
                    self.tool_calls
                        .with(recorder, name, outcome, |c| c.increment(1));
                    self.tool_duration
                        .with(recorder, name, "", |h| h.record(*duration_ms as f64 / 1e3));
                }
                let mut tracks = self.lock_tracks();
                if let Some(track) = tracks.get_mut(event.run_id.as_str())
                    && track.answered_at.is_some()
                {
                    let (from, to) = track.tools.get_or_insert((event.ts, event.ts));
                    *from = (*from).min(event.ts);
                    *to = (*to).max(event.ts);
                }
            }
            EventKind::ProviderRetry { model, kind, .. } => {
                self.retries
                    .with(recorder, model, kind.as_str(), |c| c.increment(1));
            }
            EventKind::ProviderFallback { from, kind, .. } => {
                self.fallbacks
                    .with(recorder, from, kind.as_str(), |c| c.increment(1));
            }
            EventKind::ApprovalDecided { decision, .. } => {
                self.approvals.add(recorder, [decision.as_str(), ""], 1);
            }
            // Time that is not the loop's: a summary model's call, a memory flush's turn.
            EventKind::CompactionRun { .. }
            | EventKind::RecoveryFired { .. }
            | EventKind::MemoryFlushed { .. } => {
                if let Some(track) = self.lock_tracks().get_mut(event.run_id.as_str()) {
                    track.spoilt = true;
                }
            }
            // The run waits for a person: its driver lets it go.
            EventKind::ApprovalRequested { .. }
            | EventKind::HumanAsked { .. }
            | EventKind::ResumeUnsafe { .. } => self.forget_run(&event.run_id),
            EventKind::RunCompleted { .. } => self.run_ended(event, AgentState::Completed, None),
            EventKind::RunCancelled { .. } => self.run_ended(event, AgentState::Cancelled, None),
            EventKind::RunFailed { state, reason, .. } => {
                self.run_ended(event, *state, reason.map(|r| r.as_str()))
            }
            _ => {}
        }
    }
}

impl Metrics {
    fn run_ended(&self, event: &Event, state: AgentState, reason: Option<&'static str>) {
        // Every end the loop tells is terminal; a state that is not would be no end to count.
        if state.is_terminal() {
            self.runs.add(
                &self.recorder,
                [state.as_str(), reason.unwrap_or("none")],
                1,
            );
        }
        let overhead = self
            .lock_tracks()
            .remove(event.run_id.as_str())
            .and_then(|mut track| track.close_gap(event.ts));
        if let Some(seconds) = overhead {
            self.loop_overhead.record(seconds);
        }
    }
}
