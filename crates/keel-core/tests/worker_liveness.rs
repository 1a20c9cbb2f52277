//! A run whose worker process is gone is taken over at once, whatever its heartbeat says; one
//! whose worker lives is not. A resume that lacks the run's provider changes nothing; one that
//! chose other models goes on with them. The processes are a fake [`WorkerProbe`].

mod support;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use keel_core::reconcile::{ReconcilePolicy, reconcile_with};
use keel_core::worker::{Liveness, Worker, WorkerProbe};
use keel_core::{Agent, AgentState, Clock, ResumeOptions, RunRequest, Store};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::json;
use support::{ManualClock, waiter};

/// One process of a host where `dead` lists the pids that are gone.
struct FakeProcess {
    pid: u32,
    dead: Arc<Mutex<HashSet<u32>>>,
}

impl WorkerProbe for FakeProcess {
    fn this_process(&self) -> Option<Worker> {
        Some(Worker {
            host: "box".into(),
            pid: self.pid,
            started: Some(7),
            namespace: None,
        })
    }

    fn liveness(&self, worker: &Worker) -> Liveness {
        if worker.host != "box" {
            Liveness::Unknown
        } else if self.dead.lock().unwrap().contains(&worker.pid) {
            Liveness::Gone
        } else {
            Liveness::Alive
        }
    }
}

fn agent(
    provider: Arc<ScriptedProvider>,
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    process: FakeProcess,
    tools: Vec<Arc<dyn keel_core::Tool>>,
) -> Agent {
    Agent::builder()
        .provider(provider)
        .model("m")
        .store(store)
        .clock(clock)
        .tools(tools)
        .worker_probe(Arc::new(process))
        .launch(r#"{"workspace":"/w"}"#)
        .build()
        .unwrap()
}

/// Runs a turn in process `pid` and kills it while its tool hangs; returns the run's id.
async fn crashed_run(
    store: &Arc<MemoryStore>,
    clock: &Arc<ManualClock>,
    dead: &Arc<Mutex<HashSet<u32>>>,
    pid: u32,
) -> String {
    let entered = Arc::new(tokio::sync::Notify::new());
    let hang = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let provider = Arc::new(ScriptedProvider::from_steps(vec![Step::tool_call(
        "wait",
        json!({}),
    )]));
    let process = FakeProcess {
        pid,
        dead: dead.clone(),
    };
    let worker = Arc::new(agent(
        provider,
        store.clone(),
        clock.clone(),
        process,
        vec![waiter(hang.clone(), entered.clone())],
    ));
    let task = tokio::spawn(async move { worker.run(RunRequest::new("go")).await });
    entered.notified().await;
    task.abort();
    let _ = task.await;
    hang.store(false, Ordering::SeqCst);
    let run = store.list_runs(None, 1).await.unwrap().pop().unwrap();
    assert_eq!(run.state, AgentState::WaitingForTool);
    run.id
}

#[tokio::test]
async fn a_run_whose_worker_is_gone_resumes_at_once() {
    let store = Arc::new(MemoryStore::new());
    let clock = ManualClock::new();
    let dead = Arc::new(Mutex::new(HashSet::new()));
    let id = crashed_run(&store, &clock, &dead, 100).await;
    let record = store.run(&id).await.unwrap().unwrap();
    assert_eq!(record.worker.as_ref().map(|w| w.pid), Some(100));
    assert_eq!(record.launch.as_deref(), Some(r#"{"workspace":"/w"}"#));

    let provider = Arc::new(ScriptedProvider::from_steps(vec![Step::text("done")]));
    let process = FakeProcess {
        pid: 200,
        dead: dead.clone(),
    };
    let resumer = agent(provider, store.clone(), clock.clone(), process, vec![]);
    // Its worker lives and its heartbeat is fresh: not yet, and the advice does not say
    // `keel runs cancel`, which would end the run for good.
    let refused = resumer
        .resume(&id, ResumeOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("pid 100 on box"), "{refused}");
    assert!(!refused.contains("keel runs cancel"), "{refused}");

    // Killed: no waiting for the heartbeat to go stale.
    dead.lock().unwrap().insert(100);
    let report = resumer.resume(&id, ResumeOptions::default()).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    let record = store.run(&id).await.unwrap().unwrap();
    assert_eq!(record.worker.map(|w| w.pid), Some(200));
}

#[tokio::test]
async fn the_reconciler_takes_runs_of_gone_workers_at_once() {
    let store = Arc::new(MemoryStore::new());
    let clock = ManualClock::new();
    let dead = Arc::new(Mutex::new(HashSet::new()));
    let id = crashed_run(&store, &clock, &dead, 100).await;
    let probe = FakeProcess {
        pid: 300,
        dead: dead.clone(),
    };
    let policy = ReconcilePolicy::default();
    let report = reconcile_with(store.as_ref(), clock.now(), &policy, &probe)
        .await
        .unwrap();
    assert_eq!(report.timed_out, 0, "its worker lives");
    dead.lock().unwrap().insert(100);
    let report = reconcile_with(store.as_ref(), clock.now(), &policy, &probe)
        .await
        .unwrap();
    assert_eq!((report.timed_out, report.resumable), (1, 1));
    let record = store.run(&id).await.unwrap().unwrap();
    assert_eq!(record.state, AgentState::TimedOut);
    assert!(record.resume_available);
    let why = record.error.unwrap();
    assert!(why.contains("its worker (pid 100 on box) is gone"), "{why}");
}

#[tokio::test]
async fn a_resume_without_the_runs_provider_changes_nothing_and_one_with_other_models_uses_them() {
    let store = Arc::new(MemoryStore::new());
    let clock = ManualClock::new();
    let dead = Arc::new(Mutex::new(HashSet::from([100])));
    let id = crashed_run(&store, &clock, &dead, 100).await;
    let before = store.run(&id).await.unwrap().unwrap();

    let other =
        Arc::new(ScriptedProvider::from_steps(vec![Step::text("other")]).with_name("other"));
    let process = FakeProcess {
        pid: 200,
        dead: dead.clone(),
    };
    let resumer = agent(other.clone(), store.clone(), clock.clone(), process, vec![]);
    let refused = resumer
        .resume(&id, ResumeOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("no provider of that name"), "{refused}");
    assert_eq!(store.run(&id).await.unwrap().unwrap(), before);

    let options = ResumeOptions {
        switch_models: true,
        ..ResumeOptions::default()
    };
    let report = resumer.resume(&id, options).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(report.final_text.as_deref(), Some("other"));
    assert_eq!(store.run(&id).await.unwrap().unwrap().provider, "other");
}
