//! The one call path every wire adapter takes: post the request with the API's headers, sort a
//! failed status into a classified error, read the answer (the event stream through the API's
//! accumulator, or the whole JSON body, replayed as deltas when a stream was asked for), all
//! within the call's deadline, and send a stream's one `Finished` delta last.
//!
//! An adapter holds a [`Wire`], says how it sends (one [`post`] of its body, or more) and
//! names its stream accumulator and whole-answer parser to [`provider!`], which makes it a
//! [`keel_core::Provider`] through [`chat`].

use std::fmt;
use std::time::Duration;

use keel_core::{ChatRequest, ChatResponse, DeltaSink, ProviderError, ProviderErrorKind};
use reqwest::header::ACCEPT;
use reqwest::{Response, Url};

use crate::api::Api;
use crate::http::{self, ConfigError};
use crate::sse::{self, SseAccumulator};

/// How an API takes its key and version (its `Debug` never shows the key).
pub(crate) enum Auth {
    /// `Authorization: Bearer <key>`, when there is a key (the OpenAI APIs and compatible
    /// servers).
    Bearer(Option<String>),
    /// `anthropic-version: <version>`, and `x-api-key: <key>` when there is a key.
    Anthropic {
        /// Sent as `anthropic-version`.
        version: String,
        /// Sent as `x-api-key`.
        key: Option<String>,
    },
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (style, version, key) = match self {
            Auth::Bearer(key) => ("bearer", None, key),
            Auth::Anthropic { version, key } => ("x-api-key", Some(version), key),
        };
        f.debug_struct("Auth")
            .field("style", &style)
            .field("version", &version)
            .field("key", &key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The HTTP end of one adapter: which API it speaks, its provider name, client, checked base
/// URL, endpoint, headers and the deadline of one call.
#[derive(Debug)]
pub(crate) struct Wire {
    api: Api,
    name: String,
    client: reqwest::Client,
    /// The base URL without its trailing slash, named in transport errors.
    origin: String,
    endpoint: Url,
    auth: Auth,
    /// The most one call may take, streamed or not (a stream that drips forever ends too).
    deadline: Duration,
}

impl Wire {
    /// The wire of an adapter of `api` named `name` at `base_url` (checked, its trailing slash
    /// dropped), its client built with the `(connect, request)` timeouts (the request timeout
    /// is also the longest silence between two reads, and the call's deadline), without
    /// headers of its own until [`Wire::with_auth`].
    pub(crate) fn new(
        api: Api,
        name: &str,
        base_url: &str,
        (connect_timeout, request_timeout): (Duration, Duration),
    ) -> Result<Self, ConfigError> {
        let (origin, _) = http::checked_base_url(base_url)?;
        let client = http::build_client(connect_timeout, request_timeout)?;
        Ok(Wire {
            api,
            name: name.to_string(),
            endpoint: http::endpoint(&origin, endpoint_path(api, &origin))?,
            origin,
            client,
            auth: Auth::Bearer(None),
            deadline: request_timeout,
        })
    }

    /// The wire with its API's key (and version) headers.
    pub(crate) fn with_auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    /// The provider's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The URL requests are posted to.
    pub(crate) fn endpoint(&self) -> &Url {
        &self.endpoint
    }
}

/// Where `api` takes its calls under the base URL `origin`: Anthropic's `/v1/messages` loses
/// its `/v1` when the base URL already ends in it.
fn endpoint_path(api: Api, origin: &str) -> &'static str {
    match api {
        Api::OpenAiChat => "/chat/completions",
        Api::OpenAiResponses => "/responses",
        Api::AnthropicMessages if origin.ends_with("/v1") => "/messages",
        Api::AnthropicMessages => "/v1/messages",
    }
}

/// Posts `body` (the JSON of `request`) to the endpoint with the API's headers and, for a
/// streamed request, `Accept: text/event-stream`; a non-success status comes back as a
/// classified error, its body read in full.
pub(crate) async fn post(
    wire: &Wire,
    request: &ChatRequest,
    body: Vec<u8>,
) -> Result<Response, ProviderError> {
    let mut http_request = http::with_json_body(wire.client.post(wire.endpoint.clone()), body);
    http_request = match &wire.auth {
        Auth::Bearer(Some(key)) => http_request.bearer_auth(key),
        Auth::Bearer(None) => http_request,
        Auth::Anthropic { version, key } => {
            let http_request = http_request.header("anthropic-version", version);
            match key {
                Some(key) => http_request.header("x-api-key", key),
                None => http_request,
            }
        }
    };
    if request.stream {
        http_request = http_request.header(ACCEPT, "text/event-stream");
    }
    tracing::debug!(
        provider = %wire.name,
        api = %wire.api,
        model = %request.model,
        stream = request.stream,
        "model request"
    );
    http::send(http_request, &wire.origin).await
}

/// Reads a whole JSON answer into a `ChatResponse`.
pub(crate) type ParseAnswer = fn(&[u8]) -> Result<ChatResponse, ProviderError>;

/// One model call as every adapter makes it: `sent` (the request on its way, see [`post`]),
/// then its answer read (see [`read_answer`]), within the deadline (past it, a `timeout`
/// error that names `call_timeout_secs`); the answer's model is filled in from the request
/// when the server named none, and a streamed call sends its one `Finished` delta, with the
/// stop reason on success and `None` on failure.
pub(crate) async fn chat<S: SseAccumulator + Default>(
    wire: &Wire,
    request: &ChatRequest,
    sink: &dyn DeltaSink,
    sent: impl Future<Output = Result<Response, ProviderError>>,
    parse_answer: ParseAnswer,
) -> Result<ChatResponse, ProviderError> {
    let call = async {
        let response = sent.await?;
        read_answer::<S>(response, request.stream, sink, &wire.origin, parse_answer).await
    };
    let result = match tokio::time::timeout(wire.deadline, call).await {
        Ok(result) => result,
        Err(_) => Err(ProviderError::new(
            ProviderErrorKind::Timeout,
            format!(
                "the call to {} took longer than its deadline of {} s \
                 (`call_timeout_secs`)",
                wire.origin,
                wire.deadline.as_secs_f64()
            ),
        )),
    };
    let result = result.map(|mut answer| {
        if answer.model.is_empty() {
            answer.model.clone_from(&request.model);
        }
        answer
    });
    if request.stream {
        sse::finish_stream(result, sink)
    } else {
        result
    }
}

/// The answer of a successful `response`: its event stream read through a new `S` when a
/// stream was asked for and came, else its whole body through `parse_answer` (also from a
/// server that ignored `stream: true`, whose answer then reaches the sink as deltas).
async fn read_answer<S: SseAccumulator + Default>(
    response: Response,
    stream: bool,
    sink: &dyn DeltaSink,
    origin: &str,
    parse_answer: ParseAnswer,
) -> Result<ChatResponse, ProviderError> {
    if stream && !http::is_json(&response) {
        let response = http::expect_event_stream(response, origin).await?;
        return sse::read_sse(response.bytes_stream(), S::default(), sink, origin).await;
    }
    let body = http::read_body(response, origin).await?;
    let answer = parse_answer(&body)?;
    if stream {
        sse::replay_as_deltas(&answer, sink);
    }
    Ok(answer)
}

/// Implements [`keel_core::Provider`] for an adapter with a `wire: Wire` field and an
/// `async fn send(&self, &ChatRequest) -> Result<Response, ProviderError>`, given its stream
/// accumulator and whole-answer parser: its name is the wire's, and `chat` is [`chat`].
macro_rules! provider {
    ($adapter:ty, $stream:ty, $parse_answer:path) => {
        #[async_trait::async_trait]
        impl keel_core::Provider for $adapter {
            fn name(&self) -> &str {
                self.wire.name()
            }

            async fn chat(
                &self,
                request: &keel_core::ChatRequest,
                sink: &dyn keel_core::DeltaSink,
            ) -> Result<keel_core::ChatResponse, keel_core::ProviderError> {
                let sent = self.send(request);
                $crate::call::chat::<$stream>(&self.wire, request, sink, sent, $parse_answer).await
            }
        }
    };
}
pub(crate) use provider;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Anthropic, AnthropicConfig, OpenAiChat, OpenAiConfig, OpenAiResponses};

    #[test]
    fn no_adapter_shows_its_key_in_debug_output() {
        let openai = || OpenAiConfig::new("http://localhost:8000/v1").with_api_key("sk-secret");
        let anthropic = AnthropicConfig::new("http://localhost:8080").with_api_key("sk-secret");
        let printed = [
            format!("{:?}", OpenAiChat::new(openai()).unwrap()),
            format!("{:?}", OpenAiResponses::new(openai()).unwrap()),
            format!("{:?}", Anthropic::new(anthropic).unwrap()),
        ];
        for printed in printed {
            assert!(!printed.contains("sk-secret"), "{printed}");
            assert!(printed.contains("<redacted>"), "{printed}");
        }
    }

    #[test]
    fn each_api_posts_to_its_own_path() {
        let path = |api, base_url| {
            let wire = Wire::new(api, "p", base_url, (Duration::ZERO, Duration::ZERO)).unwrap();
            wire.endpoint().path().to_string()
        };
        assert_eq!(
            path(Api::OpenAiChat, "http://h/v1/"),
            "/v1/chat/completions"
        );
        assert_eq!(path(Api::OpenAiResponses, "http://h/v1"), "/v1/responses");
        assert_eq!(path(Api::AnthropicMessages, "http://h"), "/v1/messages");
        assert_eq!(path(Api::AnthropicMessages, "http://h/v1"), "/v1/messages");
    }
}
