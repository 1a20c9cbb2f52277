//! This process's view of each conversation's lane: the run it drives now and the runs queued
//! behind it, in arrival order — the same order as the store's queue, which stays the truth
//! across restarts (it is read back at start).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

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

    /// True when nothing runs or waits: the lane can be forgotten.
    pub fn is_idle(&self) -> bool {
        self.running.is_none() && self.queued.is_empty()
    }
}

/// Every lane this process knows.
pub type Lanes = HashMap<String, Lane>;
