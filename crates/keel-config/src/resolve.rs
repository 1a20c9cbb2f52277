//! Turning the configuration file, the environment and the flags into the effective settings
//! of one invocation — each later source wins — including which provider, which API, which
//! key, and the fallback chain.

use std::path::PathBuf;
use std::time::Duration;

use keel_core::budget::{Budgets, PriceTable};
use keel_core::context::ContextSettings;
use keel_core::loop_guard::GuardConfig;
use keel_core::reconcile::ReconcilePolicy;
use keel_core::recovery::RetryPolicy;
use keel_core::run_settings::{default_approval_timeout, default_tool_retry_delays};
use keel_providers::Api;

use crate::config::{BUILTIN_PROVIDERS, ConfigError, FileConfig, ProviderConfig};
use crate::overrides::Overrides;

/// The system prompt used when the configuration sets none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are keel, an agent that completes tasks with tools. \
Use the file tools to inspect and change files in the workspace; paths are relative to it. \
When the task is done, answer briefly with what you did.";

/// How long one model call may take when `call_timeout_secs` is not set: 10 minutes.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// A provider an invocation talks to, fully resolved.
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
    /// The environment variable the key is read from (none for the mock).
    pub api_key_env: Option<String>,
    /// Anthropic prompt caching.
    pub prompt_caching: bool,
    /// The most one model call may take, streamed or not.
    pub call_timeout: Duration,
}

/// A model named in the configuration: a fallback, or the summary model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRef {
    /// Its provider, when not the primary one.
    pub provider: Option<ProviderChoice>,
    /// The model.
    pub model: String,
}

/// The effective settings of one invocation.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The primary provider.
    pub provider: ProviderChoice,
    /// The primary model.
    pub model: String,
    /// Models tried in order when the primary fails for good.
    pub fallbacks: Vec<ModelRef>,
    /// System prompt.
    pub system_prompt: String,
    /// Cap on model calls per turn.
    pub max_iterations: Option<u32>,
    /// The highest `request_more_iterations` may raise it to.
    pub iteration_cap: Option<u32>,
    /// Cap on the characters of one tool result.
    pub tool_result_max_chars: Option<usize>,
    /// Cap on output tokens per model call.
    pub max_tokens: Option<u32>,
    /// Continuations of an answer cut at max_tokens.
    pub max_tokens_recoveries: Option<u32>,
    /// Stream answers.
    pub stream: bool,
    /// Directory the file tools are confined to.
    pub workspace: PathBuf,
    /// Retries of failed model calls.
    pub retry: RetryPolicy,
    /// Loop guard thresholds.
    pub guard: GuardConfig,
    /// Per-run limits.
    pub budgets: Budgets,
    /// Model prices.
    pub prices: PriceTable,
    /// Soft time limit.
    pub soft_timeout: Option<Duration>,
    /// Hard time limit.
    pub hard_timeout: Option<Duration>,
    /// Waits before each retry of a transient tool failure.
    pub tool_retry_delays: Vec<Duration>,
    /// How long a call waits for approval where a person could answer before it is denied.
    pub approval_timeout: Duration,
    /// The user the run is for.
    pub user: Option<String>,
    /// Hosts `http_get` may fetch from; empty: any.
    pub http_allowed_hosts: Vec<String>,
    /// Whether `http_get` may fetch non-public addresses.
    pub http_allow_private: bool,
    /// The `shell` tool.
    pub shell: crate::shell_settings::ShellSettings,
    /// How the context is kept under the window.
    pub context: ContextSettings,
    /// The model that writes compaction summaries, when not the run's own.
    pub summary: Option<ModelRef>,
    /// Between a running loop's heartbeats.
    pub heartbeat: Duration,
    /// When a run counts as abandoned.
    pub reconcile: ReconcilePolicy,
    /// Tool hooks, in order.
    pub hooks: Vec<crate::hooks_settings::HookSettings>,
    /// The MCP servers whose tools the agent offers.
    pub mcp_servers: Vec<keel_mcp::McpServerConfig>,
    /// Skills in the system prompt.
    pub skills: crate::skills_routing::SkillsSettings,
    /// A model per tier of message; `None` when none is configured or `--model` names one.
    pub routing: Option<keel_extensions::routing::RoutingPolicy>,
    /// How runs may delegate to sub-agents; no `delegate_task` when `None`.
    pub delegation: Option<keel_extensions::delegation::DelegationPolicy>,
    /// The `memory` tool's notes, and known facts.
    pub memory: crate::memory_settings::MemorySettings,
}

