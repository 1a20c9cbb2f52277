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

use keel_core::{ChatRequest, ProviderError, ProviderErrorKind};
use reqwest::Response;

pub use request::{EncryptedReasoning, MIN_OUTPUT_TOKENS, build_request_body};
pub use response::parse_response;
pub use stream::parse_stream;

use crate::api::Api;
use crate::call::{self, Wire};
use crate::http::ConfigError;
use crate::openai_chat::OpenAiConfig;
use crate::wire_json::ToolsJsonCache;

/// The provider name used when the config keeps the chat adapter's default name (`openai`).
pub const DEFAULT_NAME: &str = "openai-responses";

/// A Responses API endpoint as a keel [`Provider`](keel_core::Provider).
#[derive(Debug)]
pub struct OpenAiResponses {
    config: OpenAiConfig,
    wire: Wire,
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
        Ok(OpenAiResponses {
            wire: config.wire(Api::OpenAiResponses)?,
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

    /// Posts the body of `request`, with encrypted reasoning unless its model refused it
    /// before; a model that refuses it now is asked again without it, and remembered.
    async fn send(&self, request: &ChatRequest) -> Result<Response, ProviderError> {
        let reasoning = self.encrypted_reasoning(&request.model);
        let body = self.request_body(request, reasoning);
        match call::post(&self.wire, request, body).await {
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
                let body = self.request_body(request, EncryptedReasoning::Off);
                call::post(&self.wire, request, body).await
            }
            other => other,
        }
    }

    /// The JSON body this adapter sends for `request`, with encrypted reasoning or without.
    pub fn request_body(&self, request: &ChatRequest, reasoning: EncryptedReasoning) -> Vec<u8> {
        let tools = self.tools_json.offered(&request.tools, request::tools_json);
        let body = request::wire_body(request, reasoning, tools.as_deref());
        crate::wire_json::json_bytes(&body)
    }
}

call::provider!(OpenAiResponses, stream::EventAccumulator, parse_response);

/// True for the 400 OpenAI answers a model that cannot return encrypted reasoning
/// ("Encrypted content is not supported with this model.", `param: include`).
fn rejects_encryption(error: &ProviderError) -> bool {
    error.kind == ProviderErrorKind::InvalidRequest
        && error
            .message
            .to_ascii_lowercase()
            .contains("encrypted content")
}

#[cfg(test)]
mod tests {
    use keel_core::Provider;

    use super::*;

    #[test]
    fn the_chat_default_name_becomes_openai_responses_and_others_are_kept() {
        let adapter = OpenAiResponses::new(OpenAiConfig::from_lookup(|_| None)).unwrap();
        assert_eq!(adapter.name(), DEFAULT_NAME);
        assert_eq!(
            adapter.wire.endpoint().as_str(),
            "https://api.openai.com/v1/responses"
        );
        let mut config = OpenAiConfig::new("http://localhost:8000/v1/");
        config.name = "azure".into();
        let adapter = OpenAiResponses::new(config).unwrap();
        assert_eq!(adapter.name(), "azure");
        assert_eq!(
            adapter.wire.endpoint().as_str(),
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
