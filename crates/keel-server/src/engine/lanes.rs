//! This process's view of each conversation's lane: the run it drives now and the runs queued
//! behind it, in arrival order — the same order as the store's queue, which stays the truth
//! across restarts (it is read back at start).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use keel_core::LanePolicy;
use keel_platform::QueuedRun;

/// One conversation's lane.
#[derive(Debug, Default)]
pub struct Lane {
    /// The queued run being started or driven, if any.
    pub running: Option<String>,
    /// Runs waiting, oldest first.
    pub queued: VecDeque<QueuedRun>,
    /// Serializes the accepting of messages, so arrival order is the order of the queue.
    pub accepting: Arc<tokio::sync::Mutex<()>>,
    /// The conversation's policy, as its last message found it (`queue` for a lane read back
    /// at start).
    pub policy: LanePolicy,
    /// Under `collect`: the lane's next run waits until then (the quiet window after the first
    /// message of an idle lane, restarted by each message).
    pub quiet_until: Option<tokio::time::Instant>,
}

impl Lane {
    /// Runs ahead of a run just queued at the back: the running one and those queued before it.
    pub fn ahead_of_last(&self) -> usize {
        usize::from(self.running.is_some()) + self.queued.len().saturating_sub(1)
    }

    /// Runs ahead of the queued run `run_id`, if it is queued.
    pub fn position(&self, run_id: &str) -> Option<usize> {
        self.queued
            .iter()
            .position(|queued| queued.run_id == run_id)
            .map(|at| at + usize::from(self.running.is_some()))
    }

    /// Takes `run_id` out of the queue; true when it was there.
    pub fn remove(&mut self, run_id: &str) -> bool {
        let before = self.queued.len();
        self.queued.retain(|queued| queued.run_id != run_id);
        self.queued.len() != before
    }

    /// Whether a message finds the lane busy (a run running or queued): `reject` refuses it.
    pub fn is_busy(&self) -> bool {
        !self.is_idle()
    }

    /// Under `collect`, after a message was queued: opens or restarts the quiet window when
    /// nothing runs (a run that works collects what arrives meanwhile anyway). True when the
    /// lane must wait, until `now + quiet`.
    pub fn hold_for_quiet(
        &mut self,
        now: tokio::time::Instant,
        quiet: std::time::Duration,
    ) -> bool {
        let opening = self.queued.len() == 1 || self.quiet_until.is_some();
        if quiet.is_zero() || self.running.is_some() || !opening {
            return false;
        }
        self.quiet_until = Some(now + quiet);
        true
    }

    /// Whether the quiet window still holds the lane's next run at `now`.
    pub fn is_quiet(&self, now: tokio::time::Instant) -> bool {
        self.quiet_until.is_some_and(|until| now < until)
    }

    /// True when nothing runs or waits: the lane can be forgotten.
    pub fn is_idle(&self) -> bool {
        self.running.is_none() && self.queued.is_empty()
    }
}

/// Every lane this process knows.
pub type Lanes = HashMap<String, Lane>;
