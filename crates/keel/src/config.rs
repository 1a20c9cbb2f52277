//! Configuration: `keel.toml` (in `$KEEL_HOME`, or `--config FILE`), then the environment, then
//! flags — each later source wins. Every problem is one line that says what to fix.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::cli::AgentArgs;

/// The system prompt used when the configuration sets none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are keel, an agent that completes tasks with tools. \
Use the file tools to inspect and change files in the workspace; paths are relative to it. \
When the task is done, answer briefly with what you did.";

/// A configuration problem: the user must fix something before keel can run (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The model providers `keel run` can talk to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI or any OpenAI-compatible server (Ollama, vLLM, llama.cpp's server).
    OpenAi,
    /// A `keel mock-provider` (speaks the OpenAI chat-completions wire format).
    Mock,
}

impl ProviderKind {
    fn parse(name: &str) -> Result<Self, ConfigError> {
        match name {
            "openai" => Ok(ProviderKind::OpenAi),
            "mock" => Ok(ProviderKind::Mock),
            other => Err(ConfigError(format!(
                "unknown provider `{other}`: use `openai` or `mock`"
            ))),
        }
    }

    /// The provider's name in records and events.
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Mock => "mock",
        }
    }

    fn default_model(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "gpt-4o-mini",
            ProviderKind::Mock => "mock-model",
        }
    }
}

/// What `keel.toml` may contain. Unknown keys are an error, so typos do not pass silently.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `openai` or `mock`.
    pub provider: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Base URL of the provider's API.
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
}

/// The effective settings of one invocation.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Which provider.
    pub provider: ProviderKind,
    /// Model name.
    pub model: String,
    /// Base URL, when not the provider's default.
    pub base_url: Option<String>,
    /// API key, when one is set.
    pub api_key: Option<String>,
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
    let provider_name = flags
        .provider
        .clone()
        .or_else(|| env("KEEL_PROVIDER"))
        .or(file.provider)
        .unwrap_or_else(|| "openai".to_string());
    let provider = ProviderKind::parse(&provider_name)?;
    let model = flags
        .model
        .clone()
        .or_else(|| env("KEEL_MODEL"))
        .or(file.model)
        .unwrap_or_else(|| provider.default_model().to_string());
    let env_base_url = match provider {
        ProviderKind::OpenAi => env("OPENAI_BASE_URL"),
        ProviderKind::Mock => None,
    };
    let base_url = flags
        .base_url
        .clone()
        .or(env_base_url)
        .or(file.base_url)
        .map(|url| normalize_base_url(&url))
        .transpose()?;
    let api_key = match provider {
        ProviderKind::OpenAi => env("OPENAI_API_KEY").filter(|k| !k.trim().is_empty()),
        ProviderKind::Mock => None,
    };
    match provider {
        ProviderKind::OpenAi if api_key.is_none() && base_url.is_none() => {
            return Err(ConfigError(
                "OPENAI_API_KEY is not set: export OPENAI_API_KEY=<your key>, or point --base-url \
                 (or OPENAI_BASE_URL) at an OpenAI-compatible server that needs no key"
                    .into(),
            ));
        }
        ProviderKind::Mock if base_url.is_none() => {
            return Err(ConfigError(
                "--provider mock needs --base-url: start a mock with `keel mock-provider --script \
                 FILE` and pass the address it prints"
                    .into(),
            ));
        }
        _ => {}
    }
    if flags.max_iterations == Some(0) || file.max_iterations == Some(0) {
        return Err(ConfigError("max_iterations must be at least 1".into()));
    }
    if file.tool_result_max_chars == Some(0) {
        return Err(ConfigError(
            "tool_result_max_chars must be at least 1".into(),
        ));
    }
    let workspace = flags
        .workspace
        .clone()
        .or(file.workspace)
        .unwrap_or_else(|| PathBuf::from("."));
    Ok(Settings {
        provider,
        model,
        base_url,
        api_key,
        system_prompt: file
            .system_prompt
            .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_string()),
        max_iterations: flags.max_iterations.or(file.max_iterations),
        tool_result_max_chars: file.tool_result_max_chars,
        max_tokens: file.max_tokens,
        stream: !flags.no_stream && file.stream.unwrap_or(true),
        workspace,
    })
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
mod tests {
    use super::*;

    fn flags() -> AgentArgs {
        AgentArgs {
            provider: None,
            model: None,
            base_url: None,
            max_iterations: None,
            workspace: None,
            no_stream: false,
            events: None,
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_missing_key_names_the_variable() {
        let err = resolve(FileConfig::default(), &no_env, &flags()).unwrap_err();
        assert!(err.0.contains("OPENAI_API_KEY is not set"), "{err}");
    }

    #[test]
    fn flags_beat_environment_beat_file() {
        let file =
            parse_file("model = \"from-file\"\nmax_iterations = 7\nbase_url = \"http://f:1/v1\"")
                .unwrap();
        let env = |k: &str| (k == "KEEL_MODEL").then(|| "from-env".to_string());
        let settings = resolve(file, &env, &flags()).unwrap();
        assert_eq!(settings.model, "from-env");
        assert_eq!(settings.max_iterations, Some(7));
        let mut f = flags();
        f.model = Some("from-flag".into());
        let file = parse_file("model = \"from-file\"\nbase_url = \"http://f:1/v1\"").unwrap();
        assert_eq!(resolve(file, &env, &f).unwrap().model, "from-flag");
    }

    #[test]
    fn invalid_files_give_one_line_with_the_line_number() {
        let err = parse_file("model = \"x\"\nmodle = \"y\"\n").unwrap_err();
        assert!(err.starts_with("line 2:") && err.contains("modle"), "{err}");
        assert!(!err.contains('\n'));
        let err = parse_file("max_iterations = \"ten\"").unwrap_err();
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn bare_host_urls_get_v1_and_bad_urls_are_refused() {
        assert_eq!(
            normalize_base_url("http://127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080/v1"
        );
        assert_eq!(
            normalize_base_url("http://h/api/v1/").unwrap(),
            "http://h/api/v1"
        );
        assert!(normalize_base_url("localhost:8080").is_err());
    }

    #[test]
    fn mock_needs_a_base_url_and_unknown_providers_are_named() {
        let mut f = flags();
        f.provider = Some("mock".into());
        assert!(
            resolve(FileConfig::default(), &no_env, &f)
                .unwrap_err()
                .0
                .contains("--base-url")
        );
        f.provider = Some("gemini".into());
        assert!(
            resolve(FileConfig::default(), &no_env, &f)
                .unwrap_err()
                .0
                .contains("`gemini`")
        );
    }
}
