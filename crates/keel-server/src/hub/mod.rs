//! Live events: every event of the runs this process drives, numbered as the SSE streams name
//! them ([`EventId`]), kept per run while it is live and for a while after, so a subscriber can
//! join late or reconnect and miss nothing. `emit` is called from inside runs: it serializes
//! the event, takes one short lock and wakes subscribers; it never waits on one.
//!
//! A long-lived daemon must not grow with the runs it finished: a stopped run's events are
//! kept for [`RETENTION`] and at most [`MAX_STOPPED`] stopped runs are kept at once (the events
//! are in the store; a late subscriber reads them there), and a conversation's broadcast
//! channel goes when its last follower does.

mod id;
pub mod stream;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use keel_core::{AgentState, Event, EventSink};
use keel_platform::DaemonStore;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

pub use id::{EventId, parse_conversation_id};

use crate::live::LiveEvents;

/// How long a run's events stay in memory after it stopped being driven.
pub const RETENTION: Duration = Duration::from_secs(300);

/// The most stopped runs whose events stay in memory: past it, the longest stopped go first.
pub const MAX_STOPPED: usize = 1_024;

/// Frames a conversation's follower may fall behind by before it lags (its SSE stream then
/// ends, and the client reconnects with its last id and reads the rest from the store and the
/// kept frames). Tokio allocates every slot when the channel is made, 32 bytes each, and every
/// followed conversation has one: at 4,096 an idle conversation stream cost the daemon 128 KiB
/// (1.4 GB for 10,000), at 128 it costs 4 KiB. A follower's stream task drains it into its own
/// queue of 256 frames at once, so lagging takes a client that stopped reading ~380 frames ago.
pub const FOLLOW_BUFFER: usize = 128;

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
    /// Told once to live followers and never stored ([`Hub::announce`]): sent without an SSE
    /// id, so a client that reconnects goes on from the stored event before it.
    pub announced: bool,
}

/// The events of one run driven here.
struct RunLog {
    /// Durable events stored before this process drove the run.
    stored_before: u64,
    frames: Vec<Arc<Frame>>,
    /// Wakes the run's subscribers: the number of frames, and the state once it stopped.
    changed: watch::Sender<(usize, Option<AgentState>)>,
    /// The stamp of its stop ([`Kept::stopped`]) once it stopped being driven.
    stop: Option<u64>,
}

/// One stop of a run, in [`Kept::stopped`].
struct Stop {
    run_id: String,
    /// Tells this stop from a later one of the same run (driven again since).
    stamp: u64,
    at: Instant,
}

/// The runs whose events are kept, and the order their drivers stopped in.
#[derive(Default)]
struct Kept {
    logs: HashMap<String, RunLog>,
    /// Stops, oldest first; an entry whose run was driven again since is stale and only waits
    /// its turn to be dropped.
    stopped: VecDeque<Stop>,
    next_stamp: u64,
    /// Whether a task is dropping the runs whose retention ends.
    sweeping: bool,
}

impl Kept {
    /// Drops the runs stopped for `retention` by `now`, and the longest stopped past `max`;
    /// returns when the next retention ends.
    fn prune(&mut self, now: Instant, retention: Duration, max: usize) -> Option<Instant> {
        while let Some(oldest) = self.stopped.front() {
            if self.stopped.len() <= max && oldest.at + retention > now {
                return Some(oldest.at + retention);
            }
            if self
                .logs
                .get(&oldest.run_id)
                .is_some_and(|log| log.stop == Some(oldest.stamp))
            {
                self.logs.remove(&oldest.run_id);
            }
            self.stopped.pop_front();
        }
        None
    }
}

/// The broadcast channels of the conversations being followed, by conversation.
type Followed = Mutex<HashMap<String, broadcast::Sender<Arc<Frame>>>>;

/// The live-event hub: an event sink of the agent, and the source of the SSE streams.
pub struct Hub {
    store: Arc<dyn DaemonStore>,
    retention: Duration,
    max_stopped: usize,
    runs: Arc<Mutex<Kept>>,
    conversations: Arc<Followed>,
    /// Streams waiting for a run to start being driven here, by run: woken when it does.
    awaited: Mutex<HashMap<String, watch::Sender<bool>>>,
    /// Set when the daemon shuts down: every stream ends.
    closed: watch::Sender<bool>,
    /// Frames announced so far ([`Hub::announce`]), for their ids.
    announced: std::sync::atomic::AtomicU64,
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
    pub fn new(store: Arc<dyn DaemonStore>) -> Self {
        Self::with_retention(store, RETENTION)
    }

