//! The script: what the mock answers, one step per request, in order, with separate step lists
//! for the models that have their own. Nothing here knows any wire API; the HTTP encoders and
//! the in-process provider read the same steps.

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
///
/// A request whose `model` has an entry in [`Script::models`] consumes that entry's steps
/// instead, with a cursor of its own; every other request consumes [`Script::steps`]. So a
/// test can script the calls of a second model (e.g. compaction summaries) without knowing how
/// they interleave with the agent's calls.
///
/// With [`Script::per_turn`] set, no request consumes anything: each is answered by the step
/// at its position in its own turn, so any number of conversations can walk the same script
/// from its start, concurrently and independently (what `keel bench` does).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The answers to requests for models without an entry in `models`, in the order those
    /// requests consume them. May be left out of a script file (no steps).
    #[serde(default)]
    pub steps: Vec<Step>,
    /// Step lists of their own for requests asking for these models (matched exactly).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, ModelScript>,
    /// Answer each request by its position in the current turn instead of with a shared
    /// cursor: the number of assistant replies the request carries after its last real user
    /// message (one that is not just tool results). Position 0 is the first call of a turn,
    /// 1 the call after the first tool results, and so on; a step with `times: n` covers `n`
    /// positions and a `forever` step every later one; a position past the end gets the
    /// "exhausted" error. Per-model lists (`models`) are read by position too. Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_turn: bool,
}

/// The steps answering the requests for one model of [`Script::models`], in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelScript {
    /// The answers, in the order this model's requests consume them.
    pub steps: Vec<Step>,
}

impl ModelScript {
    /// A model script of these steps.
    pub fn new(steps: Vec<Step>) -> ModelScript {
        ModelScript { steps }
    }
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
    /// Reasoning text: chat completions' `reasoning_content`, an Anthropic `thinking` block
    /// (with a made-up signature), a Responses `reasoning` item with one summary text.
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
    /// chunk is one SSE event, the opening one included (chat's `role` chunk, Anthropic's
    /// `message_start`, Responses' `response.created`), and the count is capped so a cut stream
    /// never carries its stop reason, usage or end marker (chat's finish chunk and `[DONE]`,
    /// Anthropic's `message_delta` and `message_stop`, Responses' `response.completed`); a whole
    /// (non-streamed) answer is cut after half its body. The in-process provider counts
    /// deltas, and fails a whole answer with a `network` error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_after_chunks: Option<usize>,
    /// How a cut stream ends; default [`CutMode::Abort`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_mode: Option<CutMode>,
    /// Break the stream off with the API's own error event after some chunks (see
    /// [`StreamError`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_error: Option<StreamError>,
    /// Answer this many requests with this step (default 1); in a [`Script::per_turn`]
    /// script, this many positions of a turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
    /// Answer every remaining request with this step; in a [`Script::per_turn`] script, every
    /// later position of a turn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forever: bool,
    /// Append the text of the request's last user message to `text`, so concurrent
    /// conversations sharing a step list each get an answer that names what they were asked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub echo_user: bool,
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
    /// Call id; default `call_<response>_<index>` (`toolu_<response>_<index>` on Anthropic
    /// Messages).
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

/// Why the scripted model stopped, in chat-completions terms. Anthropic Messages reads them as
/// `end_turn`, `tool_use`, `max_tokens`; OpenAI Responses reads `length` as an `incomplete`
/// response (`max_output_tokens`) and the others as `completed`.
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

/// A failure in the middle of a streamed answer: `after_chunks` normal chunks (counted and
/// capped like [`Step::cut_after_chunks`]), then the API's own error event, then the end of the
/// stream. Anthropic Messages sends `event: error` with `{"type": "error", "error": {...}}`;
/// OpenAI Responses a `response.failed` event whose `response.error` has `code` and `message`
/// (or, with `responses_event: "error"`, a bare `error` event); chat completions a
/// `data: {"error": {...}}` chunk. A whole (non-streamed) answer fails instead with the API's
/// HTTP error for `kind`. The in-process provider delivers the first `after_chunks` deltas, then
/// `Finished { stop_reason: None }` and an error of `kind`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamError {
    /// Normal chunks before the error event.
    pub after_chunks: usize,
    /// The error class; default `server`.
    #[serde(default = "server_kind")]
    pub kind: ProviderErrorKind,
    /// The error message; default: the API's own message for `kind`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Which event carries the error on OpenAI Responses; default `response.failed`.
    #[serde(default, skip_serializing_if = "ResponsesErrorEvent::is_default")]
    pub responses_event: ResponsesErrorEvent,
}

fn server_kind() -> ProviderErrorKind {
    ProviderErrorKind::Server
}

/// The event an OpenAI Responses stream reports a mid-stream failure with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResponsesErrorEvent {
    /// `response.failed`, carrying the failed response with its `error`.
    #[default]
    #[serde(rename = "response.failed")]
    ResponseFailed,
    /// A bare `error` event with `code`, `message` and `param`.
    #[serde(rename = "error")]
    Error,
}

impl ResponsesErrorEvent {
    fn is_default(&self) -> bool {
        *self == ResponsesErrorEvent::default()
    }
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
    /// A script of these steps, answering requests for every model.
    pub fn new(steps: Vec<Step>) -> Script {
        Script {
            steps,
            models: BTreeMap::new(),
            per_turn: false,
        }
    }

    /// Answers each request by its position in its own turn (see [`Script::per_turn`]) instead
    /// of with the next step of a shared cursor.
    pub fn with_per_turn(mut self) -> Script {
        self.per_turn = true;
        self
    }

    /// Gives requests for `model` their own steps (replacing any given before): they consume
    /// these, and no longer the top-level steps.
    pub fn with_model(mut self, model: impl Into<String>, steps: Vec<Step>) -> Script {
        self.models.insert(model.into(), ModelScript::new(steps));
        self
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
        let no_steps = self.steps.is_empty() && self.models.values().all(|m| m.steps.is_empty());
        if self.per_turn && no_steps {
            return Err("a `per_turn` script needs at least one step".into());
        }
        check_steps("steps", &self.steps)?;
        for (model, script) in &self.models {
            if model.is_empty() {
                return Err("models: a model name cannot be empty".into());
            }
            check_steps(&format!("models.{model}.steps"), &script.steps)?;
        }
        Ok(())
    }
}

/// Checks one step list, naming a problem's place as `<place>[<index>]`.
fn check_steps(place: &str, steps: &[Step]) -> Result<(), String> {
    let mut forever_at = None;
    for (i, step) in steps.iter().enumerate() {
        if let Some(j) = forever_at {
            return Err(format!(
                "{place}[{i}] can never be reached: {place}[{j}] repeats forever"
            ));
        }
        step.check()
            .map_err(|problem| format!("{place}[{i}]: {problem}"))?;
        if step.forever {
            forever_at = Some(i);
        }
    }
    Ok(())
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
        if self.stream_error.is_some() && self.cut_after_chunks.is_some() {
            return Err("`stream_error` and `cut_after_chunks` cannot be combined".into());
        }
        let mut ids = HashSet::new();
        for (i, call) in self.tool_calls.iter().enumerate() {
            if call.name.is_empty() {
                return Err(format!("tool_calls[{i}] has an empty name"));
            }
            if let Some(id) = &call.id
                && !ids.insert(id)
            {
                return Err(format!("tool_calls[{i}]: id `{id}` is used twice"));
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
                ("stream_error", self.stream_error.is_some()),
                ("echo_user", self.echo_user),
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
#[path = "script_tests.rs"]
mod tests;
