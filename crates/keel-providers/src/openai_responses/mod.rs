//! The OpenAI Responses adapter: `POST {base_url}/responses`, whole or streamed.
//!
//! It runs the API statelessly (`store: false`): every call sends the whole conversation as
//! input items, and a reasoning model's reasoning is carried across turns as the encrypted
//! reasoning items of its answers, kept in [`keel_core::Reasoning::replay`] and sent back
//! verbatim. Models that reject encrypted reasoning (gpt-4o, gpt-4.1, …) are detected from
//! their first refusal and called without it from then on.
//!
//! It is configured like the chat-completions adapter, with an [`OpenAiConfig`]
//! (`OPENAI_API_KEY`, `OPENAI_BASE_URL`).

mod request;
#[cfg(test)]
mod request_reference;
mod response;
mod stream;

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use keel_core::{ChatRequest, ChatResponse, DeltaSink, Provider, ProviderError, ProviderErrorKind};
use reqwest::Url;
use reqwest::header::ACCEPT;

pub use request::{EncryptedReasoning, MIN_OUTPUT_TOKENS, build_request_body};
pub use response::parse_response;
pub use stream::parse_stream;

use crate::http::{self, ConfigError};
use crate::openai_chat::OpenAiConfig;
use crate::wire_json::ToolsJsonCache;

/// The provider name used when the config keeps the chat adapter's default name (`openai`).
pub const DEFAULT_NAME: &str = "openai-responses";

/// A Responses API endpoint as a keel [`Provider`].
#[derive(Debug)]
pub struct OpenAiResponses {
    config: OpenAiConfig,
    client: reqwest::Client,
    /// The base URL without its trailing slash, named in transport errors.
    origin: String,
    endpoint: Url,
    /// Models that rejected `include: ["reasoning.encrypted_content"]`.
    without_encrypted_reasoning: Mutex<HashSet<String>>,
    /// The JSON of the tool lists it sent last.
    tools_json: ToolsJsonCache,
}

impl OpenAiResponses {
    /// Builds the adapter (and its HTTP client) for `config`. A config named `openai` (the
    /// default of [`OpenAiConfig::new`] and [`OpenAiConfig::from_env`]) is renamed
    /// [`DEFAULT_NAME`]; any other name is kept.
    pub fn new(mut config: OpenAiConfig) -> Result<Self, ConfigError> {
        if config.name == "openai" {
            config.name = DEFAULT_NAME.to_string();
        }
        let (origin, _) = http::checked_base_url(&config.base_url)?;
        let client = http::build_client(config.connect_timeout, config.request_timeout)?;
        Ok(OpenAiResponses {
            endpoint: http::endpoint(&origin, "/responses")?,
            origin,
            client,
            config,
            without_encrypted_reasoning: Mutex::default(),
            tools_json: ToolsJsonCache::default(),
        })
    }

    /// The configuration it was built from (with its name as used).
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// Whether to ask `model` for encrypted reasoning.
    fn encrypted_reasoning(&self, model: &str) -> EncryptedReasoning {
        let refused = self
            .without_encrypted_reasoning
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(model);
        if refused {
            EncryptedReasoning::Off
        } else {
            EncryptedReasoning::On
        }
    }

    /// One call, without the stream's final `Finished` delta.
    async fn call(
        &self,
        request: &ChatRequest,
        sink: &dyn DeltaSink,
    ) -> Result<ChatResponse, ProviderError> {
        let reasoning = self.encrypted_reasoning(&request.model);
        let response = match self.send(request, reasoning).await {
            Err(error) if reasoning == EncryptedReasoning::On && rejects_encryption(&error) => {
                // Nothing was streamed yet: ask again, without it, and remember the model.
                tracing::debug!(
                    provider = %self.config.name,
                    model = %request.model,
                    "the model does not support encrypted reasoning; calling it without"
                );
                self.without_encrypted_reasoning
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(request.model.clone());
                self.send(request, EncryptedReasoning::Off).await?
            }
            other => other?,
        };
        if request.stream && !http::is_json(&response) {
            let response = http::expect_event_stream(response, &self.origin).await?;
            return stream::read_stream(response.bytes_stream(), sink, &self.origin).await;
        }
        // A whole answer, also from a server that ignored `stream: true`.
        let body = http::read_body(response, &self.origin).await?;
        let answer = parse_response(&body)?;
        if request.stream {
            stream::replay_as_deltas(&answer, sink);
        }
        Ok(answer)
    }

    /// The JSON body this adapter sends for `request`, with encrypted reasoning or without.
    pub fn request_body(&self, request: &ChatRequest, reasoning: EncryptedReasoning) -> Vec<u8> {
        let tools = self.tools_json.offered(&request.tools, request::tools_json);
        let body = request::wire_body(request, reasoning, tools.as_deref());
        crate::wire_json::json_bytes(&body)
    }

    /// Sends the request; a non-success status comes back as a classified error.
    async fn send(
        &self,
        request: &ChatRequest,
        reasoning: EncryptedReasoning,
    ) -> Result<reqwest::Response, ProviderError> {
        let body = self.request_body(request, reasoning);
        let mut http_request = http::with_json_body(self.client.post(self.endpoint.clone()), body);
        if let Some(key) = &self.config.api_key {
            http_request = http_request.bearer_auth(key);
        }
        if request.stream {
            http_request = http_request.header(ACCEPT, "text/event-stream");
        }
        tracing::debug!(
            provider = %self.config.name,
            model = %request.model,
            stream = request.stream,
            "responses request"
        );
        http::send(http_request, &self.origin).await
    }
}

/// True for the 400 OpenAI answers a model that cannot return encrypted reasoning
/// ("Encrypted content is not supported with this model.", `param: include`).
fn rejects_encryption(error: &ProviderError) -> bool {
    error.kind == ProviderErrorKind::InvalidRequest
        && error
            .message
            .to_ascii_lowercase()
            .contains("encrypted content")
}

#[async_trait]
impl Provider for OpenAiResponses {
    fn name(&self) -> &str {
        &self.config.name
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        sink: &dyn DeltaSink,
    ) -> Result<ChatResponse, ProviderError> {
        let call = self.call(request, sink);
        http::answer_within(
            self.config.request_timeout,
            &self.origin,
            request,
            sink,
            call,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chat_default_name_becomes_openai_responses_and_others_are_kept() {
        let adapter = OpenAiResponses::new(OpenAiConfig::from_lookup(|_| None)).unwrap();
        assert_eq!(adapter.name(), DEFAULT_NAME);
        assert_eq!(
            adapter.endpoint.as_str(),
            "https://api.openai.com/v1/responses"
        );
        let mut config = OpenAiConfig::new("http://localhost:8000/v1/");
        config.name = "azure".into();
        let adapter = OpenAiResponses::new(config).unwrap();
        assert_eq!(adapter.name(), "azure");
        assert_eq!(
            adapter.endpoint.as_str(),
            "http://localhost:8000/v1/responses"
        );
        assert!(OpenAiResponses::new(OpenAiConfig::new("ftp://x")).is_err());
    }

    #[test]
    fn only_the_encrypted_content_refusal_turns_encryption_off() {
        let refusal = ProviderError::new(
            ProviderErrorKind::InvalidRequest,
            "Encrypted content is not supported with this model.",
        )
        .with_status(400);
        assert!(rejects_encryption(&refusal));
        let other = ProviderError::new(ProviderErrorKind::InvalidRequest, "bad tools");
        assert!(!rejects_encryption(&other));
        let server = ProviderError::new(ProviderErrorKind::Server, "encrypted content lost");
        assert!(!rejects_encryption(&server));
    }
}
