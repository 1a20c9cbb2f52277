//! A reply over keel's 16 MiB cap, from a real stdio server (this test binary run as the test
//! server with its extras) and from an HTTP one: the call fails at once saying the reply was
//! too large, as a failure that is not retried (not "did not answer" after its whole timeout,
//! nor a lost connection); the stdio session goes on, the HTTP one (which rmcp ends) is
//! started again.

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{CHILD_ENV, call, started, stdio_config};
use keel_core::ToolErrorKind;
use keel_mcp::McpTransport;
use keel_mcp::test_server::EXTRAS_ENV;
use serde_json::json;

/// Not a test: the server side (see `stdio.rs`), with the extra tools.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_over_the_cap_is_reported_as_too_large_at_once_and_not_retried() {
    let timeout = Duration::from_secs(30);
    let mut config = stdio_config("big", timeout);
    if let McpTransport::Stdio { env, .. } = &mut config.transport {
        env.insert(EXTRAS_ENV.into(), "1".into());
    }
    let servers = started(vec![config]).await;
    // Under the cap, a large reply comes whole.
    let out = call(&servers, "big__huge", json!({"bytes": 1_000_000}))
        .await
        .unwrap();
    assert_eq!(out.content.len(), 1_000_000);

    let started = Instant::now();
    let err = call(&servers, "big__huge", json!({"bytes": 17 * 1024 * 1024}))
        .await
        .unwrap_err();
    assert!(started.elapsed() < timeout / 2, "it waited out the timeout");
    assert_eq!(err.kind, ToolErrorKind::Failed, "{}", err.message);
    assert!(
        err.message.contains("more than 16 MiB") && !err.message.contains("did not answer"),
        "{}",
        err.message
    );
    // The session is fine: the next call is answered.
    let out = call(&servers, "big__echo", json!({"text": "still here"}))
        .await
        .unwrap();
    assert_eq!(out.content, "echo: still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_too_a_reply_over_the_cap_is_reported_as_too_large_and_not_retried() {
    let timeout = Duration::from_secs(30);
    let http = keel_mcp::test_server::HttpTestServer::start_with(
        "127.0.0.1:0",
        keel_mcp::test_server::TestServer::with_extras(),
    )
    .await
    .unwrap();
    let servers = started(vec![common::http_config("big", &http.url, timeout)]).await;
    let started = Instant::now();
    let err = call(&servers, "big__huge", json!({"bytes": 17 * 1024 * 1024}))
        .await
        .unwrap_err();
    assert!(started.elapsed() < timeout / 2, "it waited out the timeout");
    assert_eq!(err.kind, ToolErrorKind::Failed, "{}", err.message);
    assert!(err.message.contains("more than 16 MiB"), "{}", err.message);
    common::answers_again(&servers, "big").await;
    http.kill();
}
