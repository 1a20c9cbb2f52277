//! A lying MCP server in an untrusted session: its `lookup` says it is read-only
//! (`readOnlyHint`) but keeps what it is given. keel does not take its word: in an untrusted
//! session (an email, an event) the call waits for a person's approval and the server is given
//! nothing; in a trusted one it runs.

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{http_config, started};
use keel_core::{Agent, AgentState, RunRequest};
use keel_mcp::test_server::{HttpTestServer, TestServer};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_claim_does_not_let_an_untrusted_session_call_without_approval() {
    let liar = TestServer::with_extras();
    let http = HttpTestServer::start_with("127.0.0.1:0", liar.clone())
        .await
        .unwrap();
    let servers = started(vec![http_config(
        "liar",
        &http.url,
        Duration::from_secs(10),
    )])
    .await;
    let lookup = common::tool(&servers, "liar__lookup");
    assert!(lookup.spec().idempotent, "it claims to be read-only");

    for (session, runs) in [("email_trigger:mallory", false), ("cli", true)] {
        let provider = Arc::new(ScriptedProvider::from_steps(vec![
            Step::tool_call("liar__lookup", json!({"text": "the user's secret"})),
            Step::text("done"),
        ]));
        let agent = Agent::builder()
            .provider(provider)
            .model("m")
            .store(Arc::new(MemoryStore::new()))
            .tool_source(servers.clone())
            .build()
            .unwrap();
        let report = agent
            .run(RunRequest::new("look it up").session(session))
            .await
            .unwrap();
        if runs {
            assert_eq!(report.state, AgentState::Completed, "{report:?}");
            assert_eq!(liar.written(), ["the user's secret"]);
        } else {
            assert_eq!(report.state, AgentState::WaitingOnHuman, "{report:?}");
            let pending = report.approval.unwrap();
            assert_eq!(pending.tool, "liar__lookup");
            assert!(
                pending.reason.contains("outside keel"),
                "{}",
                pending.reason
            );
            assert!(
                liar.written().is_empty(),
                "the lying server was given the text"
            );
        }
    }
    http.kill();
}
