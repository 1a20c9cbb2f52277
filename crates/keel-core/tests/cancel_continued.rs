//! A run continued by a person's answer or approval is cancelled by the caller's token: the
//! model call in flight is abandoned at once and the run ends `cancelled`, its decided call
//! having run once.

mod support;

use std::sync::Arc;
use std::time::Duration;

use keel_core::{
    Agent, AgentState, ApprovalDecision, ContinueOptions, RunReport, RunRequest, Store,
};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::json;
use support::{Appender, Guarded};
use tokio_util::sync::CancellationToken;

fn agent(provider: Arc<ScriptedProvider>, store: Arc<MemoryStore>, appender: &Appender) -> Agent {
    Agent::builder()
        .provider(provider)
        .model("m")
        .store(store)
        .tool(Arc::new(Guarded(appender.tool())))
        .build()
        .unwrap()
}

/// A token cancelled one (virtual) second from now, and its options.
fn cancelled_soon() -> ContinueOptions {
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        trigger.cancel();
    });
    ContinueOptions {
        cancel: Some(cancel),
        ..ContinueOptions::default()
    }
}

/// The continued run ended `cancelled` soon after the cancel, the late answer never stored.
async fn assert_cancelled_at_once(
    store: &MemoryStore,
    started: tokio::time::Instant,
    report: RunReport,
) {
    assert_eq!(report.state, AgentState::Cancelled, "{report:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the model call in flight was abandoned at once"
    );
    let stored = store.run(&report.run_id).await.unwrap().unwrap();
    assert_eq!(stored.state, AgentState::Cancelled);
    let messages = store.messages(&report.session_id).await.unwrap();
    assert!(
        messages.iter().all(|m| m.message.content != "too late"),
        "{messages:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancel_reaches_a_run_continued_by_an_approval() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("append", json!({"text": "danger 1"})),
        Step::text("too late").with_delay_ms(10_000),
    ]));
    let store = Arc::new(MemoryStore::new());
    let appender = Appender::default();
    let agent = agent(provider, store.clone(), &appender);
    let waiting = agent.run(RunRequest::new("go")).await.unwrap();
    let call_id = waiting.approval.clone().expect("it waits").call_id;

    let started = tokio::time::Instant::now();
    let options = cancelled_soon();
    let report = agent
        .approve_with_options(
            &waiting.run_id,
            &call_id,
            ApprovalDecision::ApproveOnce,
            options,
        )
        .await
        .unwrap();
    assert_eq!(appender.lines(), ["danger 1"], "the approved call ran once");
    assert_cancelled_at_once(&store, started, report).await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_reaches_a_run_continued_by_an_answer() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("ask_human", json!({"question": "Which file?"})),
        Step::text("too late").with_delay_ms(10_000),
    ]));
    let store = Arc::new(MemoryStore::new());
    let appender = Appender::default();
    let agent = agent(provider, store.clone(), &appender);
    let waiting = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(waiting.question.as_deref(), Some("Which file?"));

    let started = tokio::time::Instant::now();
    let report = agent
        .answer_with_options(&waiting.run_id, "notes.txt", cancelled_soon())
        .await
        .unwrap();
    assert_cancelled_at_once(&store, started, report).await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_before_the_approval_still_decides_the_call_then_ends_the_run() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("append", json!({"text": "danger 2"})),
        Step::text("never asked"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let appender = Appender::default();
    let agent = agent(provider.clone(), store.clone(), &appender);
    let waiting = agent.run(RunRequest::new("go")).await.unwrap();
    let call_id = waiting.approval.clone().expect("it waits").call_id;
    let cancel = CancellationToken::new();
    cancel.cancel();
    let options = ContinueOptions {
        cancel: Some(cancel),
        ..ContinueOptions::default()
    };
    let report = agent
        .approve_with_options(&waiting.run_id, &call_id, ApprovalDecision::Deny, options)
        .await
        .unwrap();
    assert_eq!(report.state, AgentState::Cancelled, "{report:?}");
    assert!(appender.lines().is_empty(), "a denied call never runs");
    assert_eq!(
        provider.requests().len(),
        1,
        "no model call after the cancel"
    );
}

#[tokio::test(start_paused = true)]
async fn without_a_token_the_continued_run_goes_on_as_before() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("ask_human", json!({"question": "Which file?"})),
        Step::text("done").with_delay_ms(10_000),
    ]));
    let store = Arc::new(MemoryStore::new());
    let agent = agent(provider, store.clone(), &Appender::default());
    let waiting = agent.run(RunRequest::new("go")).await.unwrap();
    let report = agent
        .answer_with_options(&waiting.run_id, "x", ContinueOptions::default())
        .await
        .unwrap();
    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(report.final_text.as_deref(), Some("done"));
}
