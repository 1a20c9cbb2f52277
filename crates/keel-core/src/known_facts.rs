//! Known facts (DESIGN.md section 11): durable facts about a user, recalled into the system
//! prompt by the `keel-memory` crate. This module holds what the loop calls: the [`Recall`]
//! hook before a run and the [`Learn`] hook after it. The fact record and its store are
//! keel-platform's.

use async_trait::async_trait;

/// The user whose facts a run without a user (the machine's owner, at the CLI) reads and
/// writes.
pub const OWNER: &str = "owner";

/// What was recalled for a run: the system prompt section and the event that says why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recalled {
    /// The "known facts" section of the system prompt; empty when nothing was recalled.
    pub prompt_section: String,
    /// The `agent.memory.retrieved` event's payload: every piece with its scores.
    pub detail: serde_json::Value,
}

/// Recalls what a run should know about its user before it starts (implemented by
/// `keel-memory`). Never fails a run: an implementation that cannot reach its store or its
/// embeddings endpoint says so in [`Recalled::detail`] and recalls what it can.
#[async_trait]
pub trait Recall: Send + Sync {
    /// What to recall for `message`, sent by `user_id` ([`OWNER`] when the run has no user)
    /// in session `session_id` (whose own messages are already in the context).
    async fn recall(&self, user_id: &str, session_id: &str, message: &str) -> Recalled;
}

/// A run that has ended, for memory to learn from.
#[derive(Clone, Copy, Debug)]
pub struct FinishedRun<'a> {
    /// Its user ([`OWNER`] when it had none).
    pub user_id: &'a str,
    /// Its session.
    pub session_id: &'a str,
    /// The run.
    pub run_id: &'a str,
    /// False when its message came from an untrusted source (an email, an event): nothing it
    /// says is taken as a fact about the user.
    pub trusted: bool,
    /// The messages it stored, in order.
    pub messages: &'a [crate::store::StoredMessage],
}

/// Learns from a run once it has ended (implemented by `keel-memory`: facts extracted from
/// what the user said, messages scored by a model, embeddings of the messages that matter).
/// The run's outcome is already stored; learning never changes it and never fails it.
#[async_trait]
pub trait Learn: Send + Sync {
    /// Learns from `run`; returns the `agent.memory.learned` event's payload (what was
    /// learned, what failed), or `None` when there was nothing to do.
    async fn learn(&self, run: &FinishedRun<'_>) -> Option<serde_json::Value>;
}
