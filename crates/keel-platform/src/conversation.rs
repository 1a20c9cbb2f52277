//! Conversations as the daemon sees them: who owns one, the queue of runs waiting for the
//! conversation's lane ([`QueuedRun`]), and how conversations and runs are listed. The lane
//! itself (one active run per conversation) and how a new message treats a running run
//! ([`LanePolicy`]) are keel-core's ([`keel_core::lane`]).

use chrono::{DateTime, Utc};
use keel_core::lane::LanePolicy;
use keel_core::{PlatformPlace, RunOptions};
use serde::{Deserialize, Serialize};

/// A conversation to create.
#[derive(Clone, Debug, PartialEq)]
pub struct NewConversation {
    /// Its id.
    pub id: String,
    /// The user it belongs to; `None` for one made by an admin for no user.
    pub owner: Option<String>,
    /// How a message that arrives while it runs is treated.
    pub lane_policy: LanePolicy,
    /// When it is created.
    pub at: DateTime<Utc>,
    /// Its place on a platform, for one an incoming platform message makes.
    pub place: Option<PlatformPlace>,
    /// False for a conversation from an untrusted source (see [`keel_core::SessionInfo::trusted`]).
    pub trusted: bool,
}

/// A message accepted for a conversation, waiting in its lane's queue until its run starts.
/// It is durable: a daemon that dies with runs queued starts them when it comes back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueuedRun {
    /// The run it will be.
    pub run_id: String,
    /// Its conversation.
    pub session_id: String,
    /// The user the run is for (their budget applies).
    pub user_id: Option<String>,
    /// The message, as the run will send it.
    pub message: String,
    /// When it was accepted.
    pub enqueued_at: DateTime<Utc>,
    /// Provider the run will use, for its `queued` run record.
    pub provider: String,
    /// Model the run will ask for, for its `queued` run record.
    pub model: String,
    /// What the incoming-message pipeline chose for the run (persona, trust, place).
    #[serde(default)]
    pub options: RunOptions,
    /// The platform event it came from, recorded with it so that a redelivery is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbound: Option<crate::channel::InboundKey>,
    /// The schedule slot it fires, recorded `fired` with it so that a slot runs once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<crate::schedule::SlotKey>,
}

/// What [`crate::ConversationStore::enqueue_run`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnqueueOutcome {
    /// The run is queued; `ahead` queued runs of the same conversation are before it.
    Queued {
        /// Queued runs before it (the running one not counted).
        ahead: usize,
    },
    /// The lane's queue already holds `limit` runs: nothing was stored.
    Full {
        /// Runs waiting in the queue.
        queued: usize,
    },
    /// The run's inbound event was received before, or its schedule slot was recorded before
    /// (fired, missed or refused): nothing was stored.
    Duplicate {
        /// The run the first delivery (or the slot's fire) became; empty for a slot recorded
        /// without a run (missed, refused).
        run_id: String,
    },
}

/// What [`crate::ConversationStore::claim_queued`] takes: queued runs for one worker, each with
/// its conversation's lane claimed for it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueueClaim<'a> {
    /// The worker claiming, as it claims lanes (e.g. `pid 4242 on host`).
    pub worker: &'a str,
    /// Now.
    pub at: DateTime<Utc>,
    /// A lane holder silent this long lost its worker: its lane is free to take (the rules of
    /// [`keel_core::lane::lane_is_held`]).
    pub stale_after: chrono::Duration,
    /// At most this many runs (the worker's free places).
    pub limit: usize,
}

/// Which conversations to list, newest first (by creation, then id).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConversationFilter {
    /// Only this user's conversations.
    pub owner: Option<String>,
    /// Only conversations older than the one with this id (the previous page's last).
    pub before: Option<String>,
    /// At most this many.
    pub limit: usize,
}

/// Which runs to list, newest first (by start, then id).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunFilter {
    /// Only runs of this conversation.
    pub session_id: Option<String>,
    /// Only runs in this state.
    pub state: Option<keel_core::AgentState>,
    /// Only runs of conversations this user owns.
    pub owner: Option<String>,
    /// Only runs older than the one with this id (the previous page's last).
    pub before: Option<String>,
    /// At most this many.
    pub limit: usize,
}

/// What a queued run folded into another ends with, as its error (see
/// [`crate::ConversationStore::absorb_queued`]): `"{how} into run {into}"`, e.g. `collected
/// into run 0190…`.
pub fn absorbed_reason(how: &str, into: &str) -> String {
    format!("{how} into run {into}")
}
