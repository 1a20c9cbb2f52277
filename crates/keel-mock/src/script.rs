//! The script: what the mock answers, one step per request, in order. Nothing here knows any
//! wire API; the HTTP encoders and the in-process provider read the same steps.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use axum::http::{HeaderName, HeaderValue};
use keel_core::ProviderErrorKind;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A script that could not be loaded: where it came from and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("mock script {origin}: {problem}")]
pub struct ScriptError {
    /// The file the script came from, or `(inline JSON)` / `(built in code)`.
    pub origin: String,
    /// What is wrong, naming the step it concerns.
    pub problem: String,
}

/// A scripted model: each request consumes the next step, in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The answers, in the order requests consume them.
    pub steps: Vec<Step>,
}

/// One scripted answer: a model reply (text, tool calls, reasoning) or an HTTP error, with the
/// faults to inject while delivering it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Assistant text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Tool calls, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptToolCall>,
    /// Reasoning text (sent as `reasoning_content`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Overrides the finish reason; default `tool_calls` with tool calls, else `stop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// Reported token usage; missing counts are estimated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ScriptUsage>,
    /// Reported model name; default: the request's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Answer with this HTTP error instead of a reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorReply>,
    /// Wait this long before answering.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
    /// Wait this long between streamed chunks.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chunk_delay_ms: u64,
    /// Deliver only this many chunks, then break the stream (see [`CutMode`]). Over HTTP a
    /// chunk is one SSE data event, the opening `role` chunk included, and the count is capped
    /// so a cut stream never carries its finish reason, usage or end marker; a whole
    /// (non-streamed) answer is cut after half its body. The in-process provider counts
    /// deltas, and fails a whole answer with a `network` error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_after_chunks: Option<usize>,
    /// How a cut stream ends; default [`CutMode::Abort`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_mode: Option<CutMode>,
    /// Answer this many requests with this step (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
    /// Answer every remaining request with this step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forever: bool,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// A tool call the scripted model makes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    /// Tool name.
    pub name: String,
    /// Arguments: a JSON object, or a raw string sent verbatim. Default `{}`.
    #[serde(default)]
    pub arguments: ToolArguments,
    /// Call id; default `call_<response>_<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// Tool call arguments as scripted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub enum ToolArguments {
    /// A JSON object, sent as compact JSON text.
    Json(Map<String, Value>),
    /// Raw text sent verbatim (to test malformed arguments).
    Raw(String),
}

impl Default for ToolArguments {
    fn default() -> Self {
        ToolArguments::Json(Map::new())
    }
}

impl ToolArguments {
    /// The argument text the model "produced".
    pub fn to_wire(&self) -> String {
        match self {
            ToolArguments::Json(map) => Value::Object(map.clone()).to_string(),
            ToolArguments::Raw(raw) => raw.clone(),
        }
    }
}

impl TryFrom<Value> for ToolArguments {
    type Error = String;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        match value {
            Value::Object(map) => Ok(ToolArguments::Json(map)),
            Value::String(raw) => Ok(ToolArguments::Raw(raw)),
            other => Err(format!(
                "tool call arguments must be a JSON object or a raw string, not {other}"
            )),
        }
    }
}

impl From<ToolArguments> for Value {
    fn from(arguments: ToolArguments) -> Value {
        match arguments {
            ToolArguments::Json(map) => Value::Object(map),
            ToolArguments::Raw(raw) => Value::String(raw),
        }
    }
}

impl ToolArguments {
    /// Objects stay JSON, strings are raw; any other value is sent as its JSON text.
    pub(crate) fn from_builder(value: Value) -> Self {
        match value {
            Value::Object(map) => ToolArguments::Json(map),
            Value::String(raw) => ToolArguments::Raw(raw),
            other => ToolArguments::Raw(other.to_string()),
        }
    }
}

/// Why the scripted model stopped, in chat-completions terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A complete answer.
    Stop,
    /// The model wants tools run.
    ToolCalls,
    /// Cut at the token limit.
    Length,
}

/// Token counts a step reports; a missing count is estimated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptUsage {
    /// Prompt tokens; default: request JSON bytes / 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Completion tokens; default: output characters / 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Prompt tokens served from cache; default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
}

/// How a cut stream ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CutMode {
    /// The connection breaks: the client sees a body error.
    #[default]
    Abort,
    /// The body ends cleanly, but without its terminal marker or finish reason.
    Eof,
}

