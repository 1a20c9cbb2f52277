//! The configuration file: `keel.toml` (in `$KEEL_HOME`, or `--config FILE`), its format, and
//! loading it — with the last known good copy (`keel.toml.lastgood`, saved after every
//! successful model call) standing in when the file is broken. Every problem is one line that
//! says what to fix.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use keel_core::budget::Price;
use keel_core::context::Strategy;
use keel_core::{Event, EventKind, EventSink};
use keel_providers::Api;
use serde::Deserialize;

/// The providers keel knows without configuration.
pub const BUILTIN_PROVIDERS: [&str; 4] = ["openai", "openai-responses", "anthropic", "mock"];

/// A configuration problem: the user must fix something before keel can run (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// What `keel.toml` may contain. Unknown keys are an error, so typos do not pass silently.
#[derive(Clone, Debug, Default, Deserialize)]
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
    /// `[models]`: the fallback chain.
    #[serde(default)]
    pub models: ModelsConfig,
    /// `[retry]`: retries of failed model calls.
    #[serde(default)]
    pub retry: RetryConfig,
    /// `[guardrails]`: loop guard and iteration thresholds.
    #[serde(default)]
    pub guardrails: GuardrailsConfig,
    /// `[budgets]`: per-run token and cost limits.
    #[serde(default)]
    pub budgets: BudgetsConfig,
    /// `[prices.MODEL]`: USD per million tokens, added to the built-in table.
    #[serde(default)]
    pub prices: BTreeMap<String, Price>,
    /// `[limits]`: time limits.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// `[tools]`: tool settings.
    #[serde(default)]
    pub tools: ToolsConfig,
    /// `[context]`: how the context is kept under the window.
    #[serde(default)]
    pub context: ContextConfig,
    /// `[runs]`: heartbeats and the reconciler.
    #[serde(default)]
    pub runs: RunsConfig,
    /// `[serve]`: the daemon.
    #[serde(default)]
    pub serve: crate::serve_settings::ServeConfig,
    /// `[schedules]`: whether and how `keel serve` fires schedules.
    #[serde(default)]
    pub schedules: crate::schedules_settings::SchedulesConfig,
    /// `[telemetry]`: OTLP traces and the daemon's metrics.
    #[serde(default)]
    pub telemetry: crate::telemetry_settings::TelemetryConfig,
    /// `[store]`: a PostgreSQL database instead of the SQLite file.
    #[serde(default)]
    pub store: crate::store_settings::StoreConfig,
    /// `[[hooks]]`: commands that see tool calls, in order.
    #[serde(default)]
    pub hooks: Vec<crate::hooks_settings::HookConfig>,
    /// `[mcp.servers.NAME]`: MCP servers whose tools the agent offers.
    #[serde(default)]
    pub mcp: crate::mcp_settings::McpConfig,
    /// `[skills]`: skills in the system prompt.
    #[serde(default)]
    pub skills: crate::skills_routing::SkillsConfig,
    /// `[routing]`: a model per tier of message.
    #[serde(default)]
    pub routing: crate::skills_routing::RoutingConfig,
    /// `[delegation]`: sub-agents (`delegate_task`).
    #[serde(default)]
    pub delegation: crate::delegation_settings::DelegationConfig,
    /// `[memory]`: the `memory` tool's notes, and known facts.
    #[serde(default)]
    pub memory: crate::memory_settings::MemoryConfig,
    /// `[channels.NAME]`: Telegram, Slack, Discord, email; read by keel-channels when
    /// `keel serve` starts.
    #[serde(default)]
    pub channels: toml::Table,
    /// `[[webhooks]]`: signed inbound webhooks; read by keel-channels.
    #[serde(default)]
    pub webhooks: Vec<toml::Value>,
}

