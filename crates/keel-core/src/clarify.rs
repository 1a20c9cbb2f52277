//! `clarify {question, choices?}`: the model asks the human a question, optionally offering
//! choices (seed 004's clarify tool). Like `ask_human`, the loop answers it itself, and it is
//! interactive: it never runs beside other tools (the batch's other calls finish first, and one
//! batch asks at most one question). The answer comes through the same human channel
//! ([`crate::human::HumanChannel::ask_choice`]), or, when no one can answer now, the run waits
//! as `waiting_on_human` until `keel answer RUN TEXT` (a choice's number or text, or an answer
//! of one's own).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::json;

use crate::approval::{ApprovalDecision, PendingApproval};
use crate::human::{HumanChannel, Question};
use crate::tool::ToolSpec;

/// The name of the tool.
pub const CLARIFY: &str = "clarify";

/// The most choices one question may offer.
pub const MAX_CHOICES: usize = 8;

/// The longest choice, in characters.
pub const MAX_CHOICE_CHARS: usize = 200;

/// The longest question, in characters.
pub const MAX_QUESTION_CHARS: usize = 2000;

/// A handler that answers the questions the model asks (see
/// [`crate::AgentBuilder::on_clarify`]): `None` when it cannot answer now.
pub type ClarifyHandler = Arc<dyn Fn(Question) -> BoxFuture<'static, Option<String>> + Send + Sync>;

/// The spec the model sees.
pub fn clarify_spec() -> ToolSpec {
    ToolSpec::new(
        CLARIFY,
        "Ask the user a clarifying question when their request is ambiguous and you cannot \
         sensibly choose for them. Offer `choices` (2 to 8 short options) when the answer is \
         one of a few; the user may also answer in their own words. Ask one question at a time.",
        json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question, complete and specific."},
                "choices": {
                    "type": "array",
                    "items": {"type": "string"},
                    "maxItems": MAX_CHOICES,
                    "description": "Short options for the user to pick from (optional)."
                }
            },
            "required": ["question"],
            "additionalProperties": false
        }),
    )
    .interactive()
}

/// Reads a `clarify` call's arguments: the question and its choices, trimmed, or what is wrong
/// with them (an empty or huge question, too many, empty, huge or duplicate choices).
pub fn parse(args: &serde_json::Value) -> Result<Question, String> {
    let question = args["question"].as_str().unwrap_or("").trim().to_string();
    if question.is_empty() {
        return Err("give the `question` to ask".into());
    }
    if question.chars().count() > MAX_QUESTION_CHARS {
        return Err(format!(
            "the question is longer than {MAX_QUESTION_CHARS} characters; ask something shorter"
        ));
    }
    let choices = match &args["choices"] {
        serde_json::Value::Null => Vec::new(),
        serde_json::Value::Array(items) => {
            let mut choices: Vec<String> = Vec::with_capacity(items.len());
            for item in items {
                let Some(choice) = item.as_str().map(str::trim) else {
                    return Err("each of `choices` must be a string".into());
                };
                if choice.is_empty() {
                    return Err("a choice is empty".into());
                }
                if choice.chars().count() > MAX_CHOICE_CHARS {
                    return Err(format!(
                        "a choice is longer than {MAX_CHOICE_CHARS} characters; keep choices short"
                    ));
                }
                if choice.contains(['\n', '\r']) {
                    return Err("a choice must be one line".into());
                }
                if choices
                    .iter()
                    .any(|c| c.to_lowercase() == choice.to_lowercase())
                {
                    return Err(format!("the choice `{choice}` is given twice"));
                }
                choices.push(choice.to_string());
            }
            choices
        }
        _ => return Err("`choices` must be a list of strings".into()),
    };
    if choices.len() > MAX_CHOICES {
        return Err(format!("offer at most {MAX_CHOICES} choices"));
    }
    if choices.len() == 1 {
        return Err("offer at least two choices, or none".into());
    }
    Ok(Question {
        text: question,
        choices,
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn choices(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn reads_a_question_with_choices() {
        let q = parse(&json!({"question": " Which? ", "choices": [" tea ", "coffee"]})).unwrap();
        assert_eq!(q.text, "Which?");
        assert_eq!(q.choices, ["tea", "coffee"]);
        let plain = parse(&json!({"question": "Why?"})).unwrap();
        assert!(plain.choices.is_empty());
    }

    #[test]
    fn refuses_bad_questions_with_a_reason() {
        let many: Vec<String> = (0..=MAX_CHOICES).map(|i| format!("c{i}")).collect();
        let cases = [
            (json!({}), "question"),
            (json!({"question": "   "}), "question"),
            (
                json!({"question": "x".repeat(MAX_QUESTION_CHARS + 1)}),
                "longer",
            ),
            (json!({"question": "q", "choices": many}), "at most"),
            (
                json!({"question": "q", "choices": ["a", "x".repeat(MAX_CHOICE_CHARS + 1)]}),
                "longer",
            ),
            (
                json!({"question": "q", "choices": ["Tea", "tea "]}),
                "twice",
            ),
            (json!({"question": "q", "choices": ["a", ""]}), "empty"),
            (json!({"question": "q", "choices": ["a", 3]}), "string"),
            (json!({"question": "q", "choices": "a, b"}), "list"),
            (json!({"question": "q", "choices": ["only"]}), "two"),
            (
                json!({"question": "q", "choices": ["a", "b\nc"]}),
                "one line",
            ),
        ];
        for (args, expected) in cases {
            let error = parse(&args).unwrap_err();
            assert!(error.contains(expected), "{args}: {error}");
        }
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
