//! Tool retries end to end in process (seed 001): transient failures of idempotent tools are
//! retried at 0.5 s → 2 s → 8 s; side-effecting tools are never retried. Paused time: no test
//! waits real seconds.

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use keel_core::{Agent, EventKind, EventLog, RunRequest};
use keel_mock::{ScriptedProvider, Step};
use serde_json::json;
use support::Flaky;

fn agent(
    provider: Arc<ScriptedProvider>,
    tool: Arc<dyn keel_core::Tool>,
    events: Arc<EventLog>,
) -> Agent {
    Agent::builder()
        .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
        .provider(provider)
        .model("m")
        .tool(tool)
        .event_sink(events)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_flaky_idempotent_tool_succeeds_on_its_third_attempt() {
    let (tool, calls) = Flaky::tool("lookup", true, 2);
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("lookup", json!({})),
        Step::text("done"),
    ]));
    let events = Arc::new(EventLog::new());
    let started = tokio::time::Instant::now();
    let report = agent(provider, tool, events.clone())
        .run(RunRequest::new("go"))
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert!(report.tool_calls[0].ok);
    assert_eq!(report.tool_calls[0].output, "ok on attempt 3");
    // 0.5 s, then 2 s of backoff (in paused time).
    assert_eq!(started.elapsed(), Duration::from_millis(2500));
    let retries: Vec<(u32, u64)> = events
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolRetry {
                attempt, wait_ms, ..
            } => Some((*attempt, *wait_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(retries, [(1, 500), (2, 2000)]);
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_keeps_failing_gives_up_after_three_retries_and_tells_the_model() {
    let (tool, calls) = Flaky::tool("lookup", true, 99);
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("lookup", json!({})),
        Step::text("could not look it up"),
    ]));
    let report = agent(provider.clone(), tool, Arc::new(EventLog::new()))
        .run(RunRequest::new("go"))
        .await
        .unwrap();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "the first attempt and three retries"
    );
    let output = &report.tool_calls[0].output;
    assert!(
        output.contains("HTTP 503 on attempt 4") && output.contains("gave up after 4 attempts"),
        "{output}"
    );
    assert_eq!(report.state, keel_core::AgentState::Completed);
}

#[tokio::test(start_paused = true)]
async fn a_side_effecting_tool_is_never_retried() {
    let (tool, calls) = Flaky::tool("send_email", false, 1);
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("send_email", json!({})),
        Step::text("it failed; I will not resend"),
    ]));
    let events = Arc::new(EventLog::new());
    let report = agent(provider, tool, events.clone())
        .run(RunRequest::new("go"))
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(!report.tool_calls[0].ok);
    assert_eq!(report.tool_calls[0].output, "Error: HTTP 503 on attempt 1");
    assert!(!events.names().contains(&"agent.tool.retry"));
}