/// Combines file, environment and flags into the effective settings.
pub fn resolve(
    file: FileConfig,
    env: &dyn Fn(&str) -> Option<String>,
    flags: &Overrides,
) -> Result<Settings, ConfigError> {
    let model_flag = flags.model.clone().or_else(|| env("KEEL_MODEL"));
    let provider_named = flags.provider.clone().or_else(|| env("KEEL_PROVIDER"));
    let name = provider_named
        .clone()
        .or_else(|| file.provider.clone())
        .or_else(|| provider_serving(&file, model_flag.as_deref()))
        .unwrap_or_else(|| "openai".to_string());
    let defined = definition(&file, &name)?;
    let top_level_url = match file.provider.as_deref() {
        // A top-level base_url belongs to the top-level provider.
        Some(top) if top == name => file.base_url.clone(),
        None if provider_named.is_none() => file.base_url.clone(),
        _ => None,
    };
    let provider = choose_provider(&name, &defined, top_level_url, env, flags)?;
    let model = model_flag
        .or(file.model.clone())
        .or_else(|| defined.models.first().cloned())
        .unwrap_or_else(|| default_model(&name, provider.api).to_string());
    if flags.max_iterations == Some(0) {
        return Err(ConfigError("max_iterations must be at least 1".into()));
    }
    let fallbacks = flags
        .fallback_models
        .iter()
        .chain(&file.models.fallback)
        .map(|spec| model_ref(spec, &name, &file, env))
        .collect::<Result<Vec<_>, _>>()?;
    let summary = file
        .models
        .summary
        .as_deref()
        .map(|spec| model_ref(spec, &name, &file, env))
        .transpose()?;
    if flags.context_window.is_some_and(|w| w < 256) {
        return Err(ConfigError(
            "--context-window must be at least 256 tokens".into(),
        ));
    }
    let mut prices = PriceTable::default();
    for (model, price) in &file.prices {
        prices.set(model.clone(), *price);
    }
    let defaults = Budgets::default();
    let budgets = Budgets {
        token_budget: flags.token_budget.or(file.budgets.token_budget),
        // `inf` is no limit at all, not a limit that is always close.
        cost_limit: (flags.cost_limit.or(file.budgets.cost_limit)).filter(|c| *c != f64::INFINITY),
        reserve_tokens: file
            .budgets
            .reserve_tokens
            .unwrap_or(defaults.reserve_tokens),
        reserve_cost_fraction: file
            .budgets
            .reserve_cost_fraction
            .unwrap_or(defaults.reserve_cost_fraction),
    };
    if budgets.cost_limit.is_some_and(|c| c.is_nan() || c <= 0.0) {
        return Err(ConfigError(
            "--cost-limit must be a number of dollars more than 0 (or inf for no limit)".into(),
        ));
    }
    Ok(Settings {
        provider,
        model,
        fallbacks,
        system_prompt: file
            .system_prompt
            .clone()
            .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_string()),
        max_iterations: flags.max_iterations.or(file.max_iterations),
        iteration_cap: file.guardrails.iteration_cap,
        tool_result_max_chars: file.tool_result_max_chars,
        max_tokens: file.max_tokens,
        max_tokens_recoveries: file.guardrails.max_tokens_recoveries,
        stream: !flags.no_stream && file.stream.unwrap_or(true),
        workspace: flags
            .workspace
            .clone()
            .or(file.workspace.clone())
            .unwrap_or_else(|| PathBuf::from(".")),
        retry: retry_policy(&file),
        guard: guard_config(&file),
        budgets,
        prices,
        soft_timeout: seconds(
            flags.soft_timeout.or(file.limits.soft_timeout_secs),
            "--soft-timeout",
        )?,
        hard_timeout: seconds(
            flags.hard_timeout.or(file.limits.hard_timeout_secs),
            "--hard-timeout",
        )?,
        tool_retry_delays: file
            .tools
            .retry_delays_ms
            .as_ref()
            .map(|ms| ms.iter().copied().map(Duration::from_millis).collect())
            .unwrap_or_else(default_tool_retry_delays),
        approval_timeout: seconds(
            file.tools.approval_timeout_secs,
            "[tools] approval_timeout_secs",
        )?
        .unwrap_or_else(default_approval_timeout),
        user: flags.user.clone(),
        http_allowed_hosts: file.tools.http_allowed_hosts.clone().unwrap_or_default(),
        http_allow_private: file.tools.http_allow_private.unwrap_or(false),
        shell: file.tools.shell.settings().map_err(ConfigError)?,
        context: context_settings(&file, flags.context_window),
        summary,
        heartbeat: Duration::from_secs_f64(file.runs.heartbeat_secs.unwrap_or(5.0)),
        reconcile: reconcile_policy(&file),
        hooks: crate::hooks_settings::resolve(&file.hooks).map_err(ConfigError)?,
        mcp_servers: file.mcp.servers().map_err(ConfigError)?,
        skills: file.skills.settings().map_err(ConfigError)?,
        routing: match &flags.model {
            Some(_) => None,
            None => file.routing.policy().map_err(ConfigError)?,
        },
        delegation: file.delegation.policy().map_err(ConfigError)?,
        memory: memory_settings(&file, &name, env)?,
    })
}

