//! The human in the loop: how a run puts a question to a person.

use async_trait::async_trait;

/// Somewhere a question can be put to a human: the chat prompt, a UI, a messaging platform.
#[async_trait]
pub trait HumanChannel: Send + Sync {
    /// Puts `question` to the human and waits for the answer; `None` when no one can answer
    /// now (the run then waits as `waiting_on_human` until `keel answer`).
    async fn ask(&self, question: &str) -> Option<String>;
}
