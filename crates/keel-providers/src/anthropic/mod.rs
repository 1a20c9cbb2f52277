//! The Anthropic Messages adapter: `POST {base_url}/v1/messages`, whole or streamed, with
//! prompt-cache breakpoints and signed thinking blocks kept for replay.
//!
//! - `request.rs`: `ChatRequest` → wire JSON (system field, alternating turns, tool_use and
//!   tool_result blocks, cache breakpoints),
//! - `response.rs`: a whole JSON answer → `ChatResponse`,
//! - `stream.rs`: the event-stream accumulator.

mod request;
#[cfg(test)]
mod request_reference;
mod response;
mod stream;

use std::fmt;
use std::time::Duration;

use keel_core::{ChatRequest, ProviderError};
use reqwest::Response;

pub use request::{BodyOptions, MAX_CACHE_BREAKPOINTS, PLACEHOLDER_USER_TEXT, build_request_body};
pub use response::parse_message;
pub use stream::parse_stream;

use crate::api::Api;
use crate::call::{self, Auth, Wire};
use crate::http::ConfigError;
use crate::wire_json::ToolsJsonCache;

/// The base URL used when `ANTHROPIC_BASE_URL` is not set.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// Default [`AnthropicConfig::version`], sent as `anthropic-version`.
pub const DEFAULT_VERSION: &str = "2023-06-01";
/// Default [`AnthropicConfig::default_max_tokens`].
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// Default [`AnthropicConfig::request_timeout`].
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
/// Default [`AnthropicConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how to reach the Messages API.
#[derive(Clone, PartialEq, Eq)]
pub struct AnthropicConfig {
    /// The provider's name in events and run records (`anthropic` by default).
    pub name: String,
    /// API root, e.g. `https://api.anthropic.com` or `http://localhost:8080/v1`; requests go
    /// to `{base_url}/v1/messages`, or `{base_url}/messages` when it already ends in `/v1`. A
    /// trailing slash is ignored.
    pub base_url: String,
    /// Sent as `x-api-key` when set.
    pub api_key: Option<String>,
    /// Sent as `anthropic-version`.
    pub version: String,
    /// Mark prompt-cache breakpoints on the system prompt, the tools and the last two user
    /// turns (on by default).
    pub prompt_caching: bool,
    /// `max_tokens` for a request that sets none (the API requires one).
    pub default_max_tokens: u32,
    /// The most one call may take, streamed or not (a stream that drips forever ends too); also
    /// the longest silence between two reads.
    pub request_timeout: Duration,
    /// Longest wait for the TCP (and TLS) connection.
    pub connect_timeout: Duration,
}

impl AnthropicConfig {
    /// A config for `base_url` named `anthropic`, without a key, with the default version,
    /// prompt caching on, and the default token limit and timeouts.
    pub fn new(base_url: impl Into<String>) -> Self {
        AnthropicConfig {
            name: "anthropic".to_string(),
            base_url: base_url.into(),
            api_key: None,
            version: DEFAULT_VERSION.to_string(),
            prompt_caching: true,
            default_max_tokens: DEFAULT_MAX_TOKENS,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// Sets the API key.
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(api_key.into());
        self
    }

    /// Reads `ANTHROPIC_BASE_URL` (default [`DEFAULT_BASE_URL`]) and `ANTHROPIC_API_KEY` (an
    /// empty value counts as unset).
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`AnthropicConfig::from_env`] with the variables read through `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let (base_url, api_key) = Api::AnthropicMessages.base_url_and_key(lookup);
        AnthropicConfig {
            api_key,
            ..Self::new(base_url)
        }
    }
}

impl fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("version", &self.version)
            .field("prompt_caching", &self.prompt_caching)
            .field("default_max_tokens", &self.default_max_tokens)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// The Anthropic Messages API as a keel [`Provider`](keel_core::Provider).
#[derive(Debug)]
pub struct Anthropic {
    config: AnthropicConfig,
    wire: Wire,
    /// The JSON of the tool lists it sent last (for its fixed [`BodyOptions`]).
    tools_json: ToolsJsonCache,
}

impl Anthropic {
    /// Builds the adapter (and its HTTP client) for `config`.
    pub fn new(config: AnthropicConfig) -> Result<Self, ConfigError> {
        let timeouts = (config.connect_timeout, config.request_timeout);
        let wire = Wire::new(
            Api::AnthropicMessages,
            &config.name,
            &config.base_url,
            timeouts,
        )?;
        let wire = wire.with_auth(Auth::Anthropic {
            version: config.version.clone(),
            key: config.api_key.clone(),
        });
        Ok(Anthropic {
            tools_json: ToolsJsonCache::default(),
            wire,
            config,
        })
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        self.wire.endpoint().as_str()
    }

    /// The JSON body this adapter sends for `request`.
    pub fn request_body(&self, request: &ChatRequest) -> Vec<u8> {
        let options = BodyOptions {
            default_max_tokens: self.config.default_max_tokens,
            prompt_caching: self.config.prompt_caching,
        };
        let tools = self
            .tools_json
            .offered(&request.tools, |tools| request::tools_json(tools, options));
        let body = request::wire_body(request, options, tools.as_deref());
        crate::wire_json::json_bytes(&body)
    }

    /// Posts the body of `request`.
    async fn send(&self, request: &ChatRequest) -> Result<Response, ProviderError> {
        call::post(&self.wire, request, self.request_body(request)).await
    }
}

call::provider!(Anthropic, stream::MessageAccumulator, parse_message);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_from_env_defaults_to_anthropic_without_a_key() {
        let config = AnthropicConfig::from_lookup(|_| None);
        assert_eq!(config.base_url, DEFAULT_BASE_URL);
        assert_eq!(config.api_key, None);
        assert_eq!(config.name, "anthropic");
        assert_eq!(config.version, "2023-06-01");
        assert!(config.prompt_caching);
        assert_eq!(config.default_max_tokens, 4096);

        let config = AnthropicConfig::from_lookup(|name| match name {
            "ANTHROPIC_BASE_URL" => Some("http://localhost:8080/v1/".into()),
            "ANTHROPIC_API_KEY" => Some("sk-ant-test".into()),
            _ => None,
        });
        assert_eq!(config.base_url, "http://localhost:8080/v1/");
        assert_eq!(config.api_key.as_deref(), Some("sk-ant-test"));
        let blank = AnthropicConfig::from_lookup(|_| Some(" ".into()));
        assert_eq!(blank.base_url, DEFAULT_BASE_URL);
        assert_eq!(blank.api_key, None);
    }

    #[test]
    fn the_endpoint_adds_v1_only_when_missing() {
        let endpoint = |base: &str| {
            Anthropic::new(AnthropicConfig::new(base))
                .unwrap()
                .endpoint()
                .to_string()
        };
        assert_eq!(
            endpoint(DEFAULT_BASE_URL),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            endpoint("https://api.anthropic.com/"),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            endpoint("http://localhost:8080/v1/"),
            "http://localhost:8080/v1/messages"
        );
        assert_eq!(
            endpoint("http://proxy/anthropic"),
            "http://proxy/anthropic/v1/messages"
        );
        assert!(Anthropic::new(AnthropicConfig::new("ftp://x")).is_err());
        assert!(Anthropic::new(AnthropicConfig::new("not a url")).is_err());
    }

    #[test]
    fn debug_output_hides_the_key() {
        let config = AnthropicConfig::new(DEFAULT_BASE_URL).with_api_key("sk-ant-secret");
        assert!(!format!("{config:?}").contains("sk-ant-secret"));
    }
}