    /// A hub keeping a stopped run's events for `retention`, of [`MAX_STOPPED`] runs at most.
    pub fn with_retention(store: Arc<dyn DaemonStore>, retention: Duration) -> Self {
        Self::with_limits(store, retention, MAX_STOPPED)
    }

    /// A hub keeping a stopped run's events for `retention`, of `max_stopped` runs at most
    /// (at least one).
    pub fn with_limits(
        store: Arc<dyn DaemonStore>,
        retention: Duration,
        max_stopped: usize,
    ) -> Self {
        Hub {
            store,
            retention,
            max_stopped: max_stopped.max(1),
            runs: Arc::new(Mutex::new(Kept::default())),
            conversations: Arc::new(Mutex::new(HashMap::new())),
            awaited: Mutex::new(HashMap::new()),
            closed: watch::channel(false).0,
            announced: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The store it reads stored events from.
    pub fn store(&self) -> &Arc<dyn DaemonStore> {
        &self.store
    }

    /// The frames of `run_id` from index `from`, and whether it stopped; `None` when it is not
    /// kept here.
    pub(crate) fn snapshot(&self, run_id: &str) -> Option<Snapshot> {
        let runs = self.lock_runs();
        let log = runs.logs.get(run_id)?;
        Some(Snapshot {
            stored_before: log.stored_before,
            frames: log.frames.clone(),
            stopped: log.changed.borrow().1,
            changes: log.changed.subscribe(),
        })
    }

    /// Frames of every run of `session_id` driven here from now on, until the [`Following`]
    /// is dropped (a channel showing a run's answer while it is written follows it so).
    pub fn follow_conversation(&self, session_id: &str) -> Following {
        let receiver = lock(&self.conversations)
            .entry(session_id.to_string())
            .or_insert_with(|| broadcast::channel(FOLLOW_BUFFER).0)
            .subscribe();
        Following {
            receiver,
            conversations: Arc::downgrade(&self.conversations),
            session_id: session_id.to_string(),
        }
    }

    /// Tells `session_id`'s live followers about something that is no run's event (a schedule
    /// slot missed or refused, a schedule paused): a frame named `name` of the pseudo-run
    /// `source` (e.g. `schedule:ID`), numbered after the ones before it, never stored.
    pub fn announce(&self, session_id: &str, source: &str, name: &'static str, data: String) {
        let Some(conversation) = lock(&self.conversations).get(session_id).cloned() else {
            return;
        };
        let delta = self
            .announced
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let _ = conversation.send(Arc::new(Frame {
            run_id: source.to_string(),
            id: EventId { seq: 0, delta },
            name,
            data,
            announced: true,
        }));
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

    /// The frames of `run_id` kept here so far (none when it is not kept here): with
    /// [`Hub::follow_conversation`] called first, a follower misses nothing of a run that
    /// started before it followed (it skips the live frames whose id it has seen).
    pub fn frames_of(&self, run_id: &str) -> Vec<Arc<Frame>> {
        self.lock_runs()
            .logs
            .get(run_id)
            .map(|log| log.frames.clone())
            .unwrap_or_default()
    }

    /// The id of the last event of `run_id` kept here.
    pub fn last_id(&self, run_id: &str) -> Option<EventId> {
        let runs = self.lock_runs();
        let log = runs.logs.get(run_id)?;
        Some(log.frames.last().map_or(
            EventId {
                seq: log.stored_before,
                delta: 0,
            },
            |frame| frame.id,
        ))
    }

    /// Runs kept here (live, or stopped within the retention and the count).
    pub fn kept_runs(&self) -> usize {
        self.lock_runs().logs.len()
    }

    /// The sizes of what the hub holds, to check that they stay bounded.
    pub fn sizes(&self) -> HubSizes {
        let runs = self.lock_runs();
        HubSizes {
            kept_runs: runs.logs.len(),
            stops: runs.stopped.len(),
            followed_conversations: lock(&self.conversations).len(),
            awaited_starts: self.lock_awaited().len(),
        }
    }

    fn lock_runs(&self) -> std::sync::MutexGuard<'_, Kept> {
        lock(&self.runs)
    }
}

/// What a [`Hub`] holds, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HubSizes {
    /// Runs whose events are kept (live, or stopped within the retention and the count).
    pub kept_runs: usize,
    /// Stops waiting for their retention to end (at most the count bound).
    pub stops: usize,
    /// Conversations with a broadcast channel: some stream follows them.
    pub followed_conversations: usize,
    /// Runs some stream waits to see start.
    pub awaited_starts: usize,
}

/// A conversation's live frames for one follower; the conversation's channel goes when its
/// last follower is dropped.
pub struct Following {
    receiver: broadcast::Receiver<Arc<Frame>>,
    conversations: Weak<Followed>,
    session_id: String,
}

impl Following {
    /// The next frame of a run of the conversation; `Lagged` when this follower fell behind
    /// (frames were skipped), `Closed` never while the hub lives.
    pub async fn recv(&mut self) -> Result<Arc<Frame>, broadcast::error::RecvError> {
        self.receiver.recv().await
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        let Some(conversations) = self.conversations.upgrade() else {
            return;
        };
        let mut conversations = lock(&conversations);
        // Followers subscribe under this lock: one receiver left is this one.
        if conversations
            .get(&self.session_id)
            .is_some_and(|sender| sender.receiver_count() <= 1)
        {
            conversations.remove(&self.session_id);
        }
    }
}

/// Locks `mutex`, through a panic of a previous holder (the maps stay consistent: every
/// change is one insert or remove).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops the runs whose retention ended, sleeping until the next one ends, while any is kept.
async fn sweep(kept: Weak<Mutex<Kept>>, retention: Duration, max: usize) {
    loop {
        let next = {
            let Some(kept) = kept.upgrade() else { return };
            let mut kept = lock(&kept);
            let next = kept.prune(Instant::now(), retention, max);
            if next.is_none() {
                kept.sweeping = false;
            }
            next
        };
        let Some(deadline) = next else { return };
        tokio::time::sleep_until(deadline).await;
    }
}

impl EventSink for Hub {
    fn emit(&self, event: &Event) {
        let Ok(data) = serde_json::to_string(event) else {
            return;
        };
        let frame = {
            let mut runs = self.lock_runs();
            let Some(log) = runs.logs.get_mut(&event.run_id) else {
                drop(runs);
                // A lane's decision about a run not driven yet (queued), or about no run (a
                // message refused), goes to the conversation's followers only, numbered like
                // the schedules' announcements.
                if event.run_id.is_empty() || event.kind.name().starts_with("agent.lane.") {
                    let source = match event.run_id.as_str() {
                        "" => "lane",
                        run => run,
                    };
                    self.announce(&event.session_id, source, event.kind.name(), data);
                }
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
                announced: false,
            });
            log.frames.push(frame.clone());
            let count = log.frames.len();
            log.changed.send_modify(|(frames, _)| *frames = count);
            frame
        };
        if let Some(conversation) = lock(&self.conversations).get(&event.session_id) {
            let _ = conversation.send(frame);
        }
    }
}