/// `[runs]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsConfig {
    /// Seconds between a running loop's heartbeats (5).
    pub heartbeat_secs: Option<f64>,
    /// Seconds without a heartbeat after which a run's worker counts as dead (60).
    pub stale_after_secs: Option<f64>,
    /// Seconds a paused run's cancel request waits before the reconciler cancels it (180).
    pub cancel_timeout_secs: Option<f64>,
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
    /// The most one model call may take, streamed or not (default 600).
    pub call_timeout_secs: Option<u64>,
}

/// `[models]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsConfig {
    /// Models tried in order when the primary fails for good: `provider:model` or a model of
    /// the primary provider.
    #[serde(default)]
    pub fallback: Vec<String>,
    /// The model that writes compaction summaries: `provider:model` or a model of the primary
    /// provider (default: the run's model).
    pub summary: Option<String>,
}

/// `[retry]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// Retries per model for transient failures (default 2).
    pub max_retries: Option<u32>,
    /// First backoff in milliseconds, doubled each retry (default 1000).
    pub base_delay_ms: Option<u64>,
    /// Longest backoff in milliseconds (default 30000).
    pub max_delay_ms: Option<u64>,
    /// Longest Retry-After wait honoured, in milliseconds (default 60000).
    pub retry_after_cap_ms: Option<u64>,
}

/// `[guardrails]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardrailsConfig {
    /// Recent calls the thrash detectors look at (default 6).
    pub window: Option<usize>,
    /// Identical calls in the window that count as thrash (default 3).
    pub identical_calls: Option<usize>,
    /// Same-tool calls learning nothing that count as thrash (default 4).
    pub pattern_calls: Option<usize>,
    /// Identical consecutive batches that count as thrash (default 3).
    pub repeated_batches: Option<usize>,
    /// Identical consecutive answers that count as thrash (default 3).
    pub repeated_texts: Option<usize>,
    /// Continuations of an answer cut at max_tokens (default 2).
    pub max_tokens_recoveries: Option<u32>,
    /// The highest `request_more_iterations` may raise the limit to (default 50).
    pub iteration_cap: Option<u32>,
}

/// `[budgets]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetsConfig {
    /// Most tokens per run.
    pub token_budget: Option<u64>,
    /// Most dollars per run.
    pub cost_limit: Option<f64>,
    /// Warn when fewer tokens than this remain (default 512).
    pub reserve_tokens: Option<u64>,
    /// Warn when less than this fraction of the cost limit remains (default 0.1).
    pub reserve_cost_fraction: Option<f64>,
}

/// `[limits]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Seconds until the last "summarize what you did" turn.
    pub soft_timeout_secs: Option<f64>,
    /// Seconds until the run stops as timed_out.
    pub hard_timeout_secs: Option<f64>,
}

/// `[tools]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// Waits before each retry of a transient failure of an idempotent tool, in milliseconds
    /// (default [500, 2000, 8000]).
    pub retry_delays_ms: Option<Vec<u64>>,
    /// Seconds a tool call waits for a person's approval in a long-lived process (a chat, the
    /// daemon) before it is denied (default 600).
    pub approval_timeout_secs: Option<f64>,
    /// Hosts `http_get` may fetch from (and their subdomains); empty or absent: any host.
    pub http_allowed_hosts: Option<Vec<String>>,
    /// Whether `http_get` may fetch loopback, private, link-local and other non-public
    /// addresses (default false: refused).
    pub http_allow_private: Option<bool>,
    /// `[tools.shell]`: the `shell` tool and its command policy.
    #[serde(default)]
    pub shell: crate::shell_settings::ShellToolConfig,
}

/// `[context]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextConfig {
    /// `compact` (default) or `sliding_window`.
    pub strategy: Option<Strategy>,
    /// The fraction of the window at which recovery starts (0.70).
    pub compact_threshold: Option<f64>,
    /// Messages compaction keeps verbatim (10).
    pub keep_last: Option<usize>,
    /// Messages a deep prune keeps verbatim (4).
    pub deep_keep: Option<usize>,
    /// Recoveries allowed in one turn (4).
    pub max_recoveries: Option<u32>,
    /// Output tokens a summary may use (1024).
    pub summary_max_tokens: Option<u32>,
    /// `[context.windows]`: context windows by model, added to the built-in table.
    #[serde(default)]
    pub windows: BTreeMap<String, u32>,
}

