//! Live events: every event of the runs this process drives, numbered as the SSE streams name
//! them ([`EventId`]), kept per run while it is live and for a while after, so a subscriber can
//! join late or reconnect and miss nothing. `emit` is called from inside runs: it serializes
//! the event, takes one short lock and wakes subscribers; it never waits on one.

mod id;
pub mod stream;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_core::{AgentState, Event, EventSink, Store};
use tokio::sync::{broadcast, watch};

pub use id::{EventId, parse_conversation_id};

use crate::live::LiveEvents;

/// How long a run's events stay in memory after it stopped being driven.
pub const RETENTION: Duration = Duration::from_secs(300);

/// One SSE frame of a run.
#[derive(Debug)]
pub struct Frame {
    /// The run.
    pub run_id: String,
    /// Its id in the run's stream.
    pub id: EventId,
    /// The event's stable name.
    pub name: &'static str,
    /// The event as JSON.
    pub data: String,
}

/// The events of one run driven here.
struct RunLog {
    /// Durable events stored before this process drove the run.
    stored_before: u64,
    frames: Vec<Arc<Frame>>,
    /// Wakes the run's subscribers: the number of frames, and the state once it stopped.
    changed: watch::Sender<(usize, Option<AgentState>)>,
}

/// The live-event hub: an event sink of the agent, and the source of the SSE streams.
pub struct Hub {
    store: Arc<dyn Store>,
    retention: Duration,
    runs: Arc<Mutex<HashMap<String, RunLog>>>,
    conversations: Mutex<HashMap<String, broadcast::Sender<Arc<Frame>>>>,
    /// Streams waiting for a run to start being driven here, by run: woken when it does.
    awaited: Mutex<HashMap<String, watch::Sender<bool>>>,
    /// Set when the daemon shuts down: every stream ends.
    closed: watch::Sender<bool>,
}

/// What a run's subscriber gets: the frames so far and a way to wait for more.
pub(crate) struct Snapshot {
    /// Durable events stored before this process drove the run.
    pub stored_before: u64,
    /// Every frame kept.
    pub frames: Vec<Arc<Frame>>,
    /// The state it stopped in, if it did.
    pub stopped: Option<AgentState>,
    /// Changes when a frame is added or the run stops.
    pub changes: watch::Receiver<(usize, Option<AgentState>)>,
}

impl Hub {
    /// A hub reading stored events from `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self::with_retention(store, RETENTION)
    }

    /// A hub keeping a stopped run's events for `retention`.
    pub fn with_retention(store: Arc<dyn Store>, retention: Duration) -> Self {
        Hub {
            store,
            retention,
            runs: Arc::new(Mutex::new(HashMap::new())),
            conversations: Mutex::new(HashMap::new()),
            awaited: Mutex::new(HashMap::new()),
            closed: watch::channel(false).0,
        }
    }

    /// The store it reads stored events from.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The frames of `run_id` from index `from`, and whether it stopped; `None` when it is not
    /// kept here.
    pub(crate) fn snapshot(&self, run_id: &str) -> Option<Snapshot> {
        let runs = self.lock_runs();
        let log = runs.get(run_id)?;
        Some(Snapshot {
            stored_before: log.stored_before,
            frames: log.frames.clone(),
            stopped: log.changed.borrow().1,
            changes: log.changed.subscribe(),
        })
    }

    /// Frames of every run of `session_id` driven here from now on.
    pub(crate) fn follow_conversation(&self, session_id: &str) -> broadcast::Receiver<Arc<Frame>> {
        self.lock_conversations()
            .entry(session_id.to_string())
            .or_insert_with(|| broadcast::channel(4096).0)
            .subscribe()
    }

    /// Becomes true when `run_id` starts being driven here. Subscribe before looking for the
    /// run, so a start in between is not missed; only that run's streams wake.
    pub(crate) fn start_of(&self, run_id: &str) -> watch::Receiver<bool> {
        self.lock_awaited()
            .entry(run_id.to_string())
            .or_insert_with(|| watch::channel(false).0)
            .subscribe()
    }

    /// Forgets the start of `run_id` when no stream waits for it any more.
    pub(crate) fn forget_start(&self, run_id: &str) {
        let mut awaited = self.lock_awaited();
        if awaited
            .get(run_id)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            awaited.remove(run_id);
        }
    }

    fn lock_awaited(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<bool>>> {
        self.awaited.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Becomes true when the daemon shuts down.
    pub(crate) fn closing(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// The id of the last event of `run_id` kept here.
    pub fn last_id(&self, run_id: &str) -> Option<EventId> {
        let runs = self.lock_runs();
        let log = runs.get(run_id)?;
        Some(log.frames.last().map_or(
            EventId {
                seq: log.stored_before,
                delta: 0,
            },
            |frame| frame.id,
        ))
    }

    /// Runs kept here (live, or stopped within the retention).
    pub fn kept_runs(&self) -> usize {
        self.lock_runs().len()
    }

    fn lock_runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunLog>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_conversations(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, broadcast::Sender<Arc<Frame>>>> {
        self.conversations.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl EventSink for Hub {
    fn emit(&self, event: &Event) {
        let Ok(data) = serde_json::to_string(event) else {
            return;
        };
        let frame = {
            let mut runs = self.lock_runs();
            let Some(log) = runs.get_mut(&event.run_id) else {
                return;
            };
            let last = log.frames.last().map_or(
                EventId {
                    seq: log.stored_before,
                    delta: 0,
                },
                |frame| frame.id,
            );
            let id = if !event.kind.is_durable() {
                EventId {
                    seq: last.seq,
                    delta: last.delta + 1,
                }
            } else {
                EventId {
                    seq: last.seq + 1,
                    delta: 0,
                }
            };
            let frame = Arc::new(Frame {
                run_id: event.run_id.clone(),
                id,
                name: event.kind.name(),
                data,
            });
            log.frames.push(frame.clone());
            let count = log.frames.len();
            log.changed.send_modify(|(frames, _)| *frames = count);
            frame
        };
        if let Some(conversation) = self.lock_conversations().get(&event.session_id) {
            let _ = conversation.send(frame);
        }
    }
}

impl LiveEvents for Hub {
    fn run_starting(&self, run_id: &str, _session_id: &str, stored_events: u64) {
        self.lock_runs().insert(
            run_id.to_string(),
            RunLog {
                stored_before: stored_events,
                frames: Vec::new(),
                changed: watch::channel((0, None)).0,
            },
        );
        if let Some(awaited) = self.lock_awaited().remove(run_id) {
            awaited.send_replace(true);
        }
    }

    fn run_stopped(&self, run_id: &str, state: AgentState) {
        {
            let runs = self.lock_runs();
            let Some(log) = runs.get(run_id) else { return };
            log.changed
                .send_modify(|(_, stopped)| *stopped = Some(state));
        }
        // Dropped after the retention, unless the run was driven again since.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let retention = self.retention;
            let run_id = run_id.to_string();
            let weak = Arc::downgrade(&self.runs);
            runtime.spawn(async move {
                tokio::time::sleep(retention).await;
                if let Some(runs) = weak.upgrade() {
                    let mut runs = runs.lock().unwrap_or_else(|e| e.into_inner());
                    if runs
                        .get(&run_id)
                        .is_some_and(|log| log.changed.borrow().1.is_some())
                    {
                        runs.remove(&run_id);
                    }
                }
            });
        }
    }

    fn shutdown(&self) {
        self.closed.send_replace(true);
    }
}
