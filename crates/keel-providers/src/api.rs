//! Which wire API a provider speaks, and how keel decides it (seed 004): an explicit choice
//! first, then the provider's name, then the base URL, then chat-completions.

use std::fmt;

/// The wire APIs keel speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// OpenAI chat-completions (`/v1/chat/completions`) and every compatible server.
    OpenAiChat,
    /// The OpenAI Responses API (`/v1/responses`).
    OpenAiResponses,
    /// Anthropic Messages (`/v1/messages`).
    AnthropicMessages,
}

impl Api {
    /// Every API, for listings and tests.
    pub const ALL: [Api; 3] = [
        Api::OpenAiChat,
        Api::OpenAiResponses,
        Api::AnthropicMessages,
    ];

    /// The canonical name used in `keel.toml` (`api = "..."`) and `--api`.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::OpenAiChat => "openai-chat",
            Api::OpenAiResponses => "openai-responses",
            Api::AnthropicMessages => "anthropic-messages",
        }
    }

    /// Reads an API name; also accepts the short forms `chat`, `responses`, `messages` and
    /// `anthropic`.
    pub fn parse(name: &str) -> Option<Api> {
        match name.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "openai-chat" | "chat" | "chat-completions" | "openai" => Some(Api::OpenAiChat),
            "openai-responses" | "responses" | "codex-responses" => Some(Api::OpenAiResponses),
            "anthropic-messages" | "anthropic" | "messages" => Some(Api::AnthropicMessages),
            _ => None,
        }
    }

    /// The API a provider's name implies, when it implies one.
    pub fn from_provider_name(name: &str) -> Option<Api> {
        let name = name.to_ascii_lowercase();
        if name.contains("anthropic") || name.contains("claude") {
            Some(Api::AnthropicMessages)
        } else if name.contains("responses") || name.contains("codex") {
            Some(Api::OpenAiResponses)
        } else {
            None
        }
    }

    /// The API a base URL implies, when it implies one.
    pub fn from_base_url(url: &str) -> Option<Api> {
        let url = url.to_ascii_lowercase();
        if url.contains("anthropic.com") {
            Some(Api::AnthropicMessages)
        } else if url.contains("/backend-api/codex")
            || url.trim_end_matches('/').ends_with("/responses")
        {
            Some(Api::OpenAiResponses)
        } else {
            None
        }
    }

    /// Resolves the API: `explicit`, else the provider's name, else the base URL, else
    /// chat-completions.
    pub fn resolve(explicit: Option<Api>, provider_name: &str, base_url: Option<&str>) -> Api {
        explicit
            .or_else(|| Api::from_provider_name(provider_name))
            .or_else(|| base_url.and_then(Api::from_base_url))
            .unwrap_or(Api::OpenAiChat)
    }

    /// The official endpoint, used when no base URL is configured.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Api::OpenAiChat | Api::OpenAiResponses => crate::openai_chat::DEFAULT_BASE_URL,
            Api::AnthropicMessages => crate::anthropic::DEFAULT_BASE_URL,
        }
    }

    /// The environment variable that holds the key by default.
    pub fn default_key_env(self) -> &'static str {
        match self {
            Api::OpenAiChat | Api::OpenAiResponses => "OPENAI_API_KEY",
            Api::AnthropicMessages => "ANTHROPIC_API_KEY",
        }
    }

    /// The environment variable that overrides the base URL.
    pub fn base_url_env(self) -> &'static str {
        match self {
            Api::OpenAiChat | Api::OpenAiResponses => "OPENAI_BASE_URL",
            Api::AnthropicMessages => "ANTHROPIC_BASE_URL",
        }
    }

    /// The base URL and key from the environment, read through `lookup`: the
    /// [`base_url_env`](Api::base_url_env) (else the [`default_base_url`](Api::default_base_url))
    /// and the [`default_key_env`](Api::default_key_env); a blank value counts as unset.
    pub(crate) fn base_url_and_key(
        self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> (String, Option<String>) {
        let set = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
        let base_url = set(self.base_url_env());
        let base_url = base_url.unwrap_or_else(|| self.default_base_url().to_string());
        (base_url, set(self.default_key_env()))
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `temperature` to send (the same key in all three APIs), when the caller set one:
/// rounded to three decimals so `0.2` goes out as `0.2`, not its `f32` expansion.
pub(crate) fn wire_temperature(request: &keel_core::ChatRequest) -> Option<f64> {
    request
        .temperature
        .map(|temperature| (f64::from(temperature) * 1000.0).round() / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_beats_name_beats_url_beats_default() {
        let anthropic_url = Some("https://api.anthropic.com");
        assert_eq!(
            Api::resolve(Some(Api::OpenAiResponses), "claude", anthropic_url),
            Api::OpenAiResponses
        );
        assert_eq!(Api::resolve(None, "claude", None), Api::AnthropicMessages);
        assert_eq!(
            Api::resolve(None, "work-proxy", anthropic_url),
            Api::AnthropicMessages
        );
        assert_eq!(
            Api::resolve(None, "codex", Some("http://localhost:8000/v1")),
            Api::OpenAiResponses
        );
        assert_eq!(
            Api::resolve(None, "ollama", Some("http://localhost:11434/v1")),
            Api::OpenAiChat
        );
        assert_eq!(Api::resolve(None, "openai", None), Api::OpenAiChat);
    }

    #[test]
    fn names_parse_in_long_and_short_forms() {
        for api in Api::ALL {
            assert_eq!(Api::parse(api.as_str()), Some(api));
        }
        assert_eq!(Api::parse("anthropic"), Some(Api::AnthropicMessages));
        assert_eq!(Api::parse("Responses"), Some(Api::OpenAiResponses));
        assert_eq!(Api::parse("gemini"), None);
    }
}