/// An HTTP error to answer with instead of a reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    /// HTTP status, 400–599.
    pub status: u16,
    /// Extra response headers (e.g. `retry-after`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Response body: a string is sent verbatim, any other JSON value as JSON. Default: the
    /// API's own error body fitting the status (or `kind`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// The error class; default: derived from the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ProviderErrorKind>,
}

impl Script {
    /// A script of these steps.
    pub fn new(steps: Vec<Step>) -> Script {
        Script { steps }
    }

    /// Loads and checks a script file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Script, ScriptError> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ScriptError {
            origin: origin.clone(),
            problem: format!("cannot read the file: {e}"),
        })?;
        Self::parse(&text, origin)
    }

    /// Parses and checks a script from JSON text.
    pub fn from_json(json: &str) -> Result<Script, ScriptError> {
        Self::parse(json, "(inline JSON)".to_string())
    }

    fn parse(json: &str, origin: String) -> Result<Script, ScriptError> {
        let script: Script = serde_json::from_str(json).map_err(|e| ScriptError {
            origin: origin.clone(),
            problem: format!("not a valid script: {e}"),
        })?;
        script
            .check()
            .map_err(|problem| ScriptError { origin, problem })?;
        Ok(script)
    }

    /// Checks a script built in code for contradictions (the loaders always check).
    pub fn validate(&self) -> Result<(), ScriptError> {
        self.check().map_err(|problem| ScriptError {
            origin: "(built in code)".to_string(),
            problem,
        })
    }

    fn check(&self) -> Result<(), String> {
        let mut forever_at = None;
        for (i, step) in self.steps.iter().enumerate() {
            if let Some(j) = forever_at {
                return Err(format!(
                    "steps[{i}] can never be reached: steps[{j}] repeats forever"
                ));
            }
            step.check()
                .map_err(|problem| format!("steps[{i}]: {problem}"))?;
            if step.forever {
                forever_at = Some(i);
            }
        }
        Ok(())
    }
}

impl Step {
    fn check(&self) -> Result<(), String> {
        if self.times == Some(0) {
            return Err("`times` must be at least 1".into());
        }
        if self.times.is_some() && self.forever {
            return Err("`times` and `forever` cannot be combined".into());
        }
        if self.cut_mode.is_some() && self.cut_after_chunks.is_none() {
            return Err("`cut_mode` needs `cut_after_chunks`".into());
        }
        let mut ids = HashSet::new();
        for (i, call) in self.tool_calls.iter().enumerate() {
            if call.name.is_empty() {
                return Err(format!("tool_calls[{i}] has an empty name"));
            }
            if let Some(id) = &call.id {
                if !ids.insert(id) {
                    return Err(format!("tool_calls[{i}]: id `{id}` is used twice"));
                }
            }
        }
        if let Some(error) = &self.error {
            let others = [
                ("text", self.text.is_some()),
                ("tool_calls", !self.tool_calls.is_empty()),
                ("reasoning", self.reasoning.is_some()),
                ("finish_reason", self.finish_reason.is_some()),
                ("usage", self.usage.is_some()),
                ("model", self.model.is_some()),
                ("chunk_delay_ms", self.chunk_delay_ms > 0),
                ("cut_after_chunks", self.cut_after_chunks.is_some()),
            ];
            if let Some((name, _)) = others.iter().find(|(_, set)| *set) {
                return Err(format!("an `error` step cannot also have `{name}`"));
            }
            error.check()?;
        }
        Ok(())
    }
}

