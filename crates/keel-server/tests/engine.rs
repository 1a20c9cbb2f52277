//! The run engine on `MemoryStore` and keel-mock's in-process model, in tokio's paused time:
//! lanes run one run at a time in arrival order while conversations overlap, a queued run
//! cancelled never starts, the interrupt policy cancels the running run, a full lane refuses,
//! shutdown leaves a run in a model call resumable for the next engine, which completes it, and
//! a report comes only once its run is free to answer.

use keel_platform::ConversationStore;
use std::sync::{Arc, Mutex};

use chrono::Utc;
use keel_core::worker::{Liveness, Worker, WorkerProbe};
use keel_core::{Agent, AgentState, Event, EventKind, EventSink, LanePolicy, SessionInfo, Store};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_platform::NewConversation;
use keel_server::engine::{Engine, EngineError, EngineOptions};
use keel_server::live::LiveEvents;
use keel_store::MemoryStore;

/// Records what the engine tells the hub.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<Event>>,
    starts: Mutex<Vec<(String, u64)>>,
}

impl EventSink for Recorder {
    fn emit(&self, event: &Event) {
        self.events.lock().unwrap().push(event.clone());
    }
}

impl LiveEvents for Recorder {
    fn run_starting(&self, run_id: &str, _session_id: &str, stored_events: u64) {
        self.starts
            .lock()
            .unwrap()
            .push((run_id.into(), stored_events));
    }
    fn run_stopped(&self, _run_id: &str, _state: AgentState) {}
    fn shutdown(&self) {}
}

/// A worker probe that names this "process" and says whether the first engine's is gone.
struct Probe {
    pid: u32,
    gone: Vec<u32>,
}

impl WorkerProbe for Probe {
    fn this_process(&self) -> Option<Worker> {
        Some(Worker {
            host: "test".into(),
            pid: self.pid,
            started: Some(1),
            namespace: None,
        })
    }
    fn liveness(&self, worker: &Worker) -> Liveness {
        if self.gone.contains(&worker.pid) {
            Liveness::Gone
        } else {
            Liveness::Alive
        }
    }
}

fn engine(
    store: &Arc<MemoryStore>,
    script: Script,
    options: EngineOptions,
    probe: Probe,
) -> (Arc<Engine>, Arc<Agent>, Arc<Recorder>) {
    let live = Arc::new(Recorder::default());
    let probe = Arc::new(probe);
    let engine = Engine::new(
        store.clone(),
        live.clone(),
        EngineOptions {
            probe: probe.clone(),
            ..options
        },
    );
    let agent = Arc::new(
        Agent::builder()
            .provider(Arc::new(ScriptedProvider::new(script)))
            .model("m")
            .store(store.clone())
            .worker_probe(probe)
            .event_sink(live.clone())
            .event_sink(engine.sink())
            .build()
            .unwrap(),
    );
    (engine, agent, live)
}

fn alive() -> Probe {
    Probe {
        pid: 1,
        gone: vec![],
    }
}

async fn conversation(store: &MemoryStore, id: &str, policy: LanePolicy) -> SessionInfo {
    store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: Some("ann".into()),
            lane_policy: policy,
            at: Utc::now(),
            place: None,
            trusted: true,
        })
        .await
        .unwrap()
        .unwrap()
}

fn answers(delay_ms: u64) -> Script {
    Script::new(vec![Step::text("ok").with_delay_ms(delay_ms)]).with_per_turn()
}

#[tokio::test(start_paused = true)]
async fn a_lane_runs_in_arrival_order_while_conversations_overlap() {
    let store = Arc::new(MemoryStore::new());
    let (engine, agent, _) = engine(&store, answers(1_000), EngineOptions::default(), alive());
    engine.start(agent).await.unwrap();
    let lane = conversation(&store, "lane", LanePolicy::Queue).await;
    let other = conversation(&store, "other", LanePolicy::Queue).await;
    let mut runs = Vec::new();
    for i in 0..4 {
        let submitted = engine.submit(&lane, format!("m{i}"), None).await.unwrap();
        assert_eq!(submitted.position, i, "runs ahead of it");
        runs.push(submitted.run_id);
    }
    let beside = engine.submit(&other, "hi".into(), None).await.unwrap();
    assert_eq!(beside.position, 0);
    for run_id in &runs {
        assert_eq!(
            engine.wait(run_id).await.unwrap().state,
            AgentState::Completed
        );
    }
    engine.wait(&beside.run_id).await.unwrap();
    let mut spans = Vec::new();
    for run_id in &runs {
        let run = store.run(run_id).await.unwrap().unwrap();
        spans.push((run.started_at, run.finished_at.unwrap()));
    }
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "one at a time, in order: {spans:?}");
    }
    let beside = store.run(&beside.run_id).await.unwrap().unwrap();
    assert!(
        beside.started_at < spans[0].1,
        "the other conversation did not wait"
    );
}

