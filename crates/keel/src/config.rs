//! Configuration: `keel.toml` (in `$KEEL_HOME`, or `--config FILE`), then the environment, then
//! flags — each later source wins. Every problem is one line that says what to fix.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use keel_providers::Api;
use serde::Deserialize;

use crate::cli::AgentArgs;

/// The system prompt used when the configuration sets none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are keel, an agent that completes tasks with tools. \
Use the file tools to inspect and change files in the workspace; paths are relative to it. \
When the task is done, answer briefly with what you did.";

/// The providers keel knows without configuration.
pub const BUILTIN_PROVIDERS: [&str; 4] = ["openai", "openai-responses", "anthropic", "mock"];

/// A configuration problem: the user must fix something before keel can run (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// What `keel.toml` may contain. Unknown keys are an error, so typos do not pass silently.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The provider to use: a built-in name or a key of `providers`.
    pub provider: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Base URL of the chosen provider's API.
    pub base_url: Option<String>,
    /// System prompt.
    pub system_prompt: Option<String>,
    /// Cap on model calls per turn.
    pub max_iterations: Option<u32>,
    /// Cap on the characters of one tool result.
    pub tool_result_max_chars: Option<usize>,
    /// Cap on output tokens per model call.
    pub max_tokens: Option<u32>,
    /// Stream answers (default true).
    pub stream: Option<bool>,
    /// Directory the file tools are confined to.
    pub workspace: Option<PathBuf>,
    /// Named providers, `[providers.NAME]`.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
}

/// One `[providers.NAME]` table.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// `openai-chat`, `openai-responses` or `anthropic-messages`.
    pub api: Option<String>,
    /// Base URL of its API.
    pub base_url: Option<String>,
    /// The environment variable holding its key.
    pub api_key_env: Option<String>,
    /// Models it serves; the first is its default, and `--model` picks this provider when it
    /// names one of them.
    #[serde(default)]
    pub models: Vec<String>,
    /// Anthropic prompt caching (default on).
    pub prompt_caching: Option<bool>,
}

/// The provider an invocation talks to, fully resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderChoice {
    /// Its name (built-in or configured).
    pub name: String,
    /// The wire API it speaks.
    pub api: Api,
    /// Its base URL.
    pub base_url: String,
    /// Its key, when one is set.
    pub api_key: Option<String>,
    /// Anthropic prompt caching.
    pub prompt_caching: bool,
}

/// The effective settings of one invocation.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The provider.
    pub provider: ProviderChoice,
    /// Model name.
    pub model: String,
    /// System prompt.
    pub system_prompt: String,
    /// Cap on model calls per turn.
    pub max_iterations: Option<u32>,
    /// Cap on the characters of one tool result.
    pub tool_result_max_chars: Option<usize>,
    /// Cap on output tokens per model call.
    pub max_tokens: Option<u32>,
    /// Stream answers.
    pub stream: bool,
    /// Directory the file tools are confined to.
    pub workspace: PathBuf,
}

/// keel's home directory: `$KEEL_HOME`, else the platform data directory's `keel`.
pub fn keel_home() -> Result<PathBuf, ConfigError> {
    if let Some(home) = std::env::var_os("KEEL_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    dirs::data_dir()
        .map(|d| d.join("keel"))
        .ok_or_else(|| ConfigError("cannot find a data directory: set KEEL_HOME".into()))
}

/// Reads the configuration file: `explicit` must exist; the default `$KEEL_HOME/keel.toml`
/// may be absent.
pub fn load_file(explicit: Option<&Path>, home: &Path) -> Result<FileConfig, ConfigError> {
    let (path, required) = match explicit {
        Some(path) => (path.to_path_buf(), true),
        None => (home.join("keel.toml"), false),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
            return Ok(FileConfig::default());
        }
        Err(e) => {
            return Err(ConfigError(format!(
                "cannot read config file {}: {e}",
                path.display()
            )));
        }
    };
    parse_file(&text).map_err(|message| {
        ConfigError(format!("invalid config file {}: {message}", path.display()))
    })
}

/// Parses `keel.toml` text; the error is one line with the line number.
pub fn parse_file(text: &str) -> Result<FileConfig, String> {
    toml::from_str(text).map_err(|e| {
        let message = e.message().trim().replace('\n', " ");
        // An unknown key is reported with the span of its whole table; point at the key.
        let unknown_key_line = message
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split('`').next())
            .and_then(|key| line_of_key(text, key));
        let span_line = e.span().map(|span| {
            let start = span.start.min(text.len());
            text[..start].matches('\n').count() + 1
        });
        match unknown_key_line.or(span_line) {
            Some(line) => format!("line {line}: {message}"),
            None => message,
        }
    })
}

/// The 1-based line where `key` is assigned.
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|line| {
            line.trim_start()
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(|index| index + 1)
}

