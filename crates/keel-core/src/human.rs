//! The human in the loop: how a run puts a question to a person, or asks one to approve a call.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::approval::{ApprovalDecision, PendingApproval};

/// A question the model puts to the human (`ask_human`, or `clarify` with its choices).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// The question.
    pub text: String,
    /// The choices offered, in order; empty when the answer is free text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
}

impl From<&str> for Question {
    fn from(text: &str) -> Self {
        Question {
            text: text.to_string(),
            choices: Vec::new(),
        }
    }
}

/// Somewhere a question can be put to a human: the chat prompt, a UI, a messaging platform.
#[async_trait]
pub trait HumanChannel: Send + Sync {
    /// Puts `question` to the human and waits for the answer; `None` when no one can answer
    /// now (the run then waits as `waiting_on_human` until `keel answer`).
    async fn ask(&self, question: &str) -> Option<String>;

    /// Puts `question` to the human offering `choices` (never empty) and waits for the answer:
    /// a choice's number (1-based) or text, or an answer of their own. The default asks with
    /// the choices numbered in the question's text; a channel that can show a menu does.
    async fn ask_choice(&self, question: &str, choices: &[String]) -> Option<String> {
        self.ask(&crate::clarify::with_numbered_choices(question, choices))
            .await
    }

    /// Asks the human whether `call` may run and waits for the decision; `None` (the default)
    /// when no one can decide now (the run then waits as `waiting_on_human` until `keel
    /// approve`).
    async fn approve(&self, call: &PendingApproval) -> Option<ApprovalDecision> {
        let _ = call;
        None
    }
}
