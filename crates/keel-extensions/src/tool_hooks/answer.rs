//! Reading what a hook printed on stdout. Empty output (or only whitespace) means "no
//! objection"; anything else must be one JSON object. Unknown keys are ignored, so hooks may
//! carry notes of their own.
//!
//! - `pre_tool`: `{"decision": "allow"}`, `{"decision": "allow", "arguments": {...}}` (run with
//!   these arguments instead) or `{"decision": "deny", "reason": "..."}`;
//! - `post_tool`: `{}` or `{"annotation": "..."}` (appended to the result the model sees).

use serde_json::{Map, Value};

/// What a `pre_tool` hook answered.
#[derive(Clone, Debug, PartialEq)]
pub enum PreAnswer {
    /// Run the call as it is.
    Allow,
    /// Run the call with these arguments instead.
    Rewrite(Value),
    /// Do not run it; the reason goes to the model.
    Deny(String),
}

/// Reads a `pre_tool` hook's stdout; the error says what is wrong with it.
pub fn parse_pre(stdout: &str) -> Result<PreAnswer, String> {
    let Some(answer) = object(stdout)? else {
        return Ok(PreAnswer::Allow);
    };
    match answer.get("decision") {
        Some(Value::String(decision)) if decision == "allow" => match answer.get("arguments") {
            None | Some(Value::Null) => Ok(PreAnswer::Allow),
            Some(arguments @ Value::Object(_)) => Ok(PreAnswer::Rewrite(arguments.clone())),
            Some(other) => Err(format!(
                "its \"arguments\" must be a JSON object, not {}",
                kind(other)
            )),
        },
        Some(Value::String(decision)) if decision == "deny" => match answer.get("reason") {
            Some(Value::String(reason)) if !reason.trim().is_empty() => {
                Ok(PreAnswer::Deny(reason.trim().to_string()))
            }
            None | Some(Value::Null) | Some(Value::String(_)) => {
                Ok(PreAnswer::Deny("no reason given".to_string()))
            }
            Some(other) => Err(format!(
                "its \"reason\" must be a string, not {}",
                kind(other)
            )),
        },
        Some(Value::String(decision)) => Err(format!(
            "unknown decision {}: use \"allow\" or \"deny\"",
            preview(decision)
        )),
        Some(other) => Err(format!(
            "its \"decision\" must be \"allow\" or \"deny\", not {}",
            kind(other)
        )),
        None => Err("its answer has no \"decision\"".to_string()),
    }
}

/// Reads a `post_tool` hook's stdout: the annotation, if it made one.
pub fn parse_post(stdout: &str) -> Result<Option<String>, String> {
    let Some(answer) = object(stdout)? else {
        return Ok(None);
    };
    match answer.get("annotation") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.trim().is_empty() => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.trim().to_string())),
        Some(other) => Err(format!(
            "its \"annotation\" must be a string, not {}",
            kind(other)
        )),
    }
}

/// The JSON object in `stdout`, or `None` when it printed nothing.
fn object(stdout: &str) -> Result<Option<Map<String, Value>>, String> {
    let text = stdout.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(other) => Err(format!(
            "it printed {} where a JSON object was expected",
            kind(&other)
        )),
        Err(_) => Err(format!(
            "it printed something that is not JSON: {}",
            preview(text)
        )),
    }
}

/// What kind of JSON value `value` is, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The first 80 characters of `text`, quoted, with an ellipsis when cut.
fn preview(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{:?}…", &text[..cut]),
        None => format!("{text:?}"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn empty_output_allows_and_does_not_annotate() {
        assert_eq!(parse_pre(""), Ok(PreAnswer::Allow));
        assert_eq!(parse_pre(" \n\t"), Ok(PreAnswer::Allow));
        assert_eq!(parse_post(""), Ok(None));
    }

    #[test]
    fn pre_answers_are_read() {
        assert_eq!(parse_pre(r#"{"decision":"allow"}"#), Ok(PreAnswer::Allow));
        assert_eq!(
            parse_pre(r#"{"decision":"deny","reason":" no secrets "}"#),
            Ok(PreAnswer::Deny("no secrets".into()))
        );
        assert_eq!(
            parse_pre(r#"{"decision":"deny"}"#),
            Ok(PreAnswer::Deny("no reason given".into()))
        );
        assert_eq!(
            parse_pre(r#"{"decision":"allow","arguments":{"path":"b"},"note":"x"}"#),
            Ok(PreAnswer::Rewrite(json!({"path": "b"})))
        );
    }

    #[test]
    fn malformed_pre_answers_are_errors_that_say_why() {
        let error = |out: &str| parse_pre(out).unwrap_err();
        assert!(error("ok").contains("not JSON"));
        assert!(error("[1]").contains("an array"));
        assert!(error("{}").contains("no \"decision\""));
        assert!(error(r#"{"decision":"maybe"}"#).contains("unknown decision \"maybe\""));
        assert!(error(r#"{"decision":true}"#).contains("a boolean"));
        assert!(error(r#"{"decision":"allow","arguments":"x"}"#).contains("a string"));
        assert!(error(r#"{"decision":"deny","reason":5}"#).contains("a number"));
        // Two objects are not one.
        assert!(error(r#"{"decision":"allow"}{"decision":"deny"}"#).contains("not JSON"));
    }

    #[test]
    fn a_huge_garbage_answer_is_quoted_short() {
        let error = parse_pre(&"x".repeat(100_000)).unwrap_err();
        assert!(error.len() < 200, "{error}");
    }

    #[test]
    fn post_answers_are_read() {
        assert_eq!(parse_post("{}"), Ok(None));
        assert_eq!(
            parse_post(r#"{"annotation":" looks fine "}"#),
            Ok(Some("looks fine".into()))
        );
        assert_eq!(parse_post(r#"{"annotation":"  "}"#), Ok(None));
        assert!(parse_post(r#"{"annotation":[1]}"#).is_err());
        assert!(parse_post("yes").is_err());
    }
}
