//! `keel mcp list`: starts each configured MCP server and shows where it stands and the tools
//! it offers.

use std::path::Path;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use keel_core::ToolSource;
use keel_mcp::{McpServers, ServerState};

use crate::config::{self, ConfigError, keel_home};
use crate::terminal_text::terminal_safe;

/// `keel mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: McpCommand,
}

/// The `keel mcp` subcommands.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Start each configured server ([mcp.servers.NAME] in keel.toml) and print its state
    /// (running, or failed and why) and its tools. Exits 1 when a server failed.
    List,
}

/// Runs `keel mcp`.
pub async fn mcp(config_file: Option<&Path>, args: McpArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        McpCommand::List => list(config_file).await,
    }
}

async fn list(config_file: Option<&Path>) -> anyhow::Result<ExitCode> {
    let home = keel_home()?;
    let loaded = config::load(config_file, &home)?;
    let configs = loaded.file.mcp.servers().map_err(ConfigError)?;
    if configs.is_empty() {
        println!("no MCP servers configured: add [mcp.servers.NAME] to keel.toml");
        return Ok(ExitCode::SUCCESS);
    }
    let servers = McpServers::new(configs).map_err(|e| ConfigError(format!("[mcp] {e}")))?;
    servers.ready().await;
    let mut failed = false;
    for status in servers.statuses() {
        let state = match &status.state {
            ServerState::Running => "running".to_string(),
            ServerState::Starting => "starting".to_string(),
            ServerState::Restarting { reason } => {
                failed = true;
                format!("failed: {reason}")
            }
        };
        println!("{}  {}", status.name, terminal_safe(&state));
        for tool in &status.tools {
            let kind = if tool.idempotent {
                "idempotent"
            } else {
                "side-effecting"
            };
            let summary = tool.description.lines().next().unwrap_or_default();
            println!(
                "  {:<40} {:<15} {}",
                terminal_safe(&tool.name),
                kind,
                terminal_safe(summary)
            );
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
