//! Putting an agent together from the effective settings: the providers (their errors
//! redacted), the tools (confined to the workspace, never reaching keel's own files), and every
//! policy; its runs record this process as their worker and the settings as their launch spec.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_extensions::AgentBuilderExt;

use keel_core::redact::{RedactingProvider, Redactor};
use keel_core::{Agent, EventSink, HumanChannel, Provider};
use keel_platform::DaemonStore;
use keel_providers::{Endpoint, connect};
use keel_tools::{
    HttpGetConfig, ReadAttachment, SessionSearchTool, Workspace, file_tools, http_tools,
    shell_tools,
};

use crate::config::{self, ConfigError, FallbackNotice};
use crate::launch::LaunchSpec;
use crate::overrides::Overrides;
use crate::resolve::{self, ProviderChoice, Settings};
use crate::worker::ProcProbe;

/// The effective settings and where they came from.
pub struct Configured {
    /// The settings.
    pub settings: Settings,
    /// Saves the file as its last good copy after the first successful model call.
    pub lastgood: Arc<config::LastGoodSaver>,
    /// Set when the file was broken and its last good copy was used.
    pub fallback: Option<FallbackNotice>,
    /// keel's own files, out of the file tools' reach ([`own_files`]).
    pub own_files: Vec<PathBuf>,
}

/// keel's own files, which the file tools must never read or write, whatever path leads there:
/// its home (the database and its `-wal` and `-shm` files), the configuration file in use, its
/// last good copy and that copy's temporary file.
pub fn own_files(config_file: Option<&Path>, home: &Path) -> Vec<PathBuf> {
    let config = config_file.map_or_else(|| home.join("keel.toml"), Path::to_path_buf);
    let lastgood = config::lastgood_path(&config);
    let temporary = lastgood.with_extension("lastgood.tmp");
    vec![home.to_path_buf(), config, lastgood, temporary]
}

/// Reads `keel.toml` (or its last good copy), the environment and the flags.
pub fn load_settings(
    config_file: Option<&Path>,
    home: &Path,
    flags: &Overrides,
) -> Result<Configured, ConfigError> {
    let loaded = config::load(config_file, home)?;
    let unconfined = loaded.file.mcp.unconfined();
    let mut settings = resolve::resolve(loaded.file, &|key| std::env::var(key).ok(), flags)?;
    if settings.skills.enabled {
        settings.skills.roots = keel_tools::skill_roots(home, &settings.workspace);
    }
    settings.memory.dir = Some(home.join("memory"));
    let own_files = own_files(config_file, home);
    // Stdio MCP servers run in the sandbox, the workspace writable (an invalid workspace is
    // refused when the agent is built).
    let workspace = settings
        .workspace
        .canonicalize()
        .unwrap_or_else(|_| settings.workspace.clone());
    settings.mcp_servers = crate::sandbox_settings::confine_mcp(
        std::mem::take(&mut settings.mcp_servers),
        &unconfined,
        &crate::sandbox_settings::for_owner_commands(&own_files, &workspace),
    );
    Ok(Configured {
        settings,
        lastgood: Arc::new(config::LastGoodSaver::new(loaded.source)),
        fallback: loaded.fallback,
        own_files,
    })
}

/// The adapter for one resolved provider, its errors redacted: no key and no password from
/// its base URL reaches the terminal, the events or the store.
pub fn provider(choice: &ProviderChoice) -> Result<Arc<dyn Provider>, ConfigError> {
    let endpoint = Endpoint {
        name: choice.name.clone(),
        api: choice.api,
        base_url: choice.base_url.clone(),
        api_key: choice.api_key.clone(),
        prompt_caching: choice.prompt_caching,
        call_timeout: choice.call_timeout,
    };
    let mut secrets = Redactor::url_secrets(&choice.base_url);
    secrets.extend(choice.api_key.clone());
    // A tool may print them too: its results are cleaned of them.
    keel_core::redact::register_secrets(secrets.clone());
    let redactor = Redactor::new(secrets);
    let adapter = connect(&endpoint).map_err(|e| {
        ConfigError(redactor.redact(&format!("cannot set up provider `{}`: {e}", choice.name)))
    })?;
    Ok(Arc::new(RedactingProvider::new(adapter, redactor)))
}