impl FileConfig {
    /// Checks what the file alone can get wrong: unknown APIs, impossible limits, bad prices.
    pub fn validate(&self) -> Result<(), String> {
        for (name, provider) in &self.providers {
            if let Some(api) = &provider.api
                && Api::parse(api).is_none()
            {
                return Err(format!(
                    "[providers.{name}] api = \"{api}\": use openai-chat, openai-responses or \
                     anthropic-messages"
                ));
            }
        }
        self.serve.validate()?;
        self.schedules.validate()?;
        self.telemetry.validate()?;
        self.store.validate()?;
        crate::hooks_settings::resolve(&self.hooks)?;
        self.tools.shell.validate()?;
        self.memory.settings()?;
        self.mcp.servers()?;
        self.skills.settings()?;
        self.routing.policy()?;
        self.delegation.policy()?;
        if self.max_iterations == Some(0) {
            return Err("max_iterations must be at least 1".into());
        }
        if self.tool_result_max_chars == Some(0) {
            return Err("tool_result_max_chars must be at least 1".into());
        }
        for (model, price) in &self.prices {
            if !(price.input >= 0.0 && price.output >= 0.0) {
                return Err(format!("[prices.\"{model}\"]: prices must be zero or more"));
            }
        }
        let budgets = &self.budgets;
        if budgets.cost_limit.is_some_and(|c| c.is_nan() || c <= 0.0) {
            return Err("[budgets] cost_limit must be more than 0".into());
        }
        if budgets
            .reserve_cost_fraction
            .is_some_and(|f| !(0.0..=1.0).contains(&f))
        {
            return Err("[budgets] reserve_cost_fraction must be between 0 and 1".into());
        }
        let context = &self.context;
        if context
            .compact_threshold
            .is_some_and(|t| t.is_nan() || t <= 0.0 || t > 1.0)
        {
            return Err("[context] compact_threshold must be above 0 and at most 1".into());
        }
        if context.keep_last == Some(0) || context.deep_keep == Some(0) {
            return Err("[context] keep_last and deep_keep must be at least 1".into());
        }
        if let Some((model, _)) = context.windows.iter().find(|(_, w)| **w < 256) {
            return Err(format!(
                "[context.windows] \"{model}\": a window must be at least 256 tokens"
            ));
        }
        for (key, secs) in [
            ("soft_timeout_secs", self.limits.soft_timeout_secs),
            ("hard_timeout_secs", self.limits.hard_timeout_secs),
            ("heartbeat_secs", self.runs.heartbeat_secs),
            ("stale_after_secs", self.runs.stale_after_secs),
            ("cancel_timeout_secs", self.runs.cancel_timeout_secs),
        ] {
            if secs.is_some_and(|s| s.is_nan() || s <= 0.0) {
                return Err(format!("{key} must be more than 0"));
            }
        }
        Ok(())
    }
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

/// A configuration file as loaded.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    /// What it says.
    pub file: FileConfig,
    /// The file it came from and its text, when it is the real file (not the last good copy)
    /// and exists: what is saved as the last good configuration after a successful call.
    pub source: Option<(PathBuf, String)>,
    /// Set when the file was broken and the last good copy stood in.
    pub fallback: Option<FallbackNotice>,
}

/// The file was broken; its last good copy was used.
#[derive(Clone, Debug)]
pub struct FallbackNotice {
    /// The broken file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub error: String,
    /// The copy used instead.
    pub used: PathBuf,
}

impl FallbackNotice {
    /// The line shown to the user.
    pub fn warning(&self) -> String {
        format!(
            "keel: warning: {}; using the last good configuration {}",
            self.error,
            self.used.display()
        )
    }