/// Combines file, environment and flags into the effective settings.
pub fn resolve(
    file: FileConfig,
    env: &dyn Fn(&str) -> Option<String>,
    flags: &AgentArgs,
) -> Result<Settings, ConfigError> {
    let model_flag = flags.model.clone().or_else(|| env("KEEL_MODEL"));
    let name = flags
        .provider
        .clone()
        .or_else(|| env("KEEL_PROVIDER"))
        .or_else(|| file.provider.clone())
        .or_else(|| provider_serving(&file, model_flag.as_deref()))
        .unwrap_or_else(|| "openai".to_string());
    let defined = file.providers.get(&name).cloned();
    if defined.is_none() && !BUILTIN_PROVIDERS.contains(&name.as_str()) {
        let mut known: Vec<&str> = BUILTIN_PROVIDERS.to_vec();
        known.extend(file.providers.keys().map(String::as_str));
        return Err(ConfigError(format!(
            "unknown provider `{name}`: use one of {} or define [providers.{name}] in keel.toml",
            known.join(", ")
        )));
    }
    let defined = defined.unwrap_or_default();
    let file_base_url = match file.provider.as_deref() {
        // A top-level base_url belongs to the top-level provider.
        Some(top) if top == name => file.base_url.clone(),
        None if flags.provider.is_none() && env("KEEL_PROVIDER").is_none() => file.base_url.clone(),
        _ => None,
    };
    let provider = choose_provider(&name, &defined, file_base_url, env, flags)?;
    let model = model_flag
        .or(file.model)
        .or_else(|| defined.models.first().cloned())
        .unwrap_or_else(|| default_model(&name, provider.api).to_string());
    if flags.max_iterations == Some(0) || file.max_iterations == Some(0) {
        return Err(ConfigError("max_iterations must be at least 1".into()));
    }
    if file.tool_result_max_chars == Some(0) {
        return Err(ConfigError(
            "tool_result_max_chars must be at least 1".into(),
        ));
    }
    Ok(Settings {
        provider,
        model,
        system_prompt: file
            .system_prompt
            .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_string()),
        max_iterations: flags.max_iterations.or(file.max_iterations),
        tool_result_max_chars: file.tool_result_max_chars,
        max_tokens: file.max_tokens,
        stream: !flags.no_stream && file.stream.unwrap_or(true),
        workspace: flags
            .workspace
            .clone()
            .or(file.workspace)
            .unwrap_or_else(|| PathBuf::from(".")),
    })
}

/// The one configured provider whose `models` lists `model`.
fn provider_serving(file: &FileConfig, model: Option<&str>) -> Option<String> {
    let model = model?;
    let mut serving = file
        .providers
        .iter()
        .filter(|(_, p)| p.models.iter().any(|m| m == model));
    match (serving.next(), serving.next()) {
        (Some((name, _)), None) => Some(name.clone()),
        _ => None,
    }
}

fn choose_provider(
    name: &str,
    defined: &ProviderConfig,
    file_base_url: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
    flags: &AgentArgs,
) -> Result<ProviderChoice, ConfigError> {
    let explicit_api = match flags.api.as_deref().or(defined.api.as_deref()) {
        Some(text) => Some(Api::parse(text).ok_or_else(|| {
            ConfigError(format!(
                "unknown api `{text}`: use openai-chat, openai-responses or anthropic-messages"
            ))
        })?),
        None => None,
    };
    let is_mock = name == "mock";
    let file_url = defined.base_url.clone().or(file_base_url);
    let api = Api::resolve(
        explicit_api,
        name,
        flags.base_url.as_deref().or(file_url.as_deref()),
    );
    // The API's own environment variable counts for built-in providers only: a configured
    // `[providers.local]` must not be redirected by OPENAI_BASE_URL.
    let env_url = (BUILTIN_PROVIDERS.contains(&name) && !is_mock)
        .then(|| env(api.base_url_env()))
        .flatten();
    let raw_url = flags.base_url.clone().or(env_url).or(file_url);
    if is_mock && raw_url.is_none() {
        return Err(ConfigError(
            "--provider mock needs --base-url: start a mock with `keel mock-provider --script \
             FILE` and pass the address it prints"
                .into(),
        ));
    }
    let base_url = normalize_base_url(raw_url.as_deref().unwrap_or(api.default_base_url()))?;
    let key_env = defined
        .api_key_env
        .clone()
        .unwrap_or_else(|| api.default_key_env().to_string());
    let api_key = if is_mock {
        None
    } else {
        env(&key_env).filter(|k| !k.trim().is_empty())
    };
    let official = base_url.contains("api.openai.com") || base_url.contains("api.anthropic.com");
    if api_key.is_none() && !is_mock && (official || defined.api_key_env.is_some()) {
        return Err(ConfigError(format!(
            "{key_env} is not set: export {key_env}=<your key>, or point --base-url at a server \
             that needs no key"
        )));
    }
    Ok(ProviderChoice {
        name: name.to_string(),
        api,
        base_url,
        api_key,
        prompt_caching: defined.prompt_caching.unwrap_or(true),
    })
}

fn default_model(provider: &str, api: Api) -> &'static str {
    match (provider, api) {
        ("mock", _) => "mock-model",
        (_, Api::AnthropicMessages) => "claude-sonnet-4-5",
        _ => "gpt-4o-mini",
    }
}

/// Checks a base URL and gives a bare `http://host:port` the conventional `/v1` path.
fn normalize_base_url(url: &str) -> Result<String, ConfigError> {
    let trimmed = url.trim().trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("http://")
        .or_else(|| trimmed.strip_prefix("https://"))
        .ok_or_else(|| {
            ConfigError(format!(
                "invalid base URL `{url}`: it must start with http:// or https://"
            ))
        })?;
    if rest.is_empty() {
        return Err(ConfigError(format!("invalid base URL `{url}`: no host")));
    }
    if rest.contains('/') {
        Ok(trimmed.to_string())
    } else {
        Ok(format!("{trimmed}/v1"))
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