/// The configuration of `name`: its `[providers.NAME]` table, or empty for a built-in.
fn definition(file: &FileConfig, name: &str) -> Result<ProviderConfig, ConfigError> {
    match file.providers.get(name) {
        Some(defined) => Ok(defined.clone()),
        None if BUILTIN_PROVIDERS.contains(&name) => Ok(ProviderConfig::default()),
        None => {
            let mut known: Vec<&str> = BUILTIN_PROVIDERS.to_vec();
            known.extend(file.providers.keys().map(String::as_str));
            Err(ConfigError(format!(
                "unknown provider `{name}`: use one of {} or define [providers.{name}] in keel.toml",
                known.join(", ")
            )))
        }
    }
}

/// Reads a model reference: `provider:model` when the prefix names a provider, else a model of
/// the primary provider (model names may contain `:`, e.g. `llama3.1:8b`).
fn model_ref(
    spec: &str,
    primary: &str,
    file: &FileConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ModelRef, ConfigError> {
    let spec = spec.trim();
    if let Some((provider, model)) = spec.split_once(':')
        && (BUILTIN_PROVIDERS.contains(&provider) || file.providers.contains_key(provider))
    {
        if model.trim().is_empty() {
            return Err(ConfigError(format!("model `{spec}` names no model")));
        }
        if provider == primary {
            return Ok(ModelRef {
                provider: None,
                model: model.to_string(),
            });
        }
        let defined = definition(file, provider)?;
        let no_flags = Overrides::default();
        let choice = choose_provider(provider, &defined, None, env, &no_flags)
            .map_err(|e| ConfigError(format!("model `{spec}`: {e}")))?;
        return Ok(ModelRef {
            provider: Some(choice),
            model: model.to_string(),
        });
    }
    if spec.is_empty() {
        return Err(ConfigError("a model name in [models] is empty".into()));
    }
    Ok(ModelRef {
        provider: None,
        model: spec.to_string(),
    })
}

/// `[memory]`, with the providers of `embeddings_fallback` resolved: each must be another
/// provider than the primary, serving the same embeddings model.
fn memory_settings(
    file: &FileConfig,
    primary: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<crate::memory_settings::MemorySettings, ConfigError> {
    let mut memory = file.memory.settings().map_err(ConfigError)?;
    let names = file
        .memory
        .embeddings_fallback
        .as_deref()
        .unwrap_or_default();
    if names.is_empty() {
        return Ok(memory);
    }
    let Some(model) = memory.embeddings_model.clone() else {
        return Err(ConfigError(
            "[memory] embeddings_fallback needs embeddings_model: the fallbacks serve that model"
                .into(),
        ));
    };
    for name in names {
        let name = name.trim();
        let reference = model_ref(&format!("{name}:{model}"), primary, file, env)
            .map_err(|e| ConfigError(format!("[memory] embeddings_fallback: {e}")))?;
        match reference.provider {
            Some(choice) if reference.model == model => memory.embeddings_fallbacks.push(choice),
            _ if name == primary => {
                return Err(ConfigError(format!(
                    "[memory] embeddings_fallback: `{name}` is the primary provider; name \
                     another provider serving `{model}`"
                )));
            }
            _ => {
                return Err(ConfigError(format!(
                    "[memory] embeddings_fallback: `{name}` is not a provider (a built-in one or \
                     a [providers.{name}] table)"
                )));
            }
        }
    }
    Ok(memory)
}

/// The reconciler's policy: `[runs]` over the defaults.
pub fn reconcile_policy(file: &FileConfig) -> ReconcilePolicy {
    let defaults = ReconcilePolicy::default();
    ReconcilePolicy {
        stale_after: file
            .runs
            .stale_after_secs
            .map_or(defaults.stale_after, Duration::from_secs_f64),
        cancel_timeout: file
            .runs
            .cancel_timeout_secs
            .map_or(defaults.cancel_timeout, Duration::from_secs_f64),
    }
}

fn context_settings(file: &FileConfig, window: Option<u32>) -> ContextSettings {
    let defaults = ContextSettings::default();
    let c = &file.context;
    let mut windows = defaults.windows.clone();
    for (model, tokens) in &c.windows {
        windows.set(model.clone(), *tokens);
    }
    ContextSettings {
        strategy: c.strategy.unwrap_or(defaults.strategy),
        window,
        windows,
        compact_threshold: c.compact_threshold.unwrap_or(defaults.compact_threshold),
        keep_last: c.keep_last.unwrap_or(defaults.keep_last),
        deep_keep: c.deep_keep.unwrap_or(defaults.deep_keep),
        max_recoveries: c.max_recoveries.unwrap_or(defaults.max_recoveries),
        summary_max_tokens: c.summary_max_tokens.unwrap_or(defaults.summary_max_tokens),
        ..defaults
    }
}

fn retry_policy(file: &FileConfig) -> RetryPolicy {
    let defaults = RetryPolicy::default();
    let ms = Duration::from_millis;
    RetryPolicy {
        max_retries: file.retry.max_retries.unwrap_or(defaults.max_retries),
        base_delay: file.retry.base_delay_ms.map_or(defaults.base_delay, ms),
        max_delay: file.retry.max_delay_ms.map_or(defaults.max_delay, ms),
        retry_after_cap: file
            .retry
            .retry_after_cap_ms
            .map_or(defaults.retry_after_cap, ms),
    }
}

fn guard_config(file: &FileConfig) -> GuardConfig {
    let defaults = GuardConfig::default();
    let g = &file.guardrails;
    GuardConfig {
        window: g.window.unwrap_or(defaults.window),
        identical_calls: g.identical_calls.unwrap_or(defaults.identical_calls),
        pattern_calls: g.pattern_calls.unwrap_or(defaults.pattern_calls),
        repeated_batches: g.repeated_batches.unwrap_or(defaults.repeated_batches),
        repeated_texts: g.repeated_texts.unwrap_or(defaults.repeated_texts),
    }
}

fn seconds(value: Option<f64>, what: &str) -> Result<Option<Duration>, ConfigError> {
    value
        .map(|secs| {
            Duration::try_from_secs_f64(secs)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| ConfigError(format!("{what} must be a number of seconds above 0")))
        })
        .transpose()
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
    flags: &Overrides,
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
        api_key_env: (!is_mock).then_some(key_env),
        prompt_caching: defined.prompt_caching.unwrap_or(true),
        call_timeout: match defined.call_timeout_secs {
            Some(0) => {
                return Err(ConfigError(format!(
                    "[providers.{name}] call_timeout_secs must be at least 1"
                )));
            }
            Some(secs) => Duration::from_secs(secs),
            None => DEFAULT_CALL_TIMEOUT,
        },
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
#[path = "resolve_tests.rs"]
mod tests;
