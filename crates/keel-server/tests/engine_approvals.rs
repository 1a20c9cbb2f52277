//! The engine with runs that wait for a person or fail inside: a decision names the call it
//! decides and a stale one decides nothing; an approval sent to a run that waits for an answer
//! is refused and leaves the question answerable; a run that panics ends `error (internal)`
//! with the seed 003 answer, its waiter is answered, and its lane goes on.

use keel_platform::ConversationStore;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use keel_core::run::INTERNAL_ERROR_ANSWER;
use keel_core::{
    Agent, AgentState, ApprovalDecision, ApprovalNeed, ErrorReason, LanePolicy, Provider,
    SessionInfo, Store, Tool, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use keel_mock::{PanicsAt, Script, ScriptedProvider, Step};
use keel_platform::NewConversation;
use keel_server::engine::{Engine, EngineError, EngineOptions};
use keel_server::live::LiveEvents;
use keel_store::MemoryStore;
use serde_json::{Value, json};

/// Tells the hub nothing.
struct Quiet;

impl keel_core::EventSink for Quiet {
    fn emit(&self, _event: &keel_core::Event) {}
}

impl LiveEvents for Quiet {
    fn run_starting(&self, _run_id: &str, _session_id: &str, _stored_events: u64) {}
    fn run_stopped(&self, _run_id: &str, _state: AgentState) {}
    fn shutdown(&self) {}
}

/// `shell {command}`: every call needs approval; what ran is kept.
#[derive(Default)]
struct Shell {
    ran: std::sync::Mutex<Vec<String>>,
}

static SHELL_SPEC: std::sync::LazyLock<ToolSpec> = std::sync::LazyLock::new(|| {
    ToolSpec::new(
        "shell",
        "runs a command",
        json!({"type": "object", "properties": {"command": {"type": "string"}},
               "required": ["command"]}),
    )
});

#[async_trait]
impl Tool for Shell {
    fn spec(&self) -> &ToolSpec {
        &SHELL_SPEC
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let command = args["command"].as_str().unwrap_or_default().to_string();
        self.ran.lock().unwrap().push(command);
        Ok(ToolOutput::text("done"))
    }
    fn approval(&self, args: &Value) -> Option<ApprovalNeed> {
        Some(ApprovalNeed {
            reason: "every command asks".into(),
            pattern: args["command"].as_str()?.into(),
        })
    }
}

async fn started(
    store: &Arc<MemoryStore>,
    provider: Arc<dyn Provider>,
    shell: Arc<Shell>,
) -> Arc<Engine> {
    let engine = Engine::new(store.clone(), Arc::new(Quiet), EngineOptions::default());
    let agent = Agent::builder()
        .provider(provider)
        .model("m")
        .store(store.clone())
        .tool(shell)
        .event_sink(engine.sink())
        .build()
        .unwrap();
    engine.start(Arc::new(agent)).await.unwrap();
    engine
}

async fn conversation(store: &MemoryStore, id: &str) -> SessionInfo {
    store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: None,
            lane_policy: LanePolicy::Queue,
            at: Utc::now(),
            place: None,
            trusted: true,
        })
        .await
        .unwrap()
        .unwrap()
}

fn shell(command: &str) -> Step {
    Step::tool_call("shell", json!({ "command": command }))
}

