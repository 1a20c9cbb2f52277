//! The human in the loop: how a run puts a question to a person, or asks one to approve a call.

use async_trait::async_trait;

use crate::approval::{ApprovalDecision, PendingApproval};

/// Somewhere a question can be put to a human: the chat prompt, a UI, a messaging platform.
#[async_trait]
pub trait HumanChannel: Send + Sync {
    /// Puts `question` to the human and waits for the answer; `None` when no one can answer
    /// now (the run then waits as `waiting_on_human` until `keel answer`).
    async fn ask(&self, question: &str) -> Option<String>;

    /// Asks the human whether `call` may run and waits for the decision; `None` (the default)
    /// when no one can decide now (the run then waits as `waiting_on_human` until `keel
    /// approve`).
    async fn approve(&self, call: &PendingApproval) -> Option<ApprovalDecision> {
        let _ = call;
        None
    }
}
