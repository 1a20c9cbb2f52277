//! One answer's batch of tool calls: one id per call, side effects in call order, and a run
//! that ends on cancel or at the hard limit even when a tool never returns.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use keel_core::{
    Agent, AgentState, Role, RunRequest, Store, Tool, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::{Value, json};
use support::{Appender, agent_with, waiter};
use tokio_util::sync::CancellationToken;

/// A small file system the model writes and reads through two tools: `write {text, ms}` (side
/// effecting) takes `ms` before it appends a line, `read` (idempotent) returns the lines at
/// once. Run concurrently, a slow write would land after a quicker later one, and a read would
/// miss the write before it.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<String>>>);

struct Write(Lines);
struct Read(Lines, ToolSpec);

#[async_trait]
impl Tool for Write {
    fn spec(&self) -> &ToolSpec {
        static SPEC: std::sync::OnceLock<ToolSpec> = std::sync::OnceLock::new();
        SPEC.get_or_init(|| ToolSpec::new("write", "appends a line", json!({"type": "object"})))
    }
    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0))).await;
        let text = args["text"].as_str().unwrap_or("").to_string();
        self.0.0.lock().unwrap().push(text);
        Ok(ToolOutput::text("written"))
    }
}

#[async_trait]
impl Tool for Read {
    fn spec(&self) -> &ToolSpec {
        &self.1
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(self.0.0.lock().unwrap().join(",")))
    }
}

fn file_tools(lines: &Lines) -> Vec<Arc<dyn Tool>> {
    let read = ToolSpec::new("read", "reads the lines", json!({"type": "object"})).idempotent();
    vec![
        Arc::new(Write(lines.clone())),
        Arc::new(Read(lines.clone(), read)),
    ]
}

#[tokio::test(start_paused = true)]
async fn side_effects_land_in_call_order_and_a_read_sees_the_write_before_it() {
    let lines = Lines::default();
    // Twenty writes, each quicker than the one before: concurrently they would land reversed.
    let mut batch = Step::default();
    for i in 0..20 {
        batch = batch.with_tool_call("write", json!({"text": i.to_string(), "ms": 200 - 10 * i}));
    }
    let batch = batch
        .with_tool_call("write", json!({"text": "last", "ms": 50}))
        .with_tool_call("read", json!({}));
    let provider = Arc::new(ScriptedProvider::from_steps(vec![batch, Step::text("ok")]));
    let agent = agent_with(
        provider.clone(),
        Arc::new(MemoryStore::new()),
        file_tools(&lines),
    );
    let report = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    let expected: Vec<String> = (0..20)
        .map(|i| i.to_string())
        .chain(["last".to_string()])
        .collect();
    assert_eq!(*lines.0.lock().unwrap(), expected);
    let read = report.tool_calls.last().unwrap();
    assert_eq!(read.output, expected.join(","), "the read saw every write");
}

#[tokio::test(start_paused = true)]
async fn two_calls_sharing_an_id_both_run_each_with_its_own_id_result_and_row() {
    let appender = Appender::default();
    let mut step = Step::tool_call("append", json!({"text": "a"}))
        .with_tool_call("append", json!({"text": "b"}));
    for call in &mut step.tool_calls {
        call.id = Some("dup".into());
    }
    let provider = Arc::new(ScriptedProvider::from_steps(vec![step, Step::text("ok")]));
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(provider.clone(), store.clone(), vec![appender.tool()]);
    let report = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(appender.lines(), ["a", "b"]);
    let ids: Vec<&str> = report.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["dup", "dup_2"]);
    assert!(report.tool_calls.iter().all(|c| c.ok), "{report:?}");

    // One envelope row per call, each with its own arguments and output.
    let mut rows = store.tool_calls(&report.run_id).await.unwrap();
    rows.sort_by(|a, b| a.call_id.cmp(&b.call_id));
    let rows: Vec<(&str, &str, Option<bool>)> = rows
        .iter()
        .map(|r| (r.call_id.as_str(), r.arguments.as_str(), r.ok))
        .collect();
    assert_eq!(
        rows,
        [
            ("dup", r#"{"text":"a"}"#, Some(true)),
            ("dup_2", r#"{"text":"b"}"#, Some(true))
        ]
    );

    // The next request, and the store, pair each call with its own result.
    let next = &provider.requests()[1];
    let assistant = next
        .messages
        .iter()
        .find(|m| m.role == Role::Assistant)
        .unwrap();
    let call_ids: Vec<&str> = assistant.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(call_ids, ["dup", "dup_2"]);
    let result_ids: Vec<&str> = next
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.tool_call_id.as_deref().unwrap())
        .collect();
    assert_eq!(result_ids, ["dup", "dup_2"]);
    let stored = store.messages(&report.session_id).await.unwrap();
    let stored_ids: Vec<&str> = stored
        .iter()
        .flat_map(|m| m.message.tool_calls.iter().map(|c| c.id.as_str()))
        .collect();
    assert_eq!(stored_ids, ["dup", "dup_2"]);
}

#[tokio::test(start_paused = true)]
async fn an_id_reused_from_an_earlier_turn_of_the_run_gets_its_own_row() {
    let appender = Appender::default();
    let mut first = Step::tool_call("append", json!({"text": "a"}));
    first.tool_calls[0].id = Some("call_1".into());
    let mut second = Step::tool_call("append", json!({"text": "b"}));
    second.tool_calls[0].id = Some("call_1".into());
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        first,
        second,
        Step::text("ok"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(provider, store.clone(), vec![appender.tool()]);
    let report = agent.run(RunRequest::new("go")).await.unwrap();
    let rows = store.tool_calls(&report.run_id).await.unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(appender.lines(), ["a", "b"]);
}

/// An idempotent tool that never returns and ignores its cancellation token.
fn hung_read() -> Arc<dyn Tool> {
    waiter(
        Arc::new(AtomicBool::new(true)),
        Arc::new(tokio::sync::Notify::new()),
    )
}

/// Cancels `token` after `after` (of paused time).
fn cancel_after(token: &CancellationToken, after: Duration) {
    let token = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        token.cancel();
    });
}