    /// The event recorded for it.
    pub fn event(&self, session_id: &str) -> Event {
        Event {
            ts: chrono::Utc::now(),
            run_id: String::new(),
            session_id: session_id.to_string(),
            kind: EventKind::ConfigFallback {
                path: self.path.display().to_string(),
                error: self.error.clone(),
                used: self.used.display().to_string(),
            },
        }
    }
}

/// Where the last good copy of `path` is kept.
pub fn lastgood_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".lastgood");
    PathBuf::from(name)
}

/// Set by `--strict-config`: a broken configuration file is an error, never replaced by its
/// last good copy. Process-wide, as the flag is global to every subcommand.
static STRICT: AtomicBool = AtomicBool::new(false);

/// Makes every later [`load`] refuse a broken file instead of falling back (`--strict-config`).
pub fn set_strict() {
    STRICT.store(true, Ordering::Relaxed);
}

/// Reads the configuration file: `explicit` must exist; the default `$KEEL_HOME/keel.toml`
/// may be absent. A file that fails to parse or validate is replaced by its last good copy
/// when there is one — unless `--strict-config` is set, or the copy could let a run do more
/// than the file asks for (see [`crate::guarded_settings`]): a fallback must never loosen.
pub fn load(explicit: Option<&Path>, home: &Path) -> Result<Loaded, ConfigError> {
    let (path, required) = match explicit {
        Some(path) => (path.to_path_buf(), true),
        None => (home.join("keel.toml"), false),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
            return Ok(Loaded::default());
        }
        Err(e) => {
            return Err(ConfigError(format!(
                "cannot read config file {}: {e}",
                path.display()
            )));
        }
    };
    let error = match parse_valid(&text) {
        Ok(file) => {
            return Ok(Loaded {
                file,
                source: Some((path, text)),
                fallback: None,
            });
        }
        Err(message) => format!("invalid config file {}: {message}", path.display()),
    };
    if STRICT.load(Ordering::Relaxed) {
        return Err(ConfigError(format!(
            "{error} (--strict-config: no fallback to the last good copy)"
        )));
    }
    let used = lastgood_path(&path);
    let Some((file, good_text)) = std::fs::read_to_string(&used)
        .ok()
        .and_then(|text| parse_valid(&text).ok().map(|file| (file, text)))
    else {
        return Err(ConfigError(error));
    };
    if let Some(setting) = crate::guarded_settings::first_difference(&text, &good_text) {
        return Err(ConfigError(format!(
            "{error}; not falling back to the last good configuration {}: it differs from \
             the file in `{setting}`, and a fallback must never loosen what the file asks for \
             (it may differ only in the model, streaming, retries, context and heartbeat \
             settings); fix the file",
            used.display()
        )));
    }
    Ok(Loaded {
        file,
        source: None,
        fallback: Some(FallbackNotice { path, error, used }),
    })
}

fn parse_valid(text: &str) -> Result<FileConfig, String> {
    let file = parse_file(text)?;
    file.validate()?;
    Ok(file)
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

/// Saves the configuration file as its last good copy after the first successful model call
/// of the process (atomically: a temporary file renamed over the copy).
pub struct LastGoodSaver {
    pending: Mutex<Option<(PathBuf, String)>>,
}

impl LastGoodSaver {
    /// A saver for `source` (nothing to do when `None`).
    pub fn new(source: Option<(PathBuf, String)>) -> Self {
        LastGoodSaver {
            pending: Mutex::new(source),
        }
    }
}

impl EventSink for LastGoodSaver {
    fn emit(&self, event: &Event) {
        if !matches!(event.kind, EventKind::ModelResponse { .. }) {
            return;
        }
        let Some((path, text)) = self.pending.lock().ok().and_then(|mut p| p.take()) else {
            return;
        };
        let target = lastgood_path(&path);
        let temporary = target.with_extension("lastgood.tmp");
        // Best effort: failing to save the copy must not fail the run.
        if std::fs::write(&temporary, text).is_ok() {
            let _ = std::fs::rename(&temporary, &target);
        }
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
