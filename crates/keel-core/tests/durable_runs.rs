//! Durable runs in process: a worker that dies mid-run (its task aborted) is resumed from the
//! store — completed side effects replayed, never repeated; an unfinished side effect halts for
//! a human; questions wait for answers; another process's cancel is seen; the reconciler sweeps
//! what dead workers left behind.

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use keel_core::reconcile::{ReconcilePolicy, reconcile};
use keel_core::{
    Agent, AgentState, Boundary, Clock, ErrorReason, HumanChannel, ResumeOptions, RunRequest,
    Store, UnsafeCall,
};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::json;
use support::{Appender, ManualClock, waiter};

fn agent(
    provider: Arc<ScriptedProvider>,
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    tools: Vec<Arc<dyn keel_core::Tool>>,
) -> Agent {
    Agent::builder()
        .provider(provider)
        .model("m")
        .system_prompt("be careful")
        .store(store)
        .clock(clock)
        .tools(tools)
        .build()
        .unwrap()
}

/// Starts a run in its own task, waits until `entered` fires and then until `ready` holds,
/// and kills it: what a worker dying at that instant leaves in the store.
async fn run_and_kill_when(
    agent: Arc<Agent>,
    entered: Arc<tokio::sync::Notify>,
    text: &str,
    ready: impl Fn() -> bool,
) {
    let request = RunRequest::new(text);
    let task = tokio::spawn(async move { agent.run(request).await });
    entered.notified().await;
    for _ in 0..10_000 {
        if ready() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(ready(), "the run never reached the point to kill it at");
    task.abort();
    let _ = task.await;
}

async fn run_and_kill(agent: Arc<Agent>, entered: Arc<tokio::sync::Notify>, text: &str) {
    run_and_kill_when(agent, entered, text, || true).await;
}

async fn only_run(store: &MemoryStore) -> keel_core::RunRecord {
    let runs = store.list_runs(None, 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    runs.into_iter().next().unwrap()
}

#[tokio::test]
async fn a_side_effect_completed_before_the_crash_is_replayed_not_repeated() {
    let appender = Appender::default();
    let hang = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let entered = Arc::new(tokio::sync::Notify::new());
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("append", json!({"text": "once"})).with_tool_call("wait", json!({})),
        Step::text("done"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let clock = ManualClock::new();
    let agent = Arc::new(agent(
        provider,
        store.clone(),
        clock.clone(),
        vec![appender.tool(), waiter(hang.clone(), entered.clone())],
    ));
    // The append finishes and is recorded; the worker dies while `wait` hangs.
    let recorded = {
        let store = store.clone();
        move || {
            let store = store.clone();
            futures::executor::block_on(async move {
                let Some(run) = store.list_runs(None, 1).await.unwrap().pop() else {
                    return false;
                };
                let calls = store.tool_calls(&run.id).await.unwrap();
                calls
                    .iter()
                    .any(|c| c.name == "append" && c.completed_at.is_some())
            })
        }
    };
    run_and_kill_when(agent.clone(), entered, "go", recorded).await;
    assert_eq!(appender.lines(), ["once"]);
    let crashed = only_run(&store).await;
    assert_eq!(crashed.state, AgentState::WaitingForTool);

    // Too early: the worker might still be alive.
    let early = agent.resume(&crashed.id, ResumeOptions::default()).await;
    assert!(early.unwrap_err().to_string().contains("still running"));

    clock.advance(Duration::from_secs(120));
    hang.store(false, Ordering::SeqCst);
    let report = agent
        .resume(&crashed.id, ResumeOptions::default())
        .await
        .unwrap();
    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(report.final_text.as_deref(), Some("done"));
    assert_eq!(
        appender.lines(),
        ["once"],
        "the side effect happened exactly once"
    );
    let events: Vec<&str> = store
        .events(&crashed.id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.kind.name())
        .collect::<Vec<_>>()
        .into_iter()
        .collect();
    assert!(events.contains(&"agent_run.resumed"));
    // Every message survived: user, call, two results, answer.
    assert_eq!(store.messages(&crashed.session_id).await.unwrap().len(), 5);
}

#[tokio::test]
async fn an_unfinished_side_effect_halts_for_a_human_who_can_skip_or_retry() {
    for decision in [UnsafeCall::Skip, UnsafeCall::Retry] {
        let appender = Appender::default();
        appender.hang_after.store(true, Ordering::SeqCst);
        let provider = Arc::new(ScriptedProvider::from_steps(vec![
            Step::tool_call("append", json!({"text": "risky"})),
            Step::text("done"),
        ]));
        let store = Arc::new(MemoryStore::new());
        let clock = ManualClock::new();
        let agent = Arc::new(agent(
            provider,
            store.clone(),
            clock.clone(),
            vec![appender.tool()],
        ));
        // The worker dies after the append did its work but before it returned.
        run_and_kill(agent.clone(), appender.entered.clone(), "go").await;
        let crashed = only_run(&store).await;
        let envelope = store.tool_calls(&crashed.id).await.unwrap();
        assert_eq!(envelope.len(), 1);
        assert!(envelope[0].completed_at.is_none() && !envelope[0].idempotent);

        clock.advance(Duration::from_secs(120));
        appender.hang_after.store(false, Ordering::SeqCst);
        let halted = agent
            .resume(&crashed.id, ResumeOptions::default())
            .await
            .unwrap();
        assert_eq!(halted.state, AgentState::WaitingOnHuman);
        assert_eq!(halted.reason, Some(ErrorReason::ResumeUnsafe));
        assert_eq!(
            appender.lines(),
            ["risky"],
            "not run again without a decision"
        );
        let events = store.events(&crashed.id).await.unwrap();
        assert!(
            events
                .iter()
                .any(|e| e.kind.name() == "agent_run.resume_unsafe")
        );

        let options = ResumeOptions {
            unsafe_call: Some(decision),
            ..ResumeOptions::default()
        };
        let report = agent.resume(&crashed.id, options).await.unwrap();
        assert_eq!(report.state, AgentState::Completed, "{decision:?}");
        match decision {
            UnsafeCall::Skip => {
                assert_eq!(appender.lines(), ["risky"]);
                assert!(
                    report.tool_calls[0]
                        .output
                        .contains("interrupted by a crash")
                );
            }
            UnsafeCall::Retry => assert_eq!(appender.lines(), ["risky", "risky"]),
        }
    }
}

#[tokio::test]
async fn a_crash_before_a_side_effect_started_runs_it_once_on_resume() {
    let appender = Appender::default();
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("append", json!({"text": "later"})).with_delay_ms(60_000),
        Step::text("done"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let clock = ManualClock::new();
    let agent = Arc::new(agent(
        provider,
        store.clone(),
        clock.clone(),
        vec![appender.tool()],
    ));
    // The worker dies during the model call: nothing was appended, nothing is in the envelope.
    let a = agent.clone();
    let task = tokio::spawn(async move { a.run(RunRequest::new("go")).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    task.abort();
    let _ = task.await;
    let crashed = only_run(&store).await;
    let checkpoint = store.latest_checkpoint(&crashed.id).await.unwrap().unwrap();
    assert_eq!(checkpoint.boundary, Boundary::Input);
    // The heartbeat is fresh, but the caller knows the worker is gone.
    let forced = ResumeOptions {
        force: true,
        ..ResumeOptions::default()
    };
    let report = agent.resume(&crashed.id, forced).await;
    // The mock's first step was consumed by the aborted call; the resumed call gets "done".
    let report = report.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    assert!(appender.lines().is_empty());
}

struct Human;

#[async_trait::async_trait]
impl HumanChannel for Human {
    async fn ask(&self, question: &str) -> Option<String> {
        Some(format!("answer to {question}"))
    }
}

#[tokio::test]
async fn ask_human_waits_for_keel_answer_or_asks_a_present_human() {
    let script = || {
        Arc::new(ScriptedProvider::from_steps(vec![
            Step::tool_call("ask_human", json!({"question": "Which file?"})),
            Step::text("thanks"),
        ]))
    };
    // No human at hand: the run waits, and answering it goes on.
    let store = Arc::new(MemoryStore::new());
    let provider = script();
    let agent = agent(provider.clone(), store.clone(), ManualClock::new(), vec![]);
    let waiting = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(waiting.state, AgentState::WaitingOnHuman);
    assert_eq!(waiting.question.as_deref(), Some("Which file?"));
    let checkpoint = store
        .latest_checkpoint(&waiting.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(checkpoint.boundary, Boundary::HumanPause);
    assert!(
        agent
            .resume(&waiting.run_id, ResumeOptions::default())
            .await
            .is_err()
    );
    let done = agent.answer(&waiting.run_id, "notes.txt").await.unwrap();
    assert_eq!(done.state, AgentState::Completed);
    let sent = provider.requests()[1].messages.clone();
    assert!(
        sent.iter()
            .any(|m| m.content == "The human answered: notes.txt"),
        "{sent:#?}"
    );
    assert!(
        agent.answer(&waiting.run_id, "again").await.is_err(),
        "nothing waits any more"
    );

    // A human at hand answers inline.
    let provider = script();
    let inline = Agent::builder()
        .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
        .provider(provider.clone())
        .model("m")
        .human(Arc::new(Human))
        .build()
        .unwrap();
    let report = inline.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    let sent = provider.requests()[1].messages.clone();
    assert!(
        sent.iter()
            .any(|m| m.content == "The human answered: answer to Which file?")
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancel_requested_through_the_store_stops_the_run_at_its_next_heartbeat() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::text("too late").with_delay_ms(600_000),
    ]));
    let store = Arc::new(MemoryStore::new());
    let agent = Arc::new(
        Agent::builder()
            .provider(provider)
            .model("m")
            .store(store.clone())
            .heartbeat_interval(Duration::from_secs(5))
            .build()
            .unwrap(),
    );
    let a = agent.clone();
    let task = tokio::spawn(async move { a.run(RunRequest::new("go")).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let run = only_run(&store).await;
    // Another process asks the run to stop.
    assert!(
        store
            .request_cancel(&run.id, chrono::Utc::now())
            .await
            .unwrap()
    );
    let started = tokio::time::Instant::now();
    let report = task.await.unwrap().unwrap();
    assert_eq!(report.state, AgentState::Cancelled);
    assert!(
        started.elapsed() <= Duration::from_secs(5),
        "seen at the next heartbeat"
    );
    assert_eq!(store.messages(&report.session_id).await.unwrap().len(), 1);
    assert!(
        !store
            .request_cancel("no-such-run", chrono::Utc::now())
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn the_reconciler_times_out_dead_workers_and_cancels_abandoned_pauses() {
    let clock = ManualClock::new();
    let store = Arc::new(MemoryStore::new());
    let entered = Arc::new(tokio::sync::Notify::new());
    let hang = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("wait", json!({})),
        Step::tool_call("ask_human", json!({"question": "still there?"})),
        Step::text("x").repeat_forever(),
    ]));
    let agent = Arc::new(agent(
        provider,
        store.clone(),
        clock.clone(),
        vec![waiter(hang.clone(), entered.clone())],
    ));
    run_and_kill(agent.clone(), entered, "dies in a tool").await;
    hang.store(false, Ordering::SeqCst);
    let paused = agent.run(RunRequest::new("asks a human")).await.unwrap();
    assert_eq!(paused.state, AgentState::WaitingOnHuman);
    let policy = ReconcilePolicy::default();

    // Nothing is stale yet.
    assert_eq!(
        reconcile(store.as_ref(), clock.now(), &policy)
            .await
            .unwrap()
            .timed_out,
        0
    );
    store
        .request_cancel(&paused.run_id, clock.now())
        .await
        .unwrap();
    clock.advance(Duration::from_secs(120));
    let report = reconcile(store.as_ref(), clock.now(), &policy)
        .await
        .unwrap();
    assert_eq!(
        (report.timed_out, report.resumable, report.cancelled),
        (1, 1, 0)
    );
    let runs = store.list_runs(None, 10).await.unwrap();
    let dead = runs.iter().find(|r| r.id != paused.run_id).unwrap();
    assert_eq!(dead.state, AgentState::TimedOut);
    assert!(dead.resume_available);
    // The paused run's cancel is older than 3 minutes only after more time.
    clock.advance(Duration::from_secs(120));
    let report = reconcile(store.as_ref(), clock.now(), &policy)
        .await
        .unwrap();
    assert_eq!(report.cancelled, 1);
    assert_eq!(
        store.run(&paused.run_id).await.unwrap().unwrap().state,
        AgentState::Cancelled
    );
    // A timed-out run with resume available resumes.
    let resumed = agent
        .resume(&dead.id, ResumeOptions::default())
        .await
        .unwrap();
    assert_ne!(resumed.state, AgentState::TimedOut);
}

#[tokio::test]
async fn a_changed_system_prompt_halts_a_resume_until_accepted() {
    let clock = ManualClock::new();
    let store = Arc::new(MemoryStore::new());
    let entered = Arc::new(tokio::sync::Notify::new());
    let hang = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("wait", json!({})),
        Step::text("done"),
    ]));
    let first = Arc::new(agent(
        provider.clone(),
        store.clone(),
        clock.clone(),
        vec![waiter(hang.clone(), entered.clone())],
    ));
    run_and_kill(first, entered.clone(), "go").await;
    hang.store(false, Ordering::SeqCst);
    clock.advance(Duration::from_secs(120));
    let run_id = only_run(&store).await.id;
    let edited = Agent::builder()
        .provider(provider)
        .model("m")
        .system_prompt("be bold")
        .store(store.clone())
        .clock(clock.clone())
        .tool(waiter(hang, entered))
        .build()
        .unwrap();
    let halted = edited
        .resume(&run_id, ResumeOptions::default())
        .await
        .unwrap();
    assert_eq!(halted.state, AgentState::WaitingOnHuman);
    assert_eq!(halted.reason, Some(ErrorReason::PromptDrift));
    let options = ResumeOptions {
        accept_prompt_change: true,
        ..ResumeOptions::default()
    };
    let done = edited.resume(&run_id, options).await.unwrap();
    assert_eq!(done.state, AgentState::Completed);
}