#[tokio::test(start_paused = true)]
async fn a_stale_decision_never_lands_on_the_call_the_run_waits_on_later() {
    let store = Arc::new(MemoryStore::new());
    let tool = Arc::new(Shell::default());
    let script = Script::new(vec![shell("ls"), shell("kill -9 1"), Step::text("done")]);
    let engine = started(
        &store,
        Arc::new(ScriptedProvider::new(script)),
        tool.clone(),
    )
    .await;
    let lane = conversation(&store, "c").await;
    let run = engine.submit(&lane, "go".into(), None).await.unwrap();
    let first = engine.wait(&run.run_id).await.unwrap();
    let ls = first.approval.clone().unwrap();
    assert_eq!(ls.arguments, r#"{"command":"ls"}"#);
    // The report shows the arguments as the object they are.
    let shown = serde_json::to_value(&first).unwrap();
    assert_eq!(shown["approval"]["arguments"], json!({"command": "ls"}));

    engine
        .approve(&run.run_id, &ls.call_id, ApprovalDecision::ApproveOnce)
        .await
        .unwrap();
    let second = engine.wait(&run.run_id).await.unwrap();
    let kill = second.approval.clone().unwrap();
    assert_eq!(kill.tool, "shell");
    assert_ne!(kill.call_id, ls.call_id);
    // The same decision again (a repeated request) is about the first call: refused.
    let stale = engine
        .approve(&run.run_id, &ls.call_id, ApprovalDecision::ApproveOnce)
        .await;
    let Err(EngineError::Conflict(message)) = stale else {
        panic!("a stale decision was taken: {stale:?}");
    };
    assert!(message.contains(&kill.call_id), "{message}");
    assert_eq!(*tool.ran.lock().unwrap(), ["ls"], "nobody saw `kill -9 1`");
    let report = engine.report(&run.run_id).await.unwrap();
    assert_eq!(
        report.approval.unwrap().call_id,
        kill.call_id,
        "still waits"
    );

    engine
        .approve(&run.run_id, &kill.call_id, ApprovalDecision::Deny)
        .await
        .unwrap();
    let done = engine.wait(&run.run_id).await.unwrap();
    assert_eq!(done.state, AgentState::Completed, "{done:?}");
    assert_eq!(*tool.ran.lock().unwrap(), ["ls"]);
}

#[tokio::test(start_paused = true)]
async fn an_approval_for_a_run_waiting_for_an_answer_is_refused_and_the_question_stays() {
    let store = Arc::new(MemoryStore::new());
    let script = Script::new(vec![
        Step::tool_call("ask_human", json!({"question": "Which file?"})),
        Step::text("a.txt it is."),
    ]);
    let engine = started(
        &store,
        Arc::new(ScriptedProvider::new(script)),
        Arc::new(Shell::default()),
    )
    .await;
    let lane = conversation(&store, "c").await;
    let run = engine.submit(&lane, "go".into(), None).await.unwrap();
    let paused = engine.wait(&run.run_id).await.unwrap();
    assert_eq!(paused.question.as_deref(), Some("Which file?"));
    for call_id in ["call_0", "", "ask_human"] {
        let refused = engine
            .approve(&run.run_id, call_id, ApprovalDecision::ApproveOnce)
            .await;
        assert!(
            matches!(&refused, Err(EngineError::Conflict(m)) if m.contains("waits for no approval")),
            "{refused:?}"
        );
    }
    let still = engine.report(&run.run_id).await.unwrap();
    assert_eq!(still.state, AgentState::WaitingOnHuman);
    assert_eq!(still.question.as_deref(), Some("Which file?"));
    engine.answer(&run.run_id, "a.txt".into()).await.unwrap();
    let done = engine.wait(&run.run_id).await.unwrap();
    assert_eq!(done.state, AgentState::Completed, "{done:?}");
    assert_eq!(done.final_text.as_deref(), Some("a.txt it is."));
}

#[tokio::test(start_paused = true)]
async fn a_run_that_panics_ends_as_an_internal_error_and_its_lane_goes_on() {
    let store = Arc::new(MemoryStore::new());
    // The first run's first model call panics; the next run is answered.
    let provider = PanicsAt::new(
        ScriptedProvider::new(Script::new(vec![Step::text("fine")]).with_per_turn()),
        1,
        "a bug in the loop",
    );
    let engine = started(&store, Arc::new(provider), Arc::new(Shell::default())).await;
    let lane = conversation(&store, "c").await;
    let first = engine.submit(&lane, "one".into(), None).await.unwrap();
    let second = engine.submit(&lane, "two".into(), None).await.unwrap();
    assert_eq!(second.position, 1);

    // Before, this waited for good: the run's task died without answering.
    let waited = tokio::time::timeout(Duration::from_secs(600), engine.wait(&first.run_id));
    let failed = waited.await.expect("the waiter was answered").unwrap();
    assert_eq!(
        (failed.state, failed.reason),
        (AgentState::Error, Some(ErrorReason::Internal)),
        "{failed:?}"
    );
    assert_eq!(failed.final_text.as_deref(), Some(INTERNAL_ERROR_ANSWER));
    assert!(failed.error.unwrap().contains("a bug in the loop"));
    let record = store.run(&first.run_id).await.unwrap().unwrap();
    assert_eq!(record.state, AgentState::Error);
    assert_eq!(record.reason, Some(ErrorReason::Internal));
    // The engine is still up and the lane was let go: the next run completes.
    let next = engine.wait(&second.run_id).await.unwrap();
    assert_eq!(next.state, AgentState::Completed, "{next:?}");
    assert_eq!(next.final_text.as_deref(), Some("fine"));
    let third = engine.submit(&lane, "three".into(), None).await.unwrap();
    let third = engine.wait(&third.run_id).await.unwrap();
    assert_eq!(third.state, AgentState::Completed, "{third:?}");
}
