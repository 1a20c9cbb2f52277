//! Known facts as extensions (DESIGN.md section 11): what a run should know about its user is
//! recalled before it starts (into its turn context, never the system prompt), and what it said
//! is learned from once it has ended. The recalling and learning themselves are `keel-memory`'s,
//! behind [`Recall`] and [`Learn`]; the fact record and its store are keel-platform's.

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::event::EventKind;
use keel_core::extension::{Extension, FinishedRun, RunStart};
use keel_core::store::OWNER;

/// Recalls known facts for each run before it starts: not for a run refused by its budget,
/// nor for an untrusted session (it is shown nothing of the user's private memory).
pub struct FactRecall(pub Arc<dyn Recall>);

#[async_trait]
impl Extension for FactRecall {
    fn name(&self) -> &'static str {
        "known_facts"
    }

    async fn prepare(&self, start: &mut RunStart<'_>) {
        if start.refusal.is_some() || start.settings.untrusted {
            return;
        }
        let user = start.user_id.unwrap_or(OWNER);
        let recalled = self.0.recall(user, start.session_id, start.message).await;
        if !recalled.prompt_section.trim_end().is_empty() {
            start.turn_sections.push(recalled.prompt_section);
        }
        start.opening_events.push(EventKind::MemoryRetrieved {
            detail: recalled.detail,
        });
    }
}

/// Learns from each run once it has ended.
pub struct Learning(pub Arc<dyn Learn>);

#[async_trait]
impl Extension for Learning {
    fn name(&self) -> &'static str {
        "learning"
    }

    async fn finished(&self, run: &FinishedRun<'_>) -> Vec<EventKind> {
        let finished = FactsRun {
            user_id: run.user_id.unwrap_or(OWNER),
            session_id: run.session_id,
            run_id: run.run_id,
            trusted: run.trusted,
            messages: run.messages,
        };
        match self.0.learn(&finished).await {
            Some(detail) => vec![EventKind::MemoryLearned { detail }],
            None => Vec::new(),
        }
    }
}

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
    /// What to recall for `message`, sent by `user_id` ([`keel_core::store::OWNER`] when the run has no user)
    /// in session `session_id` (whose own messages are already in the context).
    async fn recall(&self, user_id: &str, session_id: &str, message: &str) -> Recalled;
}

/// A run that has ended, for memory to learn from.
#[derive(Clone, Copy, Debug)]
pub struct FactsRun<'a> {
    /// Its user ([`keel_core::store::OWNER`] when it had none).
    pub user_id: &'a str,
    /// Its session.
    pub session_id: &'a str,
    /// The run.
    pub run_id: &'a str,
    /// False when its message came from an untrusted source (an email, an event): nothing it
    /// says is taken as a fact about the user.
    pub trusted: bool,
    /// The messages it stored, in order.
    pub messages: &'a [keel_core::store::StoredMessage],
}

/// Learns from a run once it has ended (implemented by `keel-memory`: facts extracted from
/// what the user said, messages scored by a model, embeddings of the messages that matter).
/// The run's outcome is already stored; learning never changes it and never fails it.
#[async_trait]
pub trait Learn: Send + Sync {
    /// Learns from `run`; returns the `agent.memory.learned` event's payload (what was
    /// learned, what failed), or `None` when there was nothing to do.
    async fn learn(&self, run: &FactsRun<'_>) -> Option<serde_json::Value>;
}
