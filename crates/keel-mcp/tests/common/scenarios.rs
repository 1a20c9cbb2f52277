//! The behaviours every transport must show, each against servers started by the caller.

use std::time::{Duration, Instant};

use keel_core::ToolErrorKind;
use keel_mcp::McpServers;
use serde_json::json;

use super::{call, eventually, names};

/// The tools are listed namespaced, with their schemas, their annotations mapped.
pub fn lists_tools(servers: &McpServers, p: &str) {
    assert_eq!(
        names(servers),
        [
            "add",
            "add_tool",
            "die",
            "echo",
            "fail",
            "pid",
            "sleep",
            "write_note"
        ]
        .map(|n| format!("{p}__{n}"))
    );
    let spec = |name: &str| super::tool(servers, &format!("{p}__{name}")).spec().clone();
    let echo = spec("echo");
    assert_eq!(echo.description, "Echoes the text");
    assert_eq!(echo.parameters["required"], json!(["text"]));
    assert_eq!(echo.parameters["additionalProperties"], json!(false));
    assert_eq!(echo.module.as_deref(), Some(format!("mcp:{p}").as_str()));
    assert!(echo.idempotent, "read-only");
    assert!(spec("add").idempotent, "idempotent and not destructive");
    assert!(spec("write_note").side_effecting(), "destructive");
    assert!(spec("fail").side_effecting(), "no annotations");
}

/// A call returns the tool's text; keel's injected keys never reach the server.
pub async fn calls_a_tool(servers: &McpServers, p: &str) {
    let out = call(servers, &format!("{p}__echo"), json!({"text": "hi"}))
        .await
        .unwrap();
    assert_eq!(out.content, "echo: hi");
    let out = call(servers, &format!("{p}__add"), json!({"a": 2, "b": 40}))
        .await
        .unwrap();
    assert_eq!(out.content, "42");
}

/// `isError: true` is a tool error the model sees.
pub async fn is_error_is_a_tool_error(servers: &McpServers, p: &str) {
    let err = call(servers, &format!("{p}__fail"), json!({}))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    assert_eq!(err.message, "Error: the tool failed on purpose");
}

/// A call past the timeout is abandoned with a clear error; the server still serves.
pub async fn a_hung_call_times_out(servers: &McpServers, p: &str) {
    let started = Instant::now();
    let err = call(servers, &format!("{p}__sleep"), json!({"ms": 20_000}))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(err.kind, ToolErrorKind::Transient);
    assert!(
        err.message.contains("did not answer within"),
        "{}",
        err.message
    );
    let out = call(
        servers,
        &format!("{p}__echo"),
        json!({"text": "still here"}),
    )
    .await
    .unwrap();
    assert_eq!(out.content, "echo: still here");
}

/// The server says its list changed: the new tool shows and works.
pub async fn list_changed_shows_the_new_tool(servers: &McpServers, p: &str) {
    let late = format!("{p}__late");
    assert!(!names(servers).contains(&late));
    call(servers, &format!("{p}__add_tool"), json!({}))
        .await
        .unwrap();
    eventually("the new tool is listed", || names(servers).contains(&late)).await;
    let out = call(servers, &late, json!({})).await.unwrap();
    assert_eq!(out.content, "late tool here");
}