impl ErrorReply {
    fn check(&self) -> Result<(), String> {
        if !(400..=599).contains(&self.status) {
            return Err(format!(
                "error status {} is not an HTTP error (400-599)",
                self.status
            ));
        }
        for (name, value) in &self.headers {
            HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("error header name `{name}` is not a valid HTTP header"))?;
            HeaderValue::from_str(value)
                .map_err(|_| format!("error header `{name}` has an invalid value"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_every_field() {
        let script = Script::from_json(
            r#"{"steps": [
                {"text": "hi", "reasoning": "think", "finish_reason": "length",
                 "usage": {"input_tokens": 3, "output_tokens": 4}, "model": "m-1",
                 "delay_ms": 5, "chunk_delay_ms": 6, "cut_after_chunks": 2, "cut_mode": "eof",
                 "times": 2},
                {"tool_calls": [{"name": "f", "arguments": {"a": 1}, "id": "x"},
                                {"name": "g", "arguments": "{bad"}]},
                {"error": {"status": 429, "headers": {"retry-after": "1"}, "body": "slow down",
                           "kind": "rate_limit"}, "forever": true}
            ]}"#,
        )
        .unwrap();
        let [first, second, third] = &script.steps[..] else {
            panic!("three steps")
        };
        assert_eq!(first.text.as_deref(), Some("hi"));
        assert_eq!(first.finish_reason, Some(FinishReason::Length));
        assert_eq!(first.cut_mode, Some(CutMode::Eof));
        assert_eq!(first.times, Some(2));
        assert_eq!(second.tool_calls[0].arguments.to_wire(), r#"{"a":1}"#);
        assert_eq!(second.tool_calls[1].arguments.to_wire(), "{bad");
        let error = third.error.as_ref().unwrap();
        assert_eq!(error.kind, Some(ProviderErrorKind::RateLimit));
        assert_eq!(error.body, Some(json!("slow down")));
        assert!(third.forever);
    }

    #[test]
    fn round_trips_through_json() {
        let script = Script::new(vec![
            Step::text("a").with_reasoning("r").repeat(3),
            Step::tool_call("f", json!({"k": "v"})).with_tool_call("g", json!("raw")),
            Step::error(503).with_header("retry-after", "2"),
        ]);
        let json = serde_json::to_string(&script).unwrap();
        assert_eq!(Script::from_json(&json).unwrap(), script);
    }

    fn problem(json: &str) -> String {
        Script::from_json(json).unwrap_err().to_string()
    }

    #[test]
    fn rejects_unknown_fields_and_bad_types() {
        assert!(problem(r#"{"steps": [{"txt": "hi"}]}"#).contains("unknown field `txt`"));
        assert!(problem(r#"{"steps": [{"finish_reason": "done"}]}"#).contains("unknown variant"));
        assert!(
            problem(r#"{"steps": [{"tool_calls": [{"name": "f", "arguments": [1]}]}]}"#)
                .contains("JSON object or a raw string")
        );
        assert!(problem("{").contains("(inline JSON)"));
    }

    #[test]
    fn rejects_contradictions_naming_the_step() {
        let cases = [
            (
                r#"{"steps": [{}, {"times": 0}]}"#,
                "steps[1]: `times` must be at least 1",
            ),
            (
                r#"{"steps": [{"times": 2, "forever": true}]}"#,
                "cannot be combined",
            ),
            (
                r#"{"steps": [{"forever": true}, {"text": "x"}]}"#,
                "steps[1] can never be reached",
            ),
            (
                r#"{"steps": [{"error": {"status": 500}, "text": "x"}]}"#,
                "steps[0]: an `error` step cannot also have `text`",
            ),
            (
                r#"{"steps": [{"error": {"status": 200}}]}"#,
                "not an HTTP error",
            ),
            (
                r#"{"steps": [{"error": {"status": 500, "headers": {"bad name": "x"}}}]}"#,
                "not a valid HTTP header",
            ),
            (
                r#"{"steps": [{"cut_mode": "eof"}]}"#,
                "needs `cut_after_chunks`",
            ),
            (
                r#"{"steps": [{"tool_calls": [{"name": "f", "id": "a"}, {"name": "g", "id": "a"}]}]}"#,
                "used twice",
            ),
        ];
        for (json, expected) in cases {
            let message = problem(json);
            assert!(message.contains(expected), "{json}: {message}");
        }
    }

    #[test]
    fn file_errors_name_the_file() {
        let dir = std::env::temp_dir().join(format!("keel-mock-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("script.json");
        let missing = Script::from_file(&path).unwrap_err();
        assert!(missing.origin.ends_with("script.json"), "{missing}");
        assert!(missing.problem.contains("cannot read"), "{missing}");

        std::fs::write(&path, r#"{"steps": [{"times": 0}]}"#).unwrap();
        let bad = Script::from_file(&path).unwrap_err();
        assert!(bad.to_string().contains("script.json"), "{bad}");
        assert!(bad.problem.contains("steps[0]"), "{bad}");

        std::fs::write(&path, r#"{"steps": [{"text": "ok"}]}"#).unwrap();
        assert_eq!(Script::from_file(&path).unwrap().steps.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn builders_only_touch_error_fields_of_error_steps() {
        let step = Step::text("x")
            .with_header("a", "b")
            .with_error_body(json!({}));
        assert_eq!(step, Step::text("x"));
        let error = Step::error(429)
            .with_header("retry-after", "3")
            .with_error_kind(ProviderErrorKind::Billing);
        let reply = error.error.unwrap();
        assert_eq!(reply.headers["retry-after"], "3");
        assert_eq!(reply.kind, Some(ProviderErrorKind::Billing));
    }
}
