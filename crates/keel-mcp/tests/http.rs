//! MCP over streamable HTTP against a real server on 127.0.0.1, inside the test.

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{call, http_config, scenarios, started, state};
use keel_mcp::test_server::{HttpTestServer, TestServer};
use keel_mcp::{McpServerConfig, McpServers, McpTransport, ServerState};
use serde_json::json;

async fn server(timeout: Duration) -> (HttpTestServer, Arc<McpServers>) {
    let http = HttpTestServer::start("127.0.0.1:0").await.unwrap();
    let servers = started(vec![http_config("web", &http.url, timeout)]).await;
    assert_eq!(state(&servers), ServerState::Running);
    (http, servers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_listed_and_called() {
    let (_http, servers) = server(Duration::from_secs(10)).await;
    scenarios::lists_tools(&servers, "web");
    scenarios::calls_a_tool(&servers, "web").await;
    scenarios::is_error_is_a_tool_error(&servers, "web").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_is_abandoned() {
    let (_http, servers) = server(Duration::from_millis(300)).await;
    scenarios::a_hung_call_times_out(&servers, "web").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_refreshes_the_tools() {
    let (_http, servers) = server(Duration::from_secs(10)).await;
    scenarios::list_changed_shows_the_new_tool(&servers, "web").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_during_a_call_is_reconnected_when_it_is_back() {
    let (http, servers) = server(Duration::from_secs(30)).await;
    let addr = http.addr.to_string();
    let pending = {
        let servers = servers.clone();
        tokio::spawn(async move { call(&servers, "web__sleep", json!({"ms": 15_000})).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    http.kill();
    let started = Instant::now();
    let err = pending.await.unwrap().unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    assert!(
        err.message.starts_with("MCP server web is restarting"),
        "{}",
        err.message
    );
    // While it is away, calls fail with a clear error and never hang.
    let started = Instant::now();
    let err = call(&servers, "web__echo", json!({"text": "x"}))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    assert!(
        err.message.starts_with("MCP server web is restarting"),
        "{}",
        err.message
    );
    // Back on the same address: the next calls work again.
    let _back = HttpTestServer::start_with(&addr, TestServer::default())
        .await
        .unwrap();
    common::eventually("the server runs again", || {
        state(&servers) == ServerState::Running
    })
    .await;
    let out = loop {
        match call(&servers, "web__echo", json!({"text": "back"})).await {
            Ok(out) => break out,
            Err(err) => {
                assert!(err.message.starts_with("MCP server web"), "{}", err.message);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(out.content, "echo: back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_are_sent_and_a_refused_connection_is_reported() {
    // Nothing listens on a port just freed.
    let free = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = free.local_addr().unwrap();
    drop(free);
    let config = McpServerConfig {
        name: "gone".into(),
        transport: McpTransport::Http {
            url: format!("http://{addr}/mcp"),
            headers: BTreeMap::from([("Authorization".into(), "Bearer tok-secret-456".into())]),
        },
        call_timeout: Duration::from_secs(2),
    };
    let servers = started(vec![config]).await;
    let ServerState::Restarting { reason } = state(&servers) else {
        panic!("{:?}", state(&servers))
    };
    assert!(reason.contains("cannot open an MCP session"), "{reason}");
    assert!(!reason.contains("tok-secret-456"), "{reason}");
    assert!(servers.statuses()[0].tools.is_empty());
}
