//! MCP over stdio against a real server: this test binary runs itself as the test server
//! (`serve_as_mcp_child`), so the server is a real child process that can be killed.

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{CHILD_ENV, call, eventually, scenarios, started, state, stdio_config};
use keel_core::{ToolCall, ToolErrorKind, ToolRegistry, ToolSource};
use keel_mcp::{McpServerConfig, McpServers, McpTransport, ServerState};
use serde_json::json;

/// Not a test: the server side of these tests. Run by a test of this binary as a child
/// process, with `CHILD_ENV` set; it then serves the test MCP server on stdin and stdout
/// (libtest's own lines on stdout are not JSON, and MCP clients skip such lines). Without the
/// variable it does nothing.
#[test]
fn serve_as_mcp_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(keel_mcp::test_server::serve_stdio())
        .unwrap();
}

async fn server(timeout: Duration) -> Arc<McpServers> {
    started(vec![stdio_config("t", timeout)]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_listed_and_called() {
    let servers = server(Duration::from_secs(10)).await;
    assert_eq!(state(&servers), ServerState::Running);
    scenarios::lists_tools(&servers, "t");
    scenarios::calls_a_tool(&servers, "t").await;
    scenarios::is_error_is_a_tool_error(&servers, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_is_abandoned() {
    let servers = server(Duration::from_millis(300)).await;
    scenarios::a_hung_call_times_out(&servers, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_refreshes_the_tools() {
    let servers = server(Duration::from_secs(10)).await;
    scenarios::list_changed_shows_the_new_tool(&servers, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_mid_call_is_restarted() {
    let servers = server(Duration::from_secs(10)).await;
    let first_pid = call(&servers, "t__pid", json!({})).await.unwrap().content;
    let started = Instant::now();
    let err = call(&servers, "t__die", json!({})).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    assert_eq!(err.kind, ToolErrorKind::Transient);
    assert!(
        err.message.starts_with("MCP server t is restarting:"),
        "{}",
        err.message
    );
    common::answers_again(&servers, "t").await;
    let second_pid = call(&servers, "t__pid", json!({})).await.unwrap().content;
    assert_ne!(first_pid, second_pid, "a new process");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_during_a_call_is_restarted() {
    let servers = server(Duration::from_secs(20)).await;
    let pid = call(&servers, "t__pid", json!({})).await.unwrap().content;
    let pending = {
        let servers = servers.clone();
        tokio::spawn(async move { call(&servers, "t__sleep", json!({"ms": 15_000})).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let killed = std::process::Command::new("kill")
        .args(["-KILL", pid.as_str()])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = Instant::now();
    let err = pending.await.unwrap().unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    assert!(
        err.message.starts_with("MCP server t is restarting:"),
        "{}",
        err.message
    );
    // Calls while it is down fail at once with the same clear error, or reach the new one.
    match call(&servers, "t__echo", json!({"text": "x"})).await {
        Ok(out) => assert_eq!(out.content, "echo: x"),
        Err(err) => assert!(err.message.contains("is restarting"), "{}", err.message),
    }
    common::answers_again(&servers, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_reported_and_its_secrets_are_not() {
    let failing = McpServerConfig {
        name: "broken".into(),
        transport: McpTransport::Stdio {
            command: "sh".into(),
            args: vec!["-c".into(), "echo \"bad key $API_KEY\" >&2; exit 1".into()],
            env: BTreeMap::from([("API_KEY".into(), "sk-very-secret-123".into())]),
            launcher: vec![],
        },
        call_timeout: Duration::from_secs(5),
    };
    let missing = McpServerConfig {
        name: "missing".into(),
        transport: McpTransport::Stdio {
            command: "/nonexistent/keel-mcp-server".into(),
            args: vec![],
            env: BTreeMap::new(),
            launcher: vec![],
        },
        call_timeout: Duration::from_secs(5),
    };
    let servers = started(vec![
        failing,
        missing,
        stdio_config("t", Duration::from_secs(10)),
    ])
    .await;
    let statuses = servers.statuses();
    let ServerState::Restarting { reason } = &statuses[0].state else {
        panic!("{:?}", statuses[0].state)
    };
    assert!(!reason.contains("sk-very-secret-123"), "{reason}");
    eventually("its last words are kept", || {
        matches!(&servers.statuses()[0].state,
            ServerState::Restarting { reason } if reason.contains("bad key [redacted]"))
    })
    .await;
    let ServerState::Restarting { reason } = &statuses[1].state else {
        panic!("{:?}", statuses[1].state)
    };
    assert!(
        reason.contains("cannot start `/nonexistent/keel-mcp-server`"),
        "{reason}"
    );
    assert!(statuses[0].tools.is_empty() && statuses[1].tools.is_empty());
    // The healthy server beside them works.
    assert_eq!(statuses[2].state, ServerState::Running);
    let out = call(&servers, "t__echo", json!({"text": "fine"}))
        .await
        .unwrap();
    assert_eq!(out.content, "echo: fine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_offers_and_checks_mcp_tools() {
    let servers = McpServers::new(vec![stdio_config("t", Duration::from_secs(10))]).unwrap();
    let mut registry = ToolRegistry::new();
    registry.add_source(Arc::new(servers));
    registry.ready().await;
    let specs = registry.specs();
    assert!(specs.iter().any(|spec| spec.name == "t__echo"));
    let call = |arguments: &str| ToolCall {
        id: "c".into(),
        name: "t__echo".into(),
        arguments: arguments.into(),
    };
    let err = registry.prepare(&call(r#"{"txt": "hi"}"#)).err().unwrap();
    assert!(err.contains("invalid arguments for `t__echo`"), "{err}");
    let prepared = registry.prepare(&call(r#"{"text": "hi"}"#)).ok().unwrap();
    let out = prepared
        .tool
        .call(prepared.args, &common::context())
        .await
        .unwrap();
    assert_eq!(out.content, "echo: hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_finishes_the_handshake_is_given_up_on() {
    let config = McpServerConfig {
        name: "mute".into(),
        transport: McpTransport::Stdio {
            command: "sh".into(),
            args: vec![
                "-c".into(),
                "echo not json; echo '{\"jsonrpc\":\"2.0\",\"junk\":1}'; exec sleep 30".into(),
            ],
            env: BTreeMap::new(),
            launcher: vec![],
        },
        call_timeout: Duration::from_secs(5),
    };
    let mut policy = common::quick_restarts();
    policy.startup_timeout = Duration::from_millis(300);
    let servers = McpServers::new(vec![config])
        .unwrap()
        .with_restart_policy(policy);
    let started = Instant::now();
    servers.ready().await;
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    let ServerState::Restarting { reason } = state(&servers) else {
        panic!("{:?}", state(&servers))
    };
    assert!(reason.contains("did not start within 0.3 s"), "{reason}");
    assert!(servers.tools().is_empty());
}

#[test]
fn two_servers_may_not_share_a_name() {
    let err = McpServers::new(vec![
        stdio_config("t", Duration::from_secs(1)),
        stdio_config("t", Duration::from_secs(1)),
    ])
    .err()
    .unwrap();
    assert_eq!(err, keel_mcp::McpConfigError::Duplicate("t".into()));
}

#[test]
fn every_server_declares_its_module_before_it_starts() {
    let servers = McpServers::new(vec![
        stdio_config("a", Duration::from_secs(1)),
        stdio_config("b", Duration::from_secs(1)),
    ])
    .unwrap();
    assert_eq!(servers.modules(), ["mcp:a", "mcp:b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_runs_under_its_launcher() {
    let mark = std::env::temp_dir().join(format!("keel-mcp-launched-{}", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let mut config = stdio_config("t", Duration::from_secs(10));
    if let McpTransport::Stdio { launcher, .. } = &mut config.transport {
        // Stands for keel's sandbox (`bwrap … --`): it runs the command it is given.
        *launcher = [
            "sh".into(),
            "-c".into(),
            format!("touch '{}'; exec \"$@\"", mark.display()),
            "launcher".into(),
        ]
        .map(std::ffi::OsString::from)
        .to_vec();
    }
    let servers = started(vec![config]).await;
    assert_eq!(state(&servers), ServerState::Running);
    scenarios::calls_a_tool(&servers, "t").await;
    assert!(mark.exists(), "the launcher did not run");
    let _ = std::fs::remove_file(&mark);
}
