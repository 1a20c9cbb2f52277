//! keel's own failure in a run: a panic in the loop (here, in a provider) caught by whoever
//! drives the run ends it `error (internal)` with the seed 003 answer — reported, stored, with
//! its `agent_run.failed` event — instead of leaving it `running` with nobody answered.

mod support;

use std::sync::Arc;

use keel_core::run::INTERNAL_ERROR_ANSWER;
use keel_core::{Agent, AgentState, ErrorReason, EventKind, RunRequest, Store};
use keel_mock::{PanicsAt, ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::json;
use support::Appender;

fn agent(panic_at: usize, store: Arc<MemoryStore>, appender: &Appender) -> Agent {
    let provider = PanicsAt::new(
        ScriptedProvider::from_steps(vec![
            Step::tool_call("append", json!({"text": "before"})),
            Step::text("fine"),
        ]),
        panic_at,
        "the provider fell over",
    );
    Agent::builder()
        .provider(Arc::new(provider))
        .model("m")
        .store(store)
        .tool(appender.tool())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_run_that_panics_ends_as_an_internal_error_with_the_seed_answer() {
    let store = Arc::new(MemoryStore::new());
    let appender = Appender::default();
    let agent = agent(2, store.clone(), &appender);
    let request = RunRequest {
        run_id: Some("r1".into()),
        ..RunRequest::new("go").session("s1")
    };
    let report = agent.survive_panic("r1", agent.run(request)).await.unwrap();

    assert_eq!(report.state, AgentState::Error, "{report:?}");
    assert_eq!(report.reason, Some(ErrorReason::Internal));
    assert_eq!(report.final_text.as_deref(), Some(INTERNAL_ERROR_ANSWER));
    assert!(
        report
            .error
            .as_deref()
            .unwrap()
            .contains("the provider fell over"),
        "{report:?}"
    );
    // What ran before the panic stays done, and the record says the same as the report.
    assert_eq!(appender.lines(), ["before"]);
    let record = store.run("r1").await.unwrap().unwrap();
    assert_eq!(record.state, AgentState::Error);
    assert_eq!(record.reason, Some(ErrorReason::Internal));
    assert_eq!(record.final_text.as_deref(), Some(INTERNAL_ERROR_ANSWER));
    assert!(!record.resume_available);
    let failed = store
        .events("r1")
        .await
        .unwrap()
        .into_iter()
        .filter(|event| {
            matches!(
                event.kind,
                EventKind::RunFailed {
                    reason: Some(ErrorReason::Internal),
                    ..
                }
            )
        })
        .count();
    assert_eq!(failed, 1, "one agent_run.failed (internal) event");
    // Nothing resumes it: it has ended.
    assert!(
        agent
            .resume("r1", keel_core::ResumeOptions::default())
            .await
            .is_err()
    );
    // Failing it again changes nothing.
    let again = agent.fail_internal("r1", "again").await.unwrap();
    assert_eq!(again.error, report.error);
}

#[tokio::test]
async fn a_panic_before_the_first_boundary_still_ends_the_run() {
    // The first model call panics: the run's only checkpoint is its input.
    let store = Arc::new(MemoryStore::new());
    let appender = Appender::default();
    let agent = agent(1, store.clone(), &appender);
    let request = RunRequest {
        run_id: Some("r2".into()),
        ..RunRequest::new("go").session("s2")
    };
    let report = agent.survive_panic("r2", agent.run(request)).await.unwrap();
    assert_eq!(
        (report.state, report.reason),
        (AgentState::Error, Some(ErrorReason::Internal))
    );
    assert_eq!(report.final_text.as_deref(), Some(INTERNAL_ERROR_ANSWER));
    assert!(appender.lines().is_empty());
    // The user's message is kept in the conversation.
    let messages = store.messages_since("s2", 0).await.unwrap();
    assert!(
        messages.iter().any(|m| m.message.content == "go"),
        "{messages:?}"
    );
    // A run that does not panic goes through untouched.
    let fine = agent.survive_panic("r3", async { agent.run(RunRequest::new("x")).await });
    let fine = fine.await.unwrap();
    assert_eq!(fine.state, AgentState::Completed, "{fine:?}");
}