#[tokio::test(start_paused = true)]
async fn a_queued_run_cancelled_never_starts_and_a_full_lane_refuses() {
    let store = Arc::new(MemoryStore::new());
    let options = EngineOptions {
        queue_limit: 2,
        ..EngineOptions::default()
    };
    let (engine, agent, live) = engine(&store, answers(1_000), options, alive());
    engine.start(agent).await.unwrap();
    let lane = conversation(&store, "lane", LanePolicy::Queue).await;
    let first = engine.submit(&lane, "one".into(), None).await.unwrap();
    // The first run starts, and leaves the queue at its first commit.
    while store.queued_runs("lane").await.unwrap().len() == 1 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let second = engine.submit(&lane, "two".into(), None).await.unwrap();
    let third = engine.submit(&lane, "three".into(), None).await.unwrap();
    let refused = engine.submit(&lane, "four".into(), None).await;
    assert!(
        matches!(refused, Err(EngineError::LaneFull { queued: 2, .. })),
        "{refused:?}"
    );
    assert_eq!(
        engine.cancel(&second.run_id).await.unwrap(),
        AgentState::Cancelled
    );
    assert_eq!(
        engine.wait(&second.run_id).await.unwrap().state,
        AgentState::Cancelled
    );
    engine.wait(&first.run_id).await.unwrap();
    engine.wait(&third.run_id).await.unwrap();
    let started: Vec<String> = live
        .starts
        .lock()
        .unwrap()
        .iter()
        .map(|(run, _)| run.clone())
        .collect();
    assert_eq!(
        started,
        [first.run_id, third.run_id],
        "the cancelled run never started"
    );
    let transcript = store.messages("lane").await.unwrap();
    assert!(transcript.iter().all(|m| m.message.content != "two"));
}

