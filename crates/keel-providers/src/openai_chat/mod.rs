//! The OpenAI chat-completions adapter: `POST {base_url}/chat/completions`, whole or streamed.
//! It serves api.openai.com and the compatible servers (Ollama, vLLM, llama.cpp's server,
//! LiteLLM and other proxies): without an API key no `Authorization` header is sent.

mod request;
#[cfg(test)]
mod request_reference;
mod response;
mod stream;

use std::fmt;
use std::time::Duration;

use keel_core::{ChatRequest, ProviderError};
use reqwest::Response;

pub use request::{TokenLimitField, build_request_body};
pub use response::parse_completion;
pub use stream::parse_stream;

use crate::api::Api;
use crate::call::{self, Auth, Wire};
use crate::http::ConfigError;
use crate::wire_json::ToolsJsonCache;

/// The base URL used when `OPENAI_BASE_URL` is not set.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Default [`OpenAiConfig::request_timeout`].
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
/// Default [`OpenAiConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how to reach a chat-completions server.
#[derive(Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// The provider's name in events and run records (`openai` by default).
    pub name: String,
    /// API root, e.g. `https://api.openai.com/v1` or `http://localhost:11434/v1`; a trailing
    /// slash is ignored.
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    /// The most one call may take, streamed or not (a stream that drips forever ends too); also
    /// the longest silence between two reads.
    pub request_timeout: Duration,
    /// Longest wait for the TCP (and TLS) connection.
    pub connect_timeout: Duration,
}

impl OpenAiConfig {
    /// A config for `base_url` named `openai`, without a key, with the default timeouts.
    pub fn new(base_url: impl Into<String>) -> Self {
        OpenAiConfig {
            name: "openai".to_string(),
            base_url: base_url.into(),
            api_key: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// Sets the API key.
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(api_key.into());
        self
    }

    /// Reads `OPENAI_BASE_URL` (default [`DEFAULT_BASE_URL`]) and `OPENAI_API_KEY` (an empty
    /// value counts as unset).
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`OpenAiConfig::from_env`] with the variables read through `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let (base_url, api_key) = Api::OpenAiChat.base_url_and_key(lookup);
        OpenAiConfig {
            api_key,
            ..Self::new(base_url)
        }
    }
}

impl OpenAiConfig {
    /// The wire of an adapter of `api` (one of the OpenAI APIs) with this configuration.
    pub(crate) fn wire(&self, api: Api) -> Result<Wire, ConfigError> {
        let timeouts = (self.connect_timeout, self.request_timeout);
        let wire = Wire::new(api, &self.name, &self.base_url, timeouts)?;
        Ok(wire.with_auth(Auth::Bearer(self.api_key.clone())))
    }
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// A chat-completions endpoint as a keel [`Provider`](keel_core::Provider).
#[derive(Debug)]
pub struct OpenAiChat {
    config: OpenAiConfig,
    wire: Wire,
    token_limit: TokenLimitField,
    /// The JSON of the tool lists it sent last.
    tools_json: ToolsJsonCache,
}

impl OpenAiChat {
    /// Builds the adapter (and its HTTP client) for `config`.
    pub fn new(config: OpenAiConfig) -> Result<Self, ConfigError> {
        let wire = config.wire(Api::OpenAiChat)?;
        Ok(OpenAiChat {
            token_limit: TokenLimitField::for_host(wire.endpoint().host_str()),
            tools_json: ToolsJsonCache::default(),
            wire,
            config,
        })
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The JSON body this adapter sends for `request`.
    pub fn request_body(&self, request: &ChatRequest) -> Vec<u8> {
        let tools = self.tools_json.offered(&request.tools, request::tools_json);
        let body = request::wire_body(request, self.token_limit, tools.as_deref());
        crate::wire_json::json_bytes(&body)
    }

    /// Posts the body of `request`.
    async fn send(&self, request: &ChatRequest) -> Result<Response, ProviderError> {
        call::post(&self.wire, request, self.request_body(request)).await
    }
}

call::provider!(OpenAiChat, stream::ChunkAccumulator, parse_completion);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_from_env_defaults_to_openai_without_a_key() {
        let config = OpenAiConfig::from_lookup(|_| None);
        assert_eq!(config.base_url, DEFAULT_BASE_URL);
        assert_eq!(config.api_key, None);
        assert_eq!(config.name, "openai");

        let config = OpenAiConfig::from_lookup(|name| match name {
            "OPENAI_BASE_URL" => Some("http://localhost:11434/v1/".into()),
            "OPENAI_API_KEY" => Some(String::new()),
            _ => None,
        });
        assert_eq!(config.base_url, "http://localhost:11434/v1/");
        assert_eq!(config.api_key, None);
    }

    #[test]
    fn base_url_is_checked_and_its_trailing_slash_dropped() {
        let chat = OpenAiChat::new(OpenAiConfig::new("http://localhost:8000/v1/")).unwrap();
        assert_eq!(
            chat.wire.endpoint().as_str(),
            "http://localhost:8000/v1/chat/completions"
        );
        assert_eq!(chat.token_limit, TokenLimitField::MaxTokens);
        let openai = OpenAiChat::new(OpenAiConfig::new(DEFAULT_BASE_URL)).unwrap();
        assert_eq!(openai.token_limit, TokenLimitField::MaxCompletionTokens);
        assert!(OpenAiChat::new(OpenAiConfig::new("ftp://x")).is_err());
        assert!(OpenAiChat::new(OpenAiConfig::new("not a url")).is_err());
    }

    #[test]
    fn debug_output_hides_the_key() {
        let config = OpenAiConfig::new(DEFAULT_BASE_URL).with_api_key("sk-secret");
        assert!(!format!("{config:?}").contains("sk-secret"));
    }
}
