//! What a wire API module provides to the server: reading a request, and writing answers and
//! errors in that API's own format. One implementation per API (`chat_completions`, `messages`,
//! `responses`).

use axum::http::HeaderMap;
use keel_core::ProviderErrorKind;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::answer::{Answer, default_error_message, status_for_kind};
use crate::script::StreamError;

/// What the server needs to know about a valid request.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RequestInfo {
    /// The model asked for.
    pub model: String,
    /// A streamed answer was asked for.
    pub stream: bool,
    /// The stream should end with a usage report (chat completions).
    pub include_usage: bool,
    /// Size of the request body in bytes (for the usage estimate).
    pub size: usize,
    /// The request's position in its turn: the assistant replies it carries after its last
    /// real user message (what a per-turn script answers by).
    pub turn_position: usize,
    /// Request parameters the API echoes back in its answer (OpenAI Responses).
    pub echo: Map<String, Value>,
}

/// Why a request was rejected (HTTP 400), naming the offending parameter when there is one.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Invalid {
    pub message: String,
    pub param: Option<String>,
}

impl Invalid {
    pub(crate) fn new(message: impl Into<String>, param: Option<&str>) -> Invalid {
        Invalid {
            message: message.into(),
            param: param.map(str::to_string),
        }
    }
}

/// A streamed answer as SSE frames (each a complete event ending in a blank line). The first
/// `content` frames carry the answer itself; the rest are terminal (finish, usage, end marker),
/// so a cut stream never gets past `content`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Events {
    pub frames: Vec<String>,
    pub content: usize,
}

impl Events {
    /// Keeps the first `after` content frames (at most all of them), then ends with the frame
    /// `error` builds from the number of frames kept. Nothing follows the error.
    pub(crate) fn fail_after(
        mut self,
        after: usize,
        error: impl FnOnce(usize) -> String,
    ) -> Events {
        self.frames.truncate(after.min(self.content));
        let frame = error(self.frames.len());
        self.frames.push(frame);
        self.content = self.frames.len();
        self
    }
}

/// One wire API, written by the mock on its own.
pub(crate) trait WireApi: Send + Sync + 'static {
    /// The prefix of tool-call ids the mock makes up (`call` gives `call_<answer>_<index>`).
    const CALL_ID_PREFIX: &'static str = "call";

    /// Checks the request headers the real API insists on.
    fn check_headers(_headers: &HeaderMap) -> Result<(), Invalid> {
        Ok(())
    }

    /// Checks a request body as strictly as the real API does.
    fn read_request(body: &[u8]) -> Result<RequestInfo, Invalid>;

    /// The body of a 400 answer to an invalid request.
    fn invalid_request_body(invalid: &Invalid) -> String;

    /// The HTTP status this API answers an error of `kind` with.
    fn status_for(kind: ProviderErrorKind) -> u16 {
        status_for_kind(kind)
    }

    /// The API's own message for an error of `kind` answered with `status`.
    fn default_message(_status: u16, kind: ProviderErrorKind, request: &RequestInfo) -> String {
        default_error_message(kind, &request.model)
    }

    /// The API's own error body for an error of `kind` answered with `status`.
    fn error_body(status: u16, kind: ProviderErrorKind, message: &str) -> String;

    /// A whole (non-streamed) answer.
    fn whole_body(answer: &Answer, request: &RequestInfo) -> String;

    /// A streamed answer; with `failure`, the stream breaks off with the API's own error event.
    fn stream_events(
        answer: &Answer,
        request: &RequestInfo,
        failure: Option<&StreamError>,
    ) -> Events;
}

/// The message a scripted mid-stream error carries: its own, or the API's default.
pub(crate) fn failure_message<A: WireApi>(failure: &StreamError, request: &RequestInfo) -> String {
    failure
        .message
        .clone()
        .unwrap_or_else(|| A::default_message(A::status_for(failure.kind), failure.kind, request))
}

/// Serializes a wire struct. The mock's wire structs hold only strings, numbers, options and
/// JSON values: serializing them cannot fail, and an empty object is still a readable answer
/// should it ever happen.
pub(crate) fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_string())
}

/// An SSE event with only a `data:` line.
pub(crate) fn data_frame(data: &str) -> String {
    format!("data: {data}\n\n")
}

/// An SSE event with an `event:` name and a `data:` line.
pub(crate) fn named_frame(event: &str, data: &str) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// A made-up id: `prefix` and a fresh, time-ordered hex string.
pub(crate) fn fresh_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::now_v7().simple())
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