impl LiveEvents for Hub {
    fn run_starting(&self, run_id: &str, _session_id: &str, stored_events: u64) {
        self.lock_runs().logs.insert(
            run_id.to_string(),
            RunLog {
                stored_before: stored_events,
                frames: Vec::new(),
                changed: watch::channel((0, None)).0,
                stop: None,
            },
        );
        if let Some(awaited) = self.lock_awaited().remove(run_id) {
            awaited.send_replace(true);
        }
    }

    fn run_stopped(&self, run_id: &str, state: AgentState) {
        let start_sweeping = {
            let mut runs = self.lock_runs();
            let stamp = runs.next_stamp;
            let Some(log) = runs.logs.get_mut(run_id) else {
                return;
            };
            log.changed
                .send_modify(|(_, stopped)| *stopped = Some(state));
            // Dropped after the retention (or sooner past the count), unless the run was
            // driven again since.
            log.stop = Some(stamp);
            runs.next_stamp += 1;
            let now = Instant::now();
            runs.stopped.push_back(Stop {
                run_id: run_id.to_string(),
                stamp,
                at: now,
            });
            runs.prune(now, self.retention, self.max_stopped);
            let runtime = tokio::runtime::Handle::try_current().ok();
            let start = !runs.sweeping && runtime.is_some();
            runs.sweeping |= start;
            runtime.filter(|_| start)
        };
        if let Some(runtime) = start_sweeping {
            runtime.spawn(sweep(
                Arc::downgrade(&self.runs),
                self.retention,
                self.max_stopped,
            ));
        }
    }

    fn shutdown(&self) {
        self.closed.send_replace(true);
    }
}

#[cfg(test)]
mod tests;