/// Registers the values of the environment variables keel keeps from its commands (the
/// `shell` tool's rule: `*_API_KEY`, `*_TOKEN`, …, `[tools.shell] secret_env`, every provider's
/// key variable) as secrets, so that no tool result carries one, whatever printed it.
fn register_environment_secrets(settings: &Settings) {
    let secret = crate::shell_settings::tool_config(settings).secrets;
    keel_core::redact::register_secrets(
        std::env::vars_os()
            .filter(|(name, _)| secret.is_secret(name))
            .filter_map(|(_, value)| value.into_string().ok()),
    );
}

/// An agent with the file tools on the settings' workspace (never reaching `own_files`) and
/// every setting applied, and the daemon's own `daemon_tools` (the `schedule` tool, built by
/// the caller with the scheduler's clock). Its runs record this process as their worker and
/// the settings as their launch spec.
pub fn agent(
    settings: &Settings,
    own_files: &[PathBuf],
    store: Arc<dyn DaemonStore>,
    sinks: Vec<Arc<dyn EventSink>>,
    human: Option<Arc<dyn HumanChannel>>,
    daemon_tools: Vec<Arc<dyn keel_core::Tool>>,
) -> Result<Agent, ConfigError> {
    let workspace = Workspace::new(&settings.workspace).map_err(|e| {
        ConfigError(format!(
            "invalid workspace {}: {e}",
            settings.workspace.display()
        ))
    })?;
    // The workspace's `.keel` (its skills) is keel's: a skill written by the model would reach
    // the system prompt of later runs.
    let skills_dir = workspace.root().join(".keel");
    let workspace = Arc::new(
        own_files
            .iter()
            .chain([&skills_dir])
            .fold(workspace, |workspace, path| workspace.protect(path)),
    );
    register_environment_secrets(settings);
    let launch = LaunchSpec::of(settings, workspace.root());
    // Commands run in the sandbox, keel's files out of sight and the skills read-only.
    let hooks = crate::hooks_settings::tool_hooks(
        &settings.hooks,
        workspace.root(),
        &crate::sandbox_settings::for_owner_commands(own_files, workspace.root()),
    );
    let mut builder = Agent::builder()
        .standard_extensions()
        .launch(launch.to_json())
        .worker_probe(Arc::new(ProcProbe::new()))
        .provider(provider(&settings.provider)?)
        .model(settings.model.clone())
        .store(store.clone())
        .system_prompt(settings.system_prompt.clone())
        .stream(settings.stream)
        .tools(crate::test_hooks::PauseInTool::wrap(file_tools(
            workspace.clone(),
        )))
        .tool(Arc::new(ReadAttachment::new(store.clone())))
        .tool(Arc::new(SessionSearchTool::new(store.clone())))
        .tools(daemon_tools)
        .tools(http_tools(HttpGetConfig {
            allowed_hosts: settings.http_allowed_hosts.clone(),
            allow_private: settings.http_allow_private,
            ..HttpGetConfig::default()
        }))
        .retry_policy(settings.retry.clone())
        .guardrails(settings.guard.clone())
        .budgets(settings.budgets.clone())
        .prices(settings.prices.clone())
        .tool_retry_delays(settings.tool_retry_delays.clone())
        .approval_timeout(settings.approval_timeout)
        .context(settings.context.clone())
        .heartbeat_interval(settings.heartbeat)
        .reconcile_policy(settings.reconcile)
        .hooks(hooks);
    // Routing decides the model before the prompt's sections are written (its event first).
    if let Some(policy) = &settings.routing {
        builder = builder.routing(policy.clone());
    }
    // The workspace's AGENTS.md (or its kin) goes into the system prompt.
    builder = builder.prompt_part(Arc::new(keel_tools::ProjectContext::new(workspace.clone())));
    if settings.shell.enabled {
        let mut config = crate::shell_settings::tool_config(settings);
        config.sandbox =
            crate::sandbox_settings::confine(config.sandbox, own_files, workspace.root());
        builder = builder.tools(shell_tools(workspace, config));
    }
    // A skill that cannot be read is left out; `keel skills list` says why. With no skill
    // installed, runs are offered no skill tools.
    let (skills, _problems) = keel_tools::SkillSet::load(&settings.skills.roots);
    if settings.skills.enabled && !skills.all().is_empty() {
        let skills = Arc::new(skills);
        builder = builder
            .tools(keel_tools::skill_tools(skills.clone()))
            .prompt_part(Arc::new(keel_tools::SkillPrompt::new(
                skills,
                settings.skills.max_tokens,
            )));
    }
    if let Some(notes) = settings.memory.backend() {
        builder = builder.memory(notes, settings.memory.limits);
    }
    // Extraction and model scores use the summary model, else the run's.
    let memory_settings = &settings.memory;
    let learning_model =
        if memory_settings.facts && (memory_settings.extract || memory_settings.model_importance) {
            Some(match &settings.summary {
                Some(summary) => (
                    provider(summary.provider.as_ref().unwrap_or(&settings.provider))?,
                    summary.model.clone(),
                ),
                None => (provider(&settings.provider)?, settings.model.clone()),
            })
        } else {
            None
        };
    if let Some(memory) = crate::memory_settings::memory(
        &settings.memory,
        &settings.provider,
        &settings.retry,
        store.clone(),
        learning_model,
    )? {
        // A run is handed to memory after it ends only when there is something to learn.
        let learns = memory_settings.extract
            || memory_settings.model_importance
            || memory_settings.embeddings_model.is_some();
        builder = builder
            .tools(keel_memory::tools::memory_tools(memory.clone()))
            .recall(memory.clone());
        if learns {
            builder = builder.learn(memory);
        }
    }
    if !settings.mcp_servers.is_empty() {
        // Started by the first run, which waits for them (see `keel_mcp::McpServers`).
        let servers = keel_mcp::McpServers::new(settings.mcp_servers.clone())
            .map_err(|e| ConfigError(format!("[mcp] {e}")))?;
        builder = builder.tool_source(Arc::new(servers));
    }
    if let Some(policy) = &settings.delegation {
        builder = builder.delegation(policy.clone());
    }
    if let Some(summary) = &settings.summary {
        builder = match &summary.provider {
            None => builder.summary_model(summary.model.clone()),
            Some(choice) => builder.summary(provider(choice)?, summary.model.clone()),
        };
    }
    for fallback in &settings.fallbacks {
        builder = match &fallback.provider {
            None => builder.fallback_model(fallback.model.clone()),
            Some(choice) => builder.fallback(provider(choice)?, fallback.model.clone()),
        };
    }
    if let Some(n) = settings.max_iterations {
        builder = builder.max_iterations(n);
    }
    if let Some(n) = settings.iteration_cap {
        builder = builder.iteration_cap(n);
    }
    if let Some(n) = settings.tool_result_max_chars {
        builder = builder.tool_result_max_chars(n);
    }
    if let Some(n) = settings.max_tokens {
        builder = builder.max_tokens(n);
    }
    if let Some(n) = settings.max_tokens_recoveries {
        builder = builder.max_tokens_recoveries(n);
    }
    if let Some(limit) = settings.soft_timeout {
        builder = builder.soft_timeout(limit);
    }
    if let Some(limit) = settings.hard_timeout {
        builder = builder.hard_timeout(limit);
    }
    for sink in sinks {
        builder = builder.event_sink(sink);
    }
    if let Some(human) = human {
        builder = builder.human(human);
    }
    builder
        .build()
        .map_err(|e| ConfigError(format!("cannot build the agent: {e}")))
}
