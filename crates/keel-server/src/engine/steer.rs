//! The `steer` policy: a message for a conversation whose run is working joins that run before
//! its next model call ([`keel_core::steering`]).
//!
//! The message is accepted exactly as under `queue`: a queued run, stored before the caller
//! hears of it. The running run's [`Steering`] is backed by its lane: when the run reaches a
//! boundary it takes the queued runs at the front of the lane (under the lanes lock, so the
//! lane never starts them), and once the boundary that stored their messages has committed they
//! are closed in the store with [`keel_platform::ConversationStore::absorb_queued`]: `cancelled`,
//! "steered into run …", and no reply of their own (the running run answers them). Until then
//! they are still queued in the store; taken and never joined (the run was cancelled at that
//! boundary, its store failed) they go back to the front of the lane when the run stops, and run
//! next. A queued run the running run never took runs next, as under `queue`. So nothing is lost
//! in any race; a crash between the commit and the close can answer a message twice.
//!
//! Only the run's own kind joins: a queued run of the same user with the same options (persona,
//! tools, trust, model). Another person's message in a group waits for its own run, with its own
//! permissions, and so does everything behind it, to keep the lane's order.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::Utc;
use keel_core::{LanePolicy, SteerMessage, Steering};
use keel_platform::QueuedRun;

use super::Engine;

/// What a queued run folded into a running one ends with: its error says `steered into run …`.
pub const STEERED: &str = "steered";

/// The lane-backed steering of one running run.
pub(super) struct LaneSteering {
    engine: Arc<Engine>,
    /// The running run, and what a queued run must share with it to join it.
    running: QueuedRun,
    /// Taken from the lane, not yet joined: the lane's again if the run stops first.
    taken: Mutex<Vec<QueuedRun>>,
}

impl LaneSteering {
    /// The steering of `running` when its conversation's policy is `steer`.
    pub(super) fn of(engine: &Arc<Engine>, running: &QueuedRun) -> Option<Arc<LaneSteering>> {
        let steer = engine
            .lock_lanes()
            .get(&running.session_id)
            .is_some_and(|lane| lane.policy == LanePolicy::Steer);
        steer.then(|| {
            Arc::new(LaneSteering {
                engine: engine.clone(),
                running: QueuedRun {
                    message: String::new(),
                    ..running.clone()
                },
                taken: Mutex::new(Vec::new()),
            })
        })
    }

    /// True when `queued` may join the running run: the same person, asking the same way, and
    /// not a schedule's fire (which is no double text: it waits its turn and answers its slot).
    fn joins(&self, queued: &QueuedRun) -> bool {
        queued.slot.is_none()
            && queued.user_id == self.running.user_id
            && queued.options == self.running.options
    }

    /// Puts what the run took and never joined back at the front of the lane, in order: it
    /// runs next. Called when the run stops, before the lane's next run starts.
    pub(super) fn give_back(&self) {
        let taken = std::mem::take(&mut *self.lock_taken());
        if taken.is_empty() {
            return;
        }
        let mut lanes = self.engine.lock_lanes();
        let lane = lanes.entry(self.running.session_id.clone()).or_default();
        for run in taken.into_iter().rev() {
            lane.queued.push_front(run);
        }
    }

    fn lock_taken(&self) -> std::sync::MutexGuard<'_, Vec<QueuedRun>> {
        self.taken.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Steering for LaneSteering {
    fn pending(&self) -> bool {
        let lanes = self.engine.lock_lanes();
        lanes.get(&self.running.session_id).is_some_and(|lane| {
            lane.policy == LanePolicy::Steer
                && lane.running.as_deref() == Some(self.running.run_id.as_str())
                && lane.queued.front().is_some_and(|next| self.joins(next))
        })
    }

    async fn take(&self) -> Vec<SteerMessage> {
        let mut taken = Vec::new();
        {
            let mut lanes = self.engine.lock_lanes();
            if let Some(lane) = lanes.get_mut(&self.running.session_id)
                && lane.policy == LanePolicy::Steer
                && lane.running.as_deref() == Some(self.running.run_id.as_str())
            {
                while let Some(next) = lane.queued.pop_front() {
                    if !self.joins(&next) {
                        lane.queued.push_front(next);
                        break;
                    }
                    taken.push(next);
                }
            }
        }
        let messages = taken
            .iter()
            .map(|run| SteerMessage {
                id: run.run_id.clone(),
                text: run.message.clone(),
                at: run.enqueued_at,
            })
            .collect();
        self.lock_taken().extend(taken);
        messages
    }

    async fn joined(&self, joined: &[SteerMessage]) {
        let ids: Vec<String> = joined.iter().map(|m| m.id.clone()).collect();
        self.lock_taken().retain(|run| !ids.contains(&run.run_id));
        let into = &self.running.run_id;
        match (self.engine.store)
            .absorb_queued(into, &ids, None, STEERED, Utc::now())
            .await
        {
            // A run cancelled meanwhile is not absorbed; its message joined all the same.
            Ok(absorbed) => {
                for run_id in &absorbed {
                    self.engine.metrics.runs_ended_queued("steered", 1);
                    self.engine.publish_stored(run_id).await;
                }
            }
            // Still queued in the store: a restart runs them again (twice, never lost).
            Err(error) => {
                tracing::error!(%error, run_id = %into, ?ids, "cannot close the steered runs");
            }
        }
    }
}
