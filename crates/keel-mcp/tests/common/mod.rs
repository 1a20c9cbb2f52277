//! What the MCP tests share: starting servers, calling tools, waiting for a condition.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_core::{Tool, ToolContext, ToolError, ToolOutput, ToolSource};
use keel_mcp::{McpServerConfig, McpServers, McpTransport, RestartPolicy, ServerState};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The env var that makes a test binary serve the test MCP server on stdio.
pub const CHILD_ENV: &str = "KEEL_MCP_TEST_CHILD";

/// Quick restarts, so a test waits milliseconds for one.
pub fn quick_restarts() -> RestartPolicy {
    RestartPolicy {
        first_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(400),
        startup_timeout: Duration::from_secs(20),
    }
}

/// A stdio server: this very test binary, running only its `serve_as_mcp_child` function
/// with [`CHILD_ENV`] set (see that function).
pub fn stdio_config(name: &str, timeout: Duration) -> McpServerConfig {
    let exe = std::env::current_exe().unwrap();
    McpServerConfig {
        name: name.into(),
        transport: McpTransport::Stdio {
            command: exe.to_string_lossy().into_owned(),
            args: [
                "--quiet",
                "--exact",
                "serve_as_mcp_child",
                "--test-threads=1",
            ]
            .map(String::from)
            .to_vec(),
            env: BTreeMap::from([(CHILD_ENV.to_string(), "1".to_string())]),
            launcher: vec![],
        },
        call_timeout: timeout,
    }
}

/// An HTTP server's config.
pub fn http_config(name: &str, url: &str, timeout: Duration) -> McpServerConfig {
    McpServerConfig {
        name: name.into(),
        transport: McpTransport::Http {
            url: url.into(),
            headers: BTreeMap::new(),
        },
        call_timeout: timeout,
    }
}

/// The servers of `configs`, started and ready.
pub async fn started(configs: Vec<McpServerConfig>) -> Arc<McpServers> {
    let servers = Arc::new(
        McpServers::new(configs)
            .unwrap()
            .with_restart_policy(quick_restarts()),
    );
    servers.ready().await;
    servers
}

pub fn context() -> ToolContext {
    ToolContext {
        session_id: "s".into(),
        run_id: "r".into(),
        call_id: "c".into(),
        user_id: None,
        untrusted_source: false,
        place: None,
        cancel: CancellationToken::new(),
    }
}

pub fn tool(servers: &McpServers, name: &str) -> Arc<dyn Tool> {
    servers
        .tools()
        .into_iter()
        .find(|tool| tool.spec().name == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

/// Calls `name` with `args` as the executor would (with keel's injected keys).
pub async fn call(servers: &McpServers, name: &str, args: Value) -> Result<ToolOutput, ToolError> {
    let ctx = context();
    let mut args = args;
    ctx.inject(&mut args, false);
    tool(servers, name).call(args, &ctx).await
}

/// Waits (up to 10 s) until `check` holds.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn state(servers: &McpServers) -> ServerState {
    servers.statuses()[0].state.clone()
}

pub fn names(servers: &McpServers) -> Vec<String> {
    let mut names: Vec<String> = servers
        .tools()
        .iter()
        .map(|tool| tool.spec().name.clone())
        .collect();
    names.sort();
    names
}

/// Waits until the server is running again and answers a call.
pub async fn answers_again(servers: &McpServers, prefix: &str) {
    eventually("the server runs again", || {
        state(servers) == ServerState::Running
    })
    .await;
    let out = call(
        servers,
        &format!("{prefix}__echo"),
        serde_json::json!({"text": "back"}),
    )
    .await
    .unwrap();
    assert_eq!(out.content, "echo: back");
}
pub mod scenarios;
