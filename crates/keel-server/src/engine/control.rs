//! Each run this process drives has a [`RunControl`]: its cancel token, and the stop that
//! shutdown uses — "stop at your next boundary and stay resumable". The engine watches every
//! run's events ([`Boundaries`], one of the agent's event sinks) to know when a run may be
//! dropped without losing or repeating anything: while its model call is in flight (the call is
//! made again on resume), or right after a checkpoint whose next step is a model call. Never
//! while tools run: a batch finishes and is committed first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use keel_core::{Boundary, Event, EventKind, EventSink};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The handles of one run being driven here.
#[derive(Debug, Default)]
pub struct RunControl {
    /// Cancels the run at its next safe point (it ends `cancelled`).
    pub cancel: CancellationToken,
    /// Fires when the run may be dropped, once shutdown asked for it.
    pub stop: Notify,
    stopping: AtomicBool,
    in_model_call: AtomicBool,
}

impl RunControl {
    /// Asks the run to stop at its next boundary; at once when its model call is in flight.
    pub fn stop_at_boundary(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        if self.in_model_call.load(Ordering::SeqCst) {
            self.stop.notify_one();
        }
    }
}

/// Follows the runs' events to tell each [`RunControl`] where its run is.
#[derive(Debug, Default)]
pub struct Boundaries {
    runs: Mutex<HashMap<String, Arc<RunControl>>>,
}

impl Boundaries {
    /// Starts following `run_id`, unless it is followed already (someone else drives it).
    pub fn add(&self, run_id: &str) -> Option<Arc<RunControl>> {
        let mut runs = self.lock();
        if runs.contains_key(run_id) {
            return None;
        }
        let control = Arc::new(RunControl::default());
        runs.insert(run_id.to_string(), control.clone());
        Some(control)
    }

    /// Stops following `run_id`.
    pub fn remove(&self, run_id: &str) {
        self.lock().remove(run_id);
    }

    /// The control of a run being driven here.
    pub fn get(&self, run_id: &str) -> Option<Arc<RunControl>> {
        self.lock().get(run_id).cloned()
    }

    /// How many runs are being driven here.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no run is being driven here.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Every run being driven here.
    pub fn all(&self) -> Vec<Arc<RunControl>> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<RunControl>>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl EventSink for Boundaries {
    fn emit(&self, event: &Event) {
        let at_boundary = match &event.kind {
            EventKind::ModelRequest { .. } => Some(true),
            EventKind::ModelResponse { .. } | EventKind::ModelError { .. } => Some(false),
            EventKind::Checkpoint { boundary, .. } => {
                // After these the next step is a model call; after `llm_response` tools may
                // run, and a run is never dropped while they do.
                let before_a_model_call = matches!(
                    boundary,
                    Boundary::Input
                        | Boundary::ToolResult
                        | Boundary::Compaction
                        | Boundary::JournalUpdate
                );
                if before_a_model_call
                    && let Some(control) = self.get(&event.run_id)
                    && control.stopping.load(Ordering::SeqCst)
                {
                    control.stop.notify_one();
                }
                None
            }
            _ => None,
        };
        if let Some(in_call) = at_boundary
            && let Some(control) = self.get(&event.run_id)
        {
            control.in_model_call.store(in_call, Ordering::SeqCst);
            if in_call && control.stopping.load(Ordering::SeqCst) {
                control.stop.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind) -> Event {
        Event {
            ts: chrono::Utc::now(),
            run_id: "r".into(),
            session_id: "s".into(),
            kind,
        }
    }

    fn checkpoint(boundary: Boundary) -> Event {
        event(EventKind::Checkpoint { seq: 1, boundary })
    }

    async fn fired(control: &RunControl) -> bool {
        tokio::time::timeout(std::time::Duration::ZERO, control.stop.notified())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_run_stops_in_its_model_call_or_before_the_next_one_never_amid_tools() {
        let boundaries = Boundaries::default();
        let control = boundaries.add("r").unwrap();
        assert!(boundaries.add("r").is_none(), "one driver per run");
        control.stop_at_boundary();
        assert!(!fired(&control).await, "not before it is anywhere");
        boundaries.emit(&checkpoint(Boundary::LlmResponse));
        assert!(!fired(&control).await, "tools may run next");
        boundaries.emit(&checkpoint(Boundary::ToolResult));
        assert!(fired(&control).await, "the next step is a model call");

        boundaries.remove("r");
        let control = boundaries.add("r").unwrap();
        boundaries.emit(&event(EventKind::ModelRequest {
            iteration: 1,
            model: "m".into(),
            messages: 1,
            tools: 0,
            stream: false,
        }));
        control.stop_at_boundary();
        assert!(fired(&control).await, "a model call in flight is abandoned");
    }
}
