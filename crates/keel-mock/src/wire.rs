//! What a wire API module provides to the server: reading a request, and writing answers and
//! errors in that API's own format. One implementation per API (`chat_completions` now).

use keel_core::ProviderErrorKind;

use crate::answer::Answer;

/// What the server needs to know about a valid request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RequestInfo {
    /// The model asked for.
    pub model: String,
    /// A streamed answer was asked for.
    pub stream: bool,
    /// The stream should end with a usage report.
    pub include_usage: bool,
    /// Size of the request body in bytes (for the usage estimate).
    pub size: usize,
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

/// A streamed answer as SSE frames (each a complete `data: ...\n\n` event). The first
/// `content` frames carry the answer itself; the rest are terminal (finish, usage, end marker),
/// so a cut stream never gets past `content`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Events {
    pub frames: Vec<String>,
    pub content: usize,
}

/// One wire API, written by the mock on its own.
pub(crate) trait WireApi: Send + Sync + 'static {
    /// Checks a request body as strictly as the real API does.
    fn read_request(body: &[u8]) -> Result<RequestInfo, Invalid>;
    /// The body of a 400 answer to an invalid request.
    fn invalid_request_body(invalid: &Invalid) -> String;
    /// The API's own error body for an error of `kind`.
    fn error_body(kind: ProviderErrorKind, message: &str) -> String;
    /// A whole (non-streamed) answer.
    fn whole_body(answer: &Answer) -> String;
    /// A streamed answer.
    fn stream_events(answer: &Answer, request: &RequestInfo) -> Events;
}
