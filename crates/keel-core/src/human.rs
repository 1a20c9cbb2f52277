//! The human in the loop: how a run puts a question to a person, or asks one to approve a call.

use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
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
        self.ask(&with_numbered_choices(question, choices)).await
    }

    /// Asks the human whether `call` may run and waits for the decision; `None` (the default)
    /// when no one can decide now (the run then waits as `waiting_on_human` until `keel
    /// approve`).
    async fn approve(&self, call: &PendingApproval) -> Option<ApprovalDecision> {
        let _ = call;
        None
    }
}

/// A handler that answers the questions the model asks (see
/// [`crate::AgentBuilder::on_clarify`]): `None` when it cannot answer now.
pub type ClarifyHandler = Arc<dyn Fn(Question) -> BoxFuture<'static, Option<String>> + Send + Sync>;

/// What the human answered to a question with `choices`: a choice's number (1-based) or its
/// text (any case) picks that choice; other text is an answer of their own. An empty answer,
/// or a number that is no choice's, is refused with a reason.
pub fn resolve(answer: &str, choices: &[String]) -> Result<Answer, String> {
    let answer = answer.trim();
    if answer.is_empty() {
        return Err("the answer is empty".into());
    }
    if choices.is_empty() {
        return Ok(Answer::Own(answer.to_string()));
    }
    if let Ok(number) = answer.parse::<usize>() {
        return match number.checked_sub(1).and_then(|i| choices.get(i)) {
            Some(choice) => Ok(Answer::Choice(choice.clone())),
            None => Err(format!(
                "there is no choice {number}: pick 1 to {}, or answer in your own words",
                choices.len()
            )),
        };
    }
    match choices
        .iter()
        .find(|choice| choice.to_lowercase() == answer.to_lowercase())
    {
        Some(choice) => Ok(Answer::Choice(choice.clone())),
        None => Ok(Answer::Own(answer.to_string())),
    }
}

/// A human's answer to a question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// One of the offered choices, as offered.
    Choice(String),
    /// An answer in their own words.
    Own(String),
}

impl Answer {
    /// The answer as the model reads it.
    pub fn for_model(&self) -> String {
        match self {
            Answer::Choice(choice) => format!("The human chose: {choice}"),
            Answer::Own(text) => format!("The human answered: {text}"),
        }
    }

    /// The answer's text.
    pub fn text(&self) -> &str {
        match self {
            Answer::Choice(text) | Answer::Own(text) => text,
        }
    }
}

/// The question as one text, its choices numbered: for a channel that can only ask.
pub fn with_numbered_choices(question: &str, choices: &[String]) -> String {
    let mut text = question.to_string();
    for (i, choice) in choices.iter().enumerate() {
        text.push_str(&format!("\n  {}. {choice}", i + 1));
    }
    if !choices.is_empty() {
        text.push_str("\n(answer with a number, or in your own words)");
    }
    text
}

/// The human channel of an agent with an [`on_clarify`](crate::AgentBuilder::on_clarify)
/// handler: the handler answers first; when it has no answer (or a choice number that is no
/// choice), the agent's own channel, if any, is asked; approvals go to that channel alone.
pub(crate) struct HandlerChannel {
    /// The handler.
    pub(crate) handler: ClarifyHandler,
    /// The agent's own channel.
    pub(crate) fallback: Option<Arc<dyn HumanChannel>>,
}

#[async_trait::async_trait]
impl HumanChannel for HandlerChannel {
    async fn ask(&self, question: &str) -> Option<String> {
        let asked = Question::from(question);
        if let Some(answer) = (self.handler)(asked).await.filter(|a| !a.trim().is_empty()) {
            return Some(answer);
        }
        self.fallback.as_ref()?.ask(question).await
    }

    async fn ask_choice(&self, question: &str, choices: &[String]) -> Option<String> {
        let asked = Question {
            text: question.to_string(),
            choices: choices.to_vec(),
        };
        if let Some(answer) = (self.handler)(asked).await
            && resolve(&answer, choices).is_ok()
        {
            return Some(answer);
        }
        self.fallback.as_ref()?.ask_choice(question, choices).await
    }

    async fn approve(&self, call: &PendingApproval) -> Option<ApprovalDecision> {
        self.fallback.as_ref()?.approve(call).await
    }
}

/// The question run `run_id` asked last and its choices (empty for a free answer), as its
/// events keep it; `None` when it asked none.
pub async fn last_question(
    store: &dyn crate::Store,
    run_id: &str,
) -> Result<Option<(String, Vec<String>)>, crate::StoreError> {
    Ok(store
        .events(run_id)
        .await?
        .into_iter()
        .rev()
        .find_map(|event| match event.kind {
            crate::event::EventKind::HumanAsked { question, choices } => Some((question, choices)),
            _ => None,
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choices(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_answer_is_a_number_a_choice_or_ones_own() {
        let offered = choices(&["tea", "coffee"]);
        assert_eq!(resolve("2", &offered), Ok(Answer::Choice("coffee".into())));
        assert_eq!(resolve(" TEA ", &offered), Ok(Answer::Choice("tea".into())));
        assert_eq!(resolve("water", &offered), Ok(Answer::Own("water".into())));
        assert!(resolve("3", &offered).unwrap_err().contains("no choice 3"));
        assert!(resolve("0", &offered).is_err());
        assert!(resolve("99999999999999999999999", &offered).is_ok());
        assert!(resolve("  ", &offered).is_err());
        assert_eq!(resolve("7", &[]), Ok(Answer::Own("7".into())));
        assert_eq!(
            Answer::Choice("tea".into()).for_model(),
            "The human chose: tea"
        );
    }

    #[test]
    fn a_plain_channel_sees_numbered_choices() {
        let text = with_numbered_choices("Which?", &choices(&["a", "b"]));
        assert_eq!(
            text,
            "Which?\n  1. a\n  2. b\n(answer with a number, or in your own words)"
        );
        assert_eq!(with_numbered_choices("Why?", &[]), "Why?");
    }
}