#[tokio::test(start_paused = true)]
async fn the_interrupt_policy_cancels_the_running_run() {
    let store = Arc::new(MemoryStore::new());
    let (engine, agent, _) = engine(&store, answers(5_000), EngineOptions::default(), alive());
    engine.start(agent).await.unwrap();
    let lane = conversation(&store, "lane", LanePolicy::Interrupt).await;
    let first = engine.submit(&lane, "long".into(), None).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    let second = engine.submit(&lane, "instead".into(), None).await.unwrap();
    assert_eq!(
        engine.wait(&first.run_id).await.unwrap().state,
        AgentState::Cancelled
    );
    assert_eq!(
        engine.wait(&second.run_id).await.unwrap().state,
        AgentState::Completed
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_leaves_a_run_in_a_model_call_resumable_and_the_next_engine_completes_it() {
    let store = Arc::new(MemoryStore::new());
    let script = Script::new(vec![Step::text("slow").with_delay_ms(60_000)]);
    let (first, agent, live) = engine(&store, script, EngineOptions::default(), alive());
    first.start(agent).await.unwrap();
    let lane = conversation(&store, "lane", LanePolicy::Queue).await;
    let run = first.submit(&lane, "go".into(), None).await.unwrap();
    let queued = first.submit(&lane, "then".into(), None).await.unwrap();
    while !live
        .events
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(e.kind, EventKind::ModelRequest { .. }))
    {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let stopped = first.shutdown().await;
    assert_eq!((stopped.interrupted, stopped.abandoned), (1, 0));
    let left = store.run(&run.run_id).await.unwrap().unwrap();
    assert_eq!(left.state, AgentState::Running, "not cancelled: resumable");
    assert!(matches!(
        first.submit(&lane, "late".into(), None).await,
        Err(EngineError::ShuttingDown)
    ));

    // The next process: the first one's worker is gone.
    let script = Script::new(vec![Step::text("done").with_delay_ms(10)]).with_per_turn();
    let gone = Probe {
        pid: 2,
        gone: vec![1],
    };
    let (second, agent, live) = engine(&store, script, EngineOptions::default(), gone);
    second.start(agent).await.unwrap();
    assert!(
        matches!(
            second.resume(&run.run_id, Default::default()).await,
            Err(EngineError::Conflict(_))
        ),
        "the reconciler resumes it already: never two drivers"
    );
    let resumed = second.wait(&run.run_id).await.unwrap();
    assert_eq!(resumed.state, AgentState::Completed);
    assert_eq!(resumed.final_text.as_deref(), Some("done"));
    assert_eq!(
        second.wait(&queued.run_id).await.unwrap().state,
        AgentState::Completed
    );
    let starts = live.starts.lock().unwrap().clone();
    assert_eq!(starts[0].0, run.run_id);
    assert!(starts[0].1 > 0, "a resumed run's stored events are counted");
}

#[tokio::test(start_paused = true)]
async fn beyond_the_worker_pool_runs_wait_even_across_conversations() {
    let store = Arc::new(MemoryStore::new());
    let options = EngineOptions {
        workers: 1,
        ..EngineOptions::default()
    };
    let (engine, agent, _) = engine(&store, answers(1_000), options, alive());
    engine.start(agent).await.unwrap();
    let mut runs = Vec::new();
    for i in 0..3 {
        let conversation = conversation(&store, &format!("c{i}"), LanePolicy::Queue).await;
        runs.push(
            engine
                .submit(&conversation, "hi".into(), None)
                .await
                .unwrap()
                .run_id,
        );
    }
    let mut spans = Vec::new();
    for run_id in &runs {
        engine.wait(run_id).await.unwrap();
        let run = store.run(run_id).await.unwrap().unwrap();
        spans.push((run.started_at, run.finished_at.unwrap()));
    }
    spans.sort();
    for pair in spans.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "one worker, one run at a time: {spans:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_question_waits_for_its_answer_through_the_engine() {
    let store = Arc::new(MemoryStore::new());
    let script = Script::new(vec![
        Step::tool_call("ask_human", serde_json::json!({"question": "Which file?"})),
        Step::text("Thanks, a.txt it is."),
    ]);
    let (engine, agent, _) = engine(&store, script, EngineOptions::default(), alive());
    engine.start(agent).await.unwrap();
    let lane = conversation(&store, "lane", LanePolicy::Queue).await;
    let run = engine
        .submit(&lane, "edit the file".into(), None)
        .await
        .unwrap();
    let paused = engine.wait(&run.run_id).await.unwrap();
    assert_eq!(paused.state, AgentState::WaitingOnHuman);
    assert_eq!(paused.question.as_deref(), Some("Which file?"));
    assert!(matches!(
        engine.resume(&run.run_id, Default::default()).await,
        Err(EngineError::Conflict(_))
    ));
    engine.answer(&run.run_id, "a.txt".into()).await.unwrap();
    let answered = engine.wait(&run.run_id).await.unwrap();
    assert_eq!(answered.state, AgentState::Completed);
    assert_eq!(answered.final_text.as_deref(), Some("Thanks, a.txt it is."));
    assert!(matches!(
        engine.answer(&run.run_id, "again".into()).await,
        Err(EngineError::Conflict(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn the_periodic_reconciler_resumes_a_run_whose_worker_died_later() {
    let store = Arc::new(MemoryStore::new());
    let options = EngineOptions {
        reconcile_every: std::time::Duration::from_secs(60),
        ..EngineOptions::default()
    };
    // Another process (pid 7) started a run and died after its first boundary.
    let script = Script::new(vec![Step::text("done")]).with_per_turn();
    let (other, other_agent, _) = engine(
        &store,
        Script::new(vec![Step::text("never").with_delay_ms(3_600_000)]),
        EngineOptions::default(),
        Probe {
            pid: 7,
            gone: vec![],
        },
    );
    other.start(other_agent).await.unwrap();
    let lane = conversation(&store, "lane", LanePolicy::Queue).await;
    let run = other.submit(&lane, "go".into(), None).await.unwrap();
    while store.run(&run.run_id).await.unwrap().unwrap().state != AgentState::Running {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    // This engine starts while pid 7 still lives, then learns it died.
    let gone = Arc::new(Mutex::new(vec![]));
    struct Changing(Arc<Mutex<Vec<u32>>>);
    impl WorkerProbe for Changing {
        fn this_process(&self) -> Option<Worker> {
            None
        }
        fn liveness(&self, worker: &Worker) -> Liveness {
            if self.0.lock().unwrap().contains(&worker.pid) {
                Liveness::Gone
            } else {
                Liveness::Alive
            }
        }
    }
    let live = Arc::new(Recorder::default());
    let this = Engine::new(
        store.clone(),
        live.clone(),
        EngineOptions {
            probe: Arc::new(Changing(gone.clone())),
            ..options
        },
    );
    let agent = Arc::new(
        Agent::builder()
            .provider(Arc::new(ScriptedProvider::new(script)))
            .model("m")
            .store(store.clone())
            .event_sink(live.clone())
            .event_sink(this.sink())
            .build()
            .unwrap(),
    );
    this.start(agent).await.unwrap();
    assert_eq!(
        store.run(&run.run_id).await.unwrap().unwrap().state,
        AgentState::Running
    );
    drop(other);
    gone.lock().unwrap().push(7);
    tokio::time::sleep(std::time::Duration::from_secs(61)).await;
    let resumed = this.wait(&run.run_id).await.unwrap();
    assert_eq!(resumed.state, AgentState::Completed);
    assert_eq!(resumed.final_text.as_deref(), Some("done"));
}

/// On many threads, a waiter that acts on a paused run's report at once finds the run let go:
/// the report is sent only after its driver stops holding it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_report_comes_only_once_its_run_is_free_to_answer() {
    for round in 0..40 {
        let store = Arc::new(MemoryStore::new());
        let script = Script::new(vec![
            Step::tool_call("ask_human", serde_json::json!({"question": "Which file?"})),
            Step::text("Thanks."),
        ]);
        let (engine, agent, _) = engine(&store, script, EngineOptions::default(), alive());
        engine.start(agent).await.unwrap();
        let lane = conversation(&store, "lane", LanePolicy::Queue).await;
        let run = engine.submit(&lane, "ask".into(), None).await.unwrap();
        let paused = engine.wait(&run.run_id).await.unwrap();
        assert_eq!(paused.state, AgentState::WaitingOnHuman);
        let answered = engine.answer(&run.run_id, "a.txt".into()).await;
        assert!(answered.is_ok(), "round {round}: {answered:?}");
        let done = engine.wait(&run.run_id).await.unwrap();
        assert_eq!(done.state, AgentState::Completed, "round {round}");
    }
}
