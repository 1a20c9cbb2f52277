//! One way to build any adapter: an [`Endpoint`] (name, API, base URL, key) in, a
//! `Provider` out.

use std::sync::Arc;
use std::time::Duration;

use keel_core::Provider;

use crate::anthropic::{Anthropic, AnthropicConfig};
use crate::api::Api;
use crate::http::ConfigError;
use crate::openai_chat::{OpenAiChat, OpenAiConfig};
use crate::openai_responses::OpenAiResponses;

/// Everything needed to reach one provider.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The provider's name in events and run records.
    pub name: String,
    /// The wire API it speaks.
    pub api: Api,
    /// Its base URL (`.../v1` for the OpenAI APIs; with or without `/v1` for Anthropic).
    pub base_url: String,
    /// Its key, when it needs one.
    pub api_key: Option<String>,
    /// Anthropic prompt caching (ignored by the other APIs).
    pub prompt_caching: bool,
    /// The most one call may take, streamed or not.
    pub call_timeout: Duration,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("name", &self.name)
            .field("api", &self.api)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("prompt_caching", &self.prompt_caching)
            .field("call_timeout", &self.call_timeout)
            .finish()
    }
}

/// Builds the adapter for `endpoint`.
pub fn connect(endpoint: &Endpoint) -> Result<Arc<dyn Provider>, ConfigError> {
    Ok(match endpoint.api {
        Api::OpenAiChat => Arc::new(OpenAiChat::new(openai_config(endpoint))?),
        Api::OpenAiResponses => Arc::new(OpenAiResponses::new(openai_config(endpoint))?),
        Api::AnthropicMessages => {
            let mut config = AnthropicConfig::new(endpoint.base_url.clone());
            config.name = endpoint.name.clone();
            config.api_key = endpoint.api_key.clone();
            config.prompt_caching = endpoint.prompt_caching;
            config.request_timeout = endpoint.call_timeout;
            Arc::new(Anthropic::new(config)?)
        }
    })
}

fn openai_config(endpoint: &Endpoint) -> OpenAiConfig {
    let mut config = OpenAiConfig::new(endpoint.base_url.clone());
    config.name = endpoint.name.clone();
    config.api_key = endpoint.api_key.clone();
    config.request_timeout = endpoint.call_timeout;
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_api_connects_and_keeps_its_name() {
        for api in Api::ALL {
            let endpoint = Endpoint {
                name: format!("my-{api}"),
                api,
                base_url: "http://127.0.0.1:9/v1".into(),
                api_key: Some("k".into()),
                prompt_caching: true,
                call_timeout: Duration::from_secs(600),
            };
            let provider = connect(&endpoint).unwrap();
            assert_eq!(provider.name(), endpoint.name);
            assert!(
                !format!("{endpoint:?}").contains("\"k\""),
                "the key is never printed"
            );
        }
    }
}
