//! Every configured MCP server as one tool source for the agent, and their statuses for
//! `keel mcp list`.

use std::sync::{Arc, Once};

use async_trait::async_trait;
use keel_core::{Tool, ToolSource, ToolSpec};
use tokio_util::sync::CancellationToken;

use crate::config::{McpConfigError, McpServerConfig};
use crate::server::{RestartPolicy, ServerShared, ServerState, supervise};

/// The configured MCP servers. Their supervisors start on the first [`ToolSource::ready`] (or
/// [`McpServers::start`]) and stop, with their child processes, when this is dropped.
pub struct McpServers {
    servers: Vec<Arc<ServerShared>>,
    policy: RestartPolicy,
    started: Once,
    shutdown: CancellationToken,
}

/// One server as `keel mcp list` shows it.
#[derive(Clone, Debug)]
pub struct ServerStatus {
    /// Its name.
    pub name: String,
    /// Where it stands.
    pub state: ServerState,
    /// Its tools as keel offers them.
    pub tools: Vec<ToolSpec>,
}

impl McpServers {
    /// The servers of `configs`, checked, not yet started. Two servers may not share a name.
    pub fn new(configs: Vec<McpServerConfig>) -> Result<McpServers, McpConfigError> {
        let mut names = std::collections::HashSet::new();
        for config in &configs {
            config.validate()?;
            if !names.insert(config.name.clone()) {
                return Err(McpConfigError::Duplicate(config.name.clone()));
            }
        }
        Ok(McpServers {
            servers: configs.into_iter().map(ServerShared::new).collect(),
            policy: RestartPolicy::default(),
            started: Once::new(),
            shutdown: CancellationToken::new(),
        })
    }

    /// Sets the pauses between restarts.
    pub fn with_restart_policy(mut self, policy: RestartPolicy) -> McpServers {
        self.policy = policy;
        self
    }

    /// True when no server is configured.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Starts every server's supervisor, once. Must be called within a tokio runtime.
    pub fn start(&self) {
        self.started.call_once(|| {
            for server in &self.servers {
                tokio::spawn(supervise(
                    server.clone(),
                    self.policy,
                    self.shutdown.child_token(),
                ));
            }
        });
    }

    /// Each server's name, state and tools, in configuration order.
    pub fn statuses(&self) -> Vec<ServerStatus> {
        self.servers
            .iter()
            .map(|server| ServerStatus {
                name: server.config.name.clone(),
                state: server.state(),
                tools: server
                    .tools()
                    .iter()
                    .map(|tool| tool.spec().clone())
                    .collect(),
            })
            .collect()
    }
}

#[async_trait]
impl ToolSource for McpServers {
    /// Starts the servers and waits until each one's first start is over (at most
    /// [`crate::STARTUP_TIMEOUT`]).
    async fn ready(&self) {
        self.start();
        for server in &self.servers {
            server.settled().await;
        }
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.servers
            .iter()
            .flat_map(|server| server.tools())
            .collect()
    }

    /// `mcp:NAME` for every server, started or not.
    fn modules(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(|server| format!("mcp:{}", server.config.name))
            .collect()
    }
}

impl Drop for McpServers {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
