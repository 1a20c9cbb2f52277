//! `clarify {question, choices?}`: the model asks the human a question, optionally offering
//! choices (seed 004's clarify tool). Like `ask_human`, the loop answers it itself, and it is
//! interactive: it never runs beside other tools (the batch's other calls finish first, and one
//! batch asks at most one question). The answer comes through the same human channel
//! ([`keel_core::human::HumanChannel::ask_choice`]), or, when no one can answer now, the run waits
//! as `waiting_on_human` until `keel answer RUN TEXT` (a choice's number or text, or an answer
//! of one's own).

use keel_core::extension::{Extension, LoopAnswer, LoopTurn};
use keel_core::human::Question;
use keel_core::message::ToolCall;
use keel_core::run_settings::RunSettings;
use keel_core::tool::ToolSpec;
use serde_json::{Value, json};

/// The name of the tool.
pub const CLARIFY: &str = "clarify";

/// The most choices one question may offer.
pub const MAX_CHOICES: usize = 8;

/// The longest choice, in characters.
pub const MAX_CHOICE_CHARS: usize = 200;

/// The longest question, in characters.
pub const MAX_QUESTION_CHARS: usize = 2000;

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

/// The `clarify` tool, answered by the loop: its question (with its choices) goes to the human.
#[derive(Clone, Copy, Debug, Default)]
pub struct Clarify;

impl Extension for Clarify {
    fn name(&self) -> &'static str {
        CLARIFY
    }

    fn loop_tools(&self, _: &RunSettings) -> Vec<ToolSpec> {
        vec![clarify_spec()]
    }

    fn answer(&self, _: &ToolCall, args: &Value, _: &mut LoopTurn<'_>) -> LoopAnswer {
        match parse(args) {
            Ok(question) => LoopAnswer::Ask(question),
            Err(reason) => LoopAnswer::Err(format!("Error: {reason}.")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
