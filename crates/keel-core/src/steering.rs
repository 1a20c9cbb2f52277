//! Steering: messages that join a run while it works, instead of waiting for it to end.
//!
//! Whoever starts a run may give it a [`Steering`] (with [`crate::RunRequest`] or
//! [`crate::ResumeOptions`]): a source of messages the user sent after the run began. The kernel
//! knows nothing of where they come from (the daemon's lanes, a test); it only promises when
//! they join:
//!
//! - **Before the next model call.** At the boundary before a model call the driver asks
//!   [`Steering::pending`]; when it says yes, it [`Steering::take`]s the messages, the run
//!   appends them as user messages, in order, and the call is made with them. They are stored
//!   with that boundary's checkpoint like any message of the run, count in its context and in
//!   its tokens, and the run's events say so (`agent.lane.steered`).
//! - **Calls not started are skipped.** From the moment a steer is pending, the tool executor
//!   starts no more calls of the current batch: each gets the result [`SKIPPED_FOR_STEER`]. A
//!   call already running finishes and its result is recorded: a side effect is never cut.
//! - **Never lost.** Only after the boundary that stored them has committed does the driver
//!   tell the source ([`Steering::joined`]), so the source forgets them (the daemon closes their
//!   queued runs) only once they are the run's. A crash in between leaves them both in the run
//!   and with the source: they may be answered twice, never not at all. Messages taken and never
//!   joined (the run was cancelled at that boundary, or its store failed) are the source's
//!   again.
//! - **A run about to finish takes nothing.** When the model answers without calling a tool,
//!   the run ends with that answer; messages pending then stay with the source (the daemon runs
//!   them next, as their own run). So do messages pending while the run is summarizing at its
//!   time limit, saving memory before a compaction, or continuing an answer cut at its output
//!   limit: these turns end or resume the run's own work, and a new message would be lost in
//!   them.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// What a call of the batch in flight gets instead of running, once a steer is pending.
pub const SKIPPED_FOR_STEER: &str = "skipped: the user sent a new message and changed course \
before this call ran; it was not run. Read their message before doing anything else.";

/// A message that joins a running run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SteerMessage {
    /// The source's name for it (the daemon: the queued run it arrived as), for the events and
    /// for [`Steering::joined`].
    pub id: String,
    /// What the user wrote.
    pub text: String,
    /// When it arrived.
    pub at: DateTime<Utc>,
}

/// A source of messages that join a running run (see the module documentation).
#[async_trait]
pub trait Steering: Send + Sync {
    /// True when messages wait to join the run. Cheap: asked before every tool call starts and
    /// before every model call.
    fn pending(&self) -> bool;

    /// The waiting messages, oldest first; from now on they are the run's, until the boundary
    /// that stores them commits ([`Steering::joined`]) or the run gives them back by dropping
    /// the steering. Empty when none waits any more.
    async fn take(&self) -> Vec<SteerMessage>;

    /// `taken` (from [`Steering::take`]) are stored in the run: the source may forget them.
    /// Not called for messages the run stored and then was cancelled at the same boundary: the
    /// source keeps those (they may then be answered twice, never not at all).
    async fn joined(&self, taken: &[SteerMessage]) {
        let _ = taken;
    }
}

impl std::fmt::Debug for dyn Steering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Steering")
            .field("pending", &self.pending())
            .finish()
    }
}
