//! Two `keel serve` workers on one PostgreSQL database (two stores on one schema) sharing the
//! lanes' queues: workers taking queued runs at the same moment never take the same run, and
//! each conversation's runs are taken in the order they were queued, however the takers
//! interleave; enqueues racing into one lane never queue more than its limit. `KEEL_TEST_PG`
//! names the database (`skip` skips).

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use chrono::{Duration, Utc};
use keel_core::LanePolicy;
use keel_platform::{
    ConversationStore, EnqueueOutcome, NewConversation, QueueClaim, QueuedRun, StoreSignals,
};
use keel_store::PgStore;
use sqlx::postgres::PgConnectOptions;
use tokio::sync::Barrier;

/// Two workers' stores on one fresh schema (`None` when skipped).
async fn two_workers() -> Option<[Arc<PgStore>; 2]> {
    let (_, url) = keel_store::postgres::testing::fresh_schema().await?;
    let options = PgConnectOptions::from_str(&url).unwrap();
    let first = PgStore::open_with(options.clone(), 8).await.unwrap();
    let second = PgStore::open_with(options, 8).await.unwrap();
    assert!(first.shared() && second.shared());
    Some([Arc::new(first), Arc::new(second)])
}

fn queued(run_id: &str, session_id: &str) -> QueuedRun {
    QueuedRun {
        run_id: run_id.into(),
        session_id: session_id.into(),
        user_id: None,
        message: format!("message of {run_id}"),
        enqueued_at: Utc::now(),
        provider: "mock".into(),
        model: "m".into(),
        options: Default::default(),
        inbound: None,
        slot: None,
    }
}

/// `sessions` conversations with `runs` queued runs each, queued round-robin (so each
/// conversation's runs interleave with the others'): run `s{i}-r{j}`.
async fn fill(store: &PgStore, sessions: usize, runs: usize) {
    for i in 0..sessions {
        store
            .create_conversation(&NewConversation {
                id: format!("s{i}"),
                owner: None,
                lane_policy: LanePolicy::Queue,
                at: Utc::now(),
                place: None,
                trusted: true,
            })
            .await
            .unwrap()
            .unwrap();
    }
    for j in 0..runs {
        for i in 0..sessions {
            let outcome = store
                .enqueue_run(&queued(&format!("s{i}-r{j}"), &format!("s{i}")), 64)
                .await
                .unwrap();
            assert_eq!(outcome, EnqueueOutcome::Queued { ahead: j });
        }
    }
}

fn claim(worker: &str, limit: usize) -> QueueClaim<'_> {
    QueueClaim {
        worker,
        at: Utc::now(),
        stale_after: Duration::seconds(60),
        limit,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_taking_at_once_take_different_runs() {
    let Some(workers) = two_workers().await else {
        return;
    };
    fill(&workers[0], 24, 2).await;
    let takers = 8;
    let barrier = Arc::new(Barrier::new(takers));
    let tasks: Vec<_> = (0..takers)
        .map(|i| {
            let store = Arc::clone(&workers[i % 2]);
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                let name = format!("pid {i} on host");
                barrier.wait().await;
                store.claim_queued(&claim(&name, 100)).await.unwrap()
            })
        })
        .collect();
    let mut taken = Vec::new();
    for task in tasks {
        taken.extend(task.await.unwrap().into_iter().map(|run| run.run_id));
    }
    let distinct: BTreeSet<&String> = taken.iter().collect();
    assert_eq!(distinct.len(), taken.len(), "a run taken twice: {taken:?}");
    let heads: BTreeSet<String> = (0..24).map(|i| format!("s{i}-r0")).collect();
    assert_eq!(
        distinct.into_iter().cloned().collect::<BTreeSet<_>>(),
        heads,
        "every conversation's oldest run, and no other"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_draining_one_queue_take_each_run_once_and_in_order() {
    let Some(workers) = two_workers().await else {
        return;
    };
    let (sessions, runs) = (12, 4);
    fill(&workers[0], sessions, runs).await;
    // Each taker takes a few runs, notes them, and ends them (cancelled: the lane is free),
    // until the queue is empty.
    let log: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let takers = 6;
    let barrier = Arc::new(Barrier::new(takers));
    let tasks: Vec<_> = (0..takers)
        .map(|i| {
            let store = Arc::clone(&workers[i % 2]);
            let (barrier, log) = (Arc::clone(&barrier), Arc::clone(&log));
            tokio::spawn(async move {
                let name = format!("pid {i} on host");
                barrier.wait().await;
                for _ in 0..100_000 {
                    let got = store.claim_queued(&claim(&name, 3)).await.unwrap();
                    if got.is_empty() {
                        if store.queued_sessions().await.unwrap().is_empty() {
                            return;
                        }
                        tokio::task::yield_now().await;
                        continue;
                    }
                    for run in &got {
                        log.lock()
                            .unwrap()
                            .push((run.session_id.clone(), run.run_id.clone()));
                    }
                    for run in got {
                        assert!(store.cancel_queued(&run.run_id, Utc::now()).await.unwrap());
                    }
                }
                panic!("the queue never emptied");
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), sessions * runs, "each run taken once: {log:?}");
    let mut per_session: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (session, run) in log {
        per_session.entry(session).or_default().push(run);
    }
    for (session, taken) in per_session {
        let expected: Vec<String> = (0..runs).map(|j| format!("{session}-r{j}")).collect();
        assert_eq!(
            taken, expected,
            "{session}'s runs in the order they were queued"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueues_racing_into_one_lane_keep_its_limit() {
    let Some(workers) = two_workers().await else {
        return;
    };
    fill(&workers[0], 1, 0).await;
    let racers = 24;
    let limit = 5;
    let barrier = Arc::new(Barrier::new(racers));
    let tasks: Vec<_> = (0..racers)
        .map(|i| {
            let store = Arc::clone(&workers[i % 2]);
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .enqueue_run(&queued(&format!("r{i}"), "s0"), limit)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut ahead = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            EnqueueOutcome::Queued { ahead: n } => ahead.push(n),
            EnqueueOutcome::Full { queued } => assert_eq!(queued, limit),
            other => panic!("{other:?}"),
        }
    }
    ahead.sort_unstable();
    assert_eq!(ahead, (0..limit).collect::<Vec<_>>(), "one place each");
    assert_eq!(workers[1].queued_runs("s0").await.unwrap().len(), limit);
}

#[tokio::test]
async fn a_lane_another_transaction_holds_is_passed_over_not_waited_for() {
    let Some([a, b]) = two_workers().await else {
        return;
    };
    fill(&a, 1, 0).await;
    let long_ago = Utc::now() - Duration::seconds(600);
    let run = QueuedRun {
        enqueued_at: long_ago,
        ..queued("r1", "s0")
    };
    a.enqueue_run(&run, 4).await.unwrap();
    let first = QueueClaim {
        at: long_ago,
        ..claim("pid 1 on host", 4)
    };
    assert_eq!(
        a.claim_queued(&first).await.unwrap(),
        std::slice::from_ref(&run)
    );
    // Worker 1 died before starting r1, so its claim lapsed; but a transaction of worker 1's
    // store holds the lane's row (as a commit's fence would).
    let mut tx = a.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM session_lanes WHERE session_id = 's0' FOR UPDATE")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let taken = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        b.claim_queued(&claim("pid 2 on host", 4)),
    )
    .await
    .expect("a claim never waits for a lane's row")
    .unwrap();
    assert!(taken.is_empty());
    tx.rollback().await.unwrap();
    assert_eq!(
        b.claim_queued(&claim("pid 2 on host", 4)).await.unwrap(),
        [run]
    );
}
