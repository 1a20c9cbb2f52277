//! Putting the pieces together for one invocation: the store, the provider, the tools and the
//! agent, from the effective settings.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use keel_core::{Agent, EventSink, Provider, Store};
use keel_providers::{Endpoint, connect};
use keel_store::SqliteStore;
use keel_tools::{Workspace, file_tools};

use crate::cli::AgentArgs;
use crate::config::{self, ConfigError, Settings};

/// Opens the SQLite store at `$KEEL_HOME/keel.db`.
pub async fn open_store(home: &Path) -> anyhow::Result<Arc<dyn Store>> {
    let store = SqliteStore::open(&home.join("keel.db")).await?;
    Ok(Arc::new(store))
}

/// Reads `keel.toml`, the environment and the flags into the effective settings.
pub fn load_settings(
    config_file: Option<&Path>,
    home: &Path,
    flags: &AgentArgs,
) -> Result<Settings, ConfigError> {
    let file = config::load_file(config_file, home)?;
    config::resolve(file, &|key| std::env::var(key).ok(), flags)
}

/// The model provider the settings name.
pub fn provider(settings: &Settings) -> Result<Arc<dyn Provider>, ConfigError> {
    let choice = &settings.provider;
    let endpoint = Endpoint {
        name: choice.name.clone(),
        api: choice.api,
        base_url: choice.base_url.clone(),
        api_key: choice.api_key.clone(),
        prompt_caching: choice.prompt_caching,
    };
    connect(&endpoint)
        .map_err(|e| ConfigError(format!("cannot set up provider `{}`: {e}", choice.name)))
}

/// An agent with the file tools on the settings' workspace.
pub fn agent(
    settings: &Settings,
    store: Arc<dyn Store>,
    sinks: Vec<Arc<dyn EventSink>>,
) -> anyhow::Result<Agent> {
    let workspace = Workspace::new(&settings.workspace).map_err(|e| {
        ConfigError(format!(
            "invalid workspace {}: {e}",
            settings.workspace.display()
        ))
    })?;
    let mut builder = Agent::builder()
        .provider(provider(settings)?)
        .model(settings.model.clone())
        .store(store)
        .system_prompt(settings.system_prompt.clone())
        .stream(settings.stream)
        .tools(file_tools(Arc::new(workspace)));
    if let Some(n) = settings.max_iterations {
        builder = builder.max_iterations(n);
    }
    if let Some(n) = settings.tool_result_max_chars {
        builder = builder.tool_result_max_chars(n);
    }
    if let Some(n) = settings.max_tokens {
        builder = builder.max_tokens(n);
    }
    for sink in sinks {
        builder = builder.event_sink(sink);
    }
    builder.build().context("cannot build the agent")
}