#[tokio::test(start_paused = true)]
async fn cancel_abandons_a_read_that_never_returns_and_skips_the_calls_after_it() {
    let appender = Appender::default();
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("wait", json!({})).with_tool_call("append", json!({"text": "never"})),
        Step::text("unreachable"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(provider, store.clone(), vec![hung_read(), appender.tool()]);
    let cancel = CancellationToken::new();
    cancel_after(&cancel, Duration::from_secs(1));
    let run = agent.run(RunRequest::new("go").cancel_token(cancel));
    let report = tokio::time::timeout(Duration::from_secs(3600), run)
        .await
        .expect("the cancel must end the run")
        .unwrap();
    assert_eq!(report.state, AgentState::Cancelled);
    assert!(appender.lines().is_empty(), "nothing starts after a cancel");
    let outputs: Vec<&str> = report
        .tool_calls
        .iter()
        .map(|c| c.output.as_str())
        .collect();
    assert!(outputs[0].contains("abandoned"), "{outputs:?}");
    assert!(outputs[1].contains("not run"), "{outputs:?}");
}

#[tokio::test(start_paused = true)]
async fn cancel_lets_a_write_in_flight_finish() {
    let lines = Lines::default();
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("write", json!({"text": "done", "ms": 5_000})),
        Step::text("unreachable"),
    ]));
    let agent = agent_with(provider, Arc::new(MemoryStore::new()), file_tools(&lines));
    let cancel = CancellationToken::new();
    cancel_after(&cancel, Duration::from_secs(1));
    let report = agent
        .run(RunRequest::new("go").cancel_token(cancel))
        .await
        .unwrap();
    assert_eq!(report.state, AgentState::Cancelled);
    assert_eq!(*lines.0.lock().unwrap(), ["done"]);
    assert_eq!(report.tool_calls[0].output, "written");
}

/// An agent with a hard limit of 5 s.
fn agent_with_hard_limit(
    provider: Arc<ScriptedProvider>,
    store: Arc<MemoryStore>,
    tools: Vec<Arc<dyn Tool>>,
) -> Agent {
    Agent::builder()
        .provider(provider)
        .model("m")
        .store(store)
        .tools(tools)
        .hard_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_hard_limit_ends_a_run_whose_write_never_returns_even_after_a_cancel() {
    let appender = Appender::default();
    appender.hang_after.store(true, Ordering::SeqCst);
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("append", json!({"text": "half"})),
        Step::text("unreachable"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with_hard_limit(provider, store.clone(), vec![appender.tool()]);
    let cancel = CancellationToken::new();
    cancel_after(&cancel, Duration::from_secs(1));
    let run = agent.run(RunRequest::new("go").cancel_token(cancel));
    let report = tokio::time::timeout(Duration::from_secs(3600), run)
        .await
        .expect("the hard limit must end the run")
        .unwrap();
    assert_eq!(report.state, AgentState::TimedOut);
    // The write may have happened: its row stays `started`, so a resume asks a human.
    let rows = store.tool_calls(&report.run_id).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].completed_at, None);
}

#[tokio::test(start_paused = true)]
async fn a_huge_batch_is_cut_in_requests_only_and_the_session_stays_usable() {
    // The reported scenario: twenty calls with 50 KB of arguments each, an 8k window.
    let appender = Appender::default();
    let big = "x".repeat(50_000);
    let mut batch = Step::default();
    for _ in 0..20 {
        batch = batch.with_tool_call("append", json!({ "text": big }));
    }
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        batch,
        Step::text("done"),
        Step::text("still here"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let agent = Agent::builder()
        .provider(provider.clone())
        .model("m")
        .store(store.clone())
        .tool(appender.tool())
        .context_window(8_192)
        .build()
        .unwrap();
    let first = agent.run(RunRequest::new("write it all")).await.unwrap();
    assert_eq!(first.state, AgentState::Completed, "{:?}", first.error);
    assert_eq!(appender.lines().len(), 20);
    assert!(
        appender.lines().iter().all(|line| *line == big),
        "each call ran whole"
    );

    // What was sent carries valid JSON that says it was cut; the store keeps every byte.
    let sent = &provider.requests()[1];
    let assistant = sent
        .messages
        .iter()
        .find(|m| m.role == Role::Assistant)
        .unwrap();
    assert_eq!(assistant.tool_calls.len(), 20);
    for call in &assistant.tool_calls {
        assert!(call.arguments.len() < 1_000, "{}", call.arguments.len());
        let value: Value = serde_json::from_str(&call.arguments).unwrap();
        assert!(value["note"].as_str().unwrap().contains("50011"), "{value}");
    }
    let stored = store.messages(&first.session_id).await.unwrap();
    let stored_calls: Vec<_> = stored
        .iter()
        .flat_map(|m| m.message.tool_calls.iter())
        .collect();
    assert_eq!(stored_calls.len(), 20);
    assert!(stored_calls.iter().all(|c| c.arguments.len() > 50_000));

    let second = agent
        .run(RunRequest::new("and now?").session(first.session_id.clone()))
        .await
        .unwrap();
    assert_eq!(second.state, AgentState::Completed, "{:?}", second.error);
    assert_eq!(second.final_text.as_deref(), Some("still here"));
}
