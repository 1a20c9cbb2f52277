//! Approval of tool calls: a call its tool says needs approval (or a side effect in an untrusted
//! session) pauses the run before anything of its batch runs; `approve_once` runs it,
//! `approve_session` also lets matching calls of the session run without asking, `deny` tells
//! the model and never runs it; a person at hand is asked inline, and one who does not answer
//! in time denies.

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use keel_core::{
    Agent, AgentState, ApprovalDecision, Boundary, HumanChannel, PendingApproval, RunRequest, Store,
};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::json;
use support::{Appender, Guarded, last_tool_message};

fn agent(provider: Arc<ScriptedProvider>, store: Arc<MemoryStore>, appender: &Appender) -> Agent {
    Agent::builder()
        .provider(provider)
        .model("m")
        .store(store)
        .tool(Arc::new(Guarded(appender.tool())))
        .build()
        .unwrap()
}

fn append(text: &str) -> Step {
    Step::tool_call("append", json!({"text": text}))
}

#[tokio::test]
async fn a_call_needing_approval_waits_durably_and_runs_once_approved() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        append("danger 1"),
        Step::text("done"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let appender = Appender::default();
    let agent = agent(provider.clone(), store.clone(), &appender);
    let waiting = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(waiting.state, AgentState::WaitingOnHuman);
    let pending = waiting
        .approval
        .clone()
        .expect("the pending call is reported");
    assert_eq!(pending.tool, "append");
    assert_eq!(pending.reason, "it is dangerous");
    assert!(appender.lines().is_empty(), "it ran before approval");
    assert!(
        store.tool_calls(&waiting.run_id).await.unwrap().is_empty(),
        "recorded as started before approval"
    );
    let checkpoint = store
        .latest_checkpoint(&waiting.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(checkpoint.boundary, Boundary::HumanPause);
    // Not a question: `keel answer` does not apply.
    assert!(agent.answer(&waiting.run_id, "yes").await.is_err());

    let done = agent
        .approve(
            &waiting.run_id,
            &pending.call_id,
            ApprovalDecision::ApproveOnce,
            false,
        )
        .await
        .unwrap();
    assert_eq!(done.state, AgentState::Completed, "{done:?}");
    assert_eq!(appender.lines(), ["danger 1"]);
    assert!(done.approval.is_none());
    // Approving twice: nothing waits any more.
    assert!(
        agent
            .approve(
                &waiting.run_id,
                &pending.call_id,
                ApprovalDecision::ApproveOnce,
                false
            )
            .await
            .is_err()
    );
    assert!(
        agent
            .approve("no-such-run", "c", ApprovalDecision::Deny, false)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_denied_call_never_runs_and_the_model_is_told() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        append("safe").with_tool_call("append", json!({"text": "danger"})),
        Step::text("ok"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let appender = Appender::default();
    let agent = agent(provider.clone(), store.clone(), &appender);
    let waiting = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(waiting.state, AgentState::WaitingOnHuman);
    assert!(
        appender.lines().is_empty(),
        "nothing of the batch runs first"
    );
    let call_id = waiting.approval.as_ref().unwrap().call_id.clone();
    let done = agent
        .approve(&waiting.run_id, &call_id, ApprovalDecision::Deny, false)
        .await
        .unwrap();
    assert_eq!(done.state, AgentState::Completed);
    assert_eq!(appender.lines(), ["safe"]);
    let told = last_tool_message(&provider.requests()[1]);
    assert!(told.contains("was denied and not run"), "{told}");
    assert!(told.contains("it is dangerous"), "{told}");
    assert!(!done.tool_calls[1].ok);
}

#[tokio::test]
async fn approve_session_lets_the_same_call_run_without_asking_in_later_runs() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        append("danger x"),
        Step::text("one"),
        append("danger x"),
        Step::text("two"),
        append("danger y"),
        Step::text("three"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let appender = Appender::default();
    let agent = agent(provider.clone(), store.clone(), &appender);
    let first = agent
        .run(RunRequest::new("go").session("s1"))
        .await
        .unwrap();
    let call_id = first.approval.as_ref().unwrap().call_id.clone();
    let done = agent
        .approve(
            &first.run_id,
            &call_id,
            ApprovalDecision::ApproveSession,
            false,
        )
        .await
        .unwrap();
    assert_eq!(done.state, AgentState::Completed);
    assert_eq!(
        store.session_approvals("s1").await.unwrap(),
        ["append danger x"]
    );
    let second = agent
        .run(RunRequest::new("again").session("s1"))
        .await
        .unwrap();
    assert_eq!(
        second.state,
        AgentState::Completed,
        "asked again: {second:?}"
    );
    assert_eq!(appender.lines(), ["danger x", "danger x"]);
    // Another pattern still asks.
    let third = agent
        .run(RunRequest::new("other").session("s1"))
        .await
        .unwrap();
    assert_eq!(third.state, AgentState::WaitingOnHuman);
}

#[tokio::test]
async fn an_untrusted_session_asks_before_a_side_effect() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        append("hello"),
        Step::text("ok"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let appender = Appender::default();
    let agent = agent(provider, store, &appender);
    let waiting = agent
        .run(RunRequest::new("go").session("email_trigger:x"))
        .await
        .unwrap();
    assert_eq!(waiting.state, AgentState::WaitingOnHuman, "{waiting:?}");
    let pending = waiting.approval.unwrap();
    assert!(pending.reason.contains("untrusted"), "{}", pending.reason);
    assert_eq!(pending.pattern, "*");
    let done = agent
        .approve(
            &waiting.run_id,
            &pending.call_id,
            ApprovalDecision::ApproveOnce,
            false,
        )
        .await
        .unwrap();
    assert_eq!(done.state, AgentState::Completed);
    assert_eq!(appender.lines(), ["hello"]);
}

/// Decides with `decision`, or never answers when `None`.
struct Person(Option<ApprovalDecision>);

#[async_trait]
impl HumanChannel for Person {
    async fn ask(&self, _question: &str) -> Option<String> {
        None
    }
    async fn approve(&self, _call: &PendingApproval) -> Option<ApprovalDecision> {
        match self.0 {
            Some(decision) => Some(decision),
            None => std::future::pending().await,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_person_at_hand_decides_inline_and_silence_denies_after_the_timeout() {
    for (person, ran) in [
        (Person(Some(ApprovalDecision::ApproveOnce)), true),
        (Person(Some(ApprovalDecision::Deny)), false),
        (Person(None), false),
    ] {
        let provider = Arc::new(ScriptedProvider::from_steps(vec![
            append("danger"),
            Step::text("ok"),
        ]));
        let appender = Appender::default();
        let agent = Agent::builder()
            .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
            .provider(provider.clone())
            .model("m")
            .tool(Arc::new(Guarded(appender.tool())))
            .human(Arc::new(person))
            .approval_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let report = agent.run(RunRequest::new("go")).await.unwrap();
        assert_eq!(report.state, AgentState::Completed);
        assert_eq!(appender.lines().len(), usize::from(ran));
        if !ran {
            assert!(last_tool_message(&provider.requests()[1]).contains("was denied and not run"));
        }
    }
}

#[tokio::test]
async fn a_decision_names_its_call_and_a_stale_one_decides_nothing() {
    // Approving the first call lets the run go on to a second one needing approval: the same
    // decision sent again (a repeated request) must not approve that second call.
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        append("danger 1"),
        append("danger 2"),
        Step::text("done"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let appender = Appender::default();
    let agent = agent(provider, store, &appender);
    let waiting = agent.run(RunRequest::new("go")).await.unwrap();
    let first = waiting.approval.clone().unwrap();
    let run_id = &waiting.run_id;
    // A call id the run does not wait on decides nothing.
    let wrong = agent
        .approve(run_id, "no-such-call", ApprovalDecision::ApproveOnce, false)
        .await
        .unwrap_err();
    assert!(wrong.to_string().contains(&first.call_id), "{wrong}");
    assert!(appender.lines().is_empty());

    let next = agent
        .approve(run_id, &first.call_id, ApprovalDecision::ApproveOnce, false)
        .await
        .unwrap();
    assert_eq!(next.state, AgentState::WaitingOnHuman, "{next:?}");
    let second = next.approval.clone().unwrap();
    assert_ne!(second.call_id, first.call_id);
    assert_eq!(appender.lines(), ["danger 1"]);

    let stale = agent
        .approve(run_id, &first.call_id, ApprovalDecision::ApproveOnce, false)
        .await
        .unwrap_err();
    assert!(stale.to_string().contains("stale"), "{stale}");
    assert_eq!(
        appender.lines(),
        ["danger 1"],
        "a stale decision ran a call"
    );
    let report = agent
        .approve(run_id, &second.call_id, ApprovalDecision::Deny, false)
        .await
        .unwrap();
    assert_eq!(report.state, AgentState::Completed, "{report:?}");
    assert_eq!(appender.lines(), ["danger 1"]);
}
