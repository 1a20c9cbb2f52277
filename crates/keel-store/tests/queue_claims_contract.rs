//! Many workers taking queued runs (`ConversationStore::claim_queued`): each session's oldest
//! queued run whose lane is free, oldest first, its lane claimed for the worker at once; a run
//! taken is not taken again while its lane is held, a lane whose holder lapsed before starting
//! is taken over, and an executing holder keeps its queue waiting until it ends. Run against
//! the memory store, SQLite (in memory and on a file) and PostgreSQL.

use chrono::{DateTime, Duration, Utc};
use keel_core::store::Commit;
use keel_core::worker::Worker;
use keel_core::{AgentState, LaneClaim, LaneOutcome, LanePolicy, Message};
use keel_platform::{DaemonStore, NewConversation, QueueClaim, QueuedRun};

mod common;
use common::{memory, postgres, run_record, sqlite_file, sqlite_in_memory};

macro_rules! claim_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn queued_runs_are_taken_oldest_first_and_once() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                taken_once_on(&store).await;
            }

            #[tokio::test]
            async fn an_executing_holder_keeps_its_queue_waiting() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                executing_holder_on(&store).await;
            }
        }
    };
}

claim_tests!(memory_store, memory());
claim_tests!(sqlite_memory, sqlite_in_memory());
claim_tests!(sqlite_on_file, sqlite_file());
claim_tests!(postgres_store, postgres());

/// The worker `keel serve` would be in these tests, and its lane string.
fn worker(pid: u32) -> (Worker, String) {
    let worker = Worker {
        host: "host".into(),
        pid,
        started: None,
        namespace: None,
    };
    let name = worker.to_string();
    (worker, name)
}

async fn conversation(store: &dyn DaemonStore, id: &str, at: DateTime<Utc>) {
    store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: None,
            lane_policy: LanePolicy::Queue,
            at,
            place: None,
            trusted: true,
        })
        .await
        .unwrap()
        .unwrap();
}

fn queued(run_id: &str, session_id: &str, enqueued_at: DateTime<Utc>) -> QueuedRun {
    QueuedRun {
        run_id: run_id.into(),
        session_id: session_id.into(),
        user_id: None,
        message: format!("message of {run_id}"),
        enqueued_at,
        provider: "mock".into(),
        model: "m".into(),
        options: Default::default(),
        inbound: None,
        slot: None,
    }
}

async fn enqueue(store: &dyn DaemonStore, run_id: &str, session_id: &str, at: DateTime<Utc>) {
    let outcome = store
        .enqueue_run(&queued(run_id, session_id, at), 16)
        .await
        .unwrap();
    assert!(matches!(
        outcome,
        keel_platform::EnqueueOutcome::Queued { .. }
    ));
}

fn claim(worker: &str, at: DateTime<Utc>, limit: usize) -> QueueClaim<'_> {
    QueueClaim {
        worker,
        at,
        stale_after: Duration::seconds(60),
        limit,
    }
}

async fn take(store: &dyn DaemonStore, claim: QueueClaim<'_>) -> Vec<String> {
    store
        .claim_queued(&claim)
        .await
        .unwrap()
        .into_iter()
        .map(|run| run.run_id)
        .collect()
}

/// Who holds `session_id`'s lane (asked by a claim for a run that never gets it).
async fn holder(store: &dyn DaemonStore, session_id: &str, at: DateTime<Utc>) -> (String, String) {
    let outcome = store
        .claim_session(&LaneClaim {
            session_id,
            run_id: "probe",
            worker: "probe",
            at,
            stale_after: Duration::seconds(60),
        })
        .await
        .unwrap();
    match outcome {
        LaneOutcome::Busy(holder) => (holder.run_id, holder.worker),
        LaneOutcome::Claimed => panic!("the lane of {session_id} was free"),
    }
}

async fn taken_once_on(store: &dyn DaemonStore) {
    let now = Utc::now();
    for session in ["s1", "s2", "s3"] {
        conversation(store, session, now).await;
    }
    enqueue(store, "a1", "s1", now).await;
    enqueue(store, "b1", "s2", now + Duration::seconds(1)).await;
    enqueue(store, "a2", "s1", now + Duration::seconds(2)).await;
    enqueue(store, "c1", "s3", now + Duration::seconds(3)).await;
    // s3's lane is held by a run that is starting elsewhere (claimed, not stored yet).
    assert_eq!(
        store
            .claim_session(&LaneClaim {
                session_id: "s3",
                run_id: "x",
                worker: "elsewhere",
                at: now,
                stale_after: Duration::seconds(60),
            })
            .await
            .unwrap(),
        LaneOutcome::Claimed
    );
    let (_, one) = worker(1);
    let (_, two) = worker(2);
    assert!(
        take(store, claim(&one, now, 0)).await.is_empty(),
        "none wanted"
    );
    assert_eq!(take(store, claim(&one, now, 1)).await, ["a1"], "the oldest");
    assert_eq!(holder(store, "s1", now).await, ("a1".into(), one.clone()));
    assert_eq!(
        take(store, claim(&two, now, 10)).await,
        ["b1"],
        "a2 waits behind a1, c1 behind x"
    );
    assert!(
        take(store, claim(&one, now, 10)).await.is_empty(),
        "a run taken is never taken again while its lane is held, by anyone"
    );
    let got = store.claim_queued(&claim(&two, now, 10)).await.unwrap();
    assert!(got.is_empty());
    // Taken runs stay queued (until their first commit), whole.
    let queue = store.queued_runs("s1").await.unwrap();
    assert_eq!(
        queue,
        [
            queued("a1", "s1", now),
            queued("a2", "s1", now + Duration::seconds(2))
        ]
    );

    // a1 is cancelled before it started: its lane is free for a2.
    assert!(store.cancel_queued("a1", now).await.unwrap());
    let got = store.claim_queued(&claim(&two, now, 10)).await.unwrap();
    assert_eq!(got, [queued("a2", "s1", now + Duration::seconds(2))]);
    assert_eq!(holder(store, "s1", now).await, ("a2".into(), two.clone()));

    // Two minutes on, every claim lapsed: their runs never started, so a worker takes them
    // over, oldest first: b1 (whose worker died), a2, and c1 (x never came).
    let later = now + Duration::seconds(120);
    let (_, three) = worker(3);
    assert_eq!(take(store, claim(&three, later, 2)).await, ["b1", "a2"]);
    assert_eq!(take(store, claim(&three, later, 2)).await, ["c1"]);
    assert_eq!(
        holder(store, "s3", later).await,
        ("c1".into(), three.clone())
    );
    assert!(take(store, claim(&three, later, 2)).await.is_empty());
}

async fn executing_holder_on(store: &dyn DaemonStore) {
    let now = Utc::now();
    conversation(store, "s", now).await;
    enqueue(store, "r1", "s", now).await;
    enqueue(store, "r2", "s", now).await;
    let (one, name) = worker(1);
    assert_eq!(take(store, claim(&name, now, 4)).await, ["r1"]);

    // r1 starts: its first commit takes it out of the queue; r2 is the oldest now.
    let mut record = run_record("r1", "s", now);
    record.worker = Some(one);
    store
        .commit(&Commit::new(&record, &[Message::user("message of r1")]))
        .await
        .unwrap();
    assert_eq!(store.queued_runs("s").await.unwrap().len(), 1);
    let (_, two) = worker(2);
    assert!(take(store, claim(&two, now, 4)).await.is_empty(), "r1 runs");
    assert!(
        take(store, claim(&two, now + Duration::seconds(600), 4))
            .await
            .is_empty(),
        "a silent executing run is the reconciler's to end, not a claim's to overtake"
    );

    // r1 ends: its lane is free with its end, and r2 is taken.
    record.state = AgentState::Completed;
    record.final_text = Some("done".into());
    record.finished_at = Some(now);
    store.commit(&Commit::new(&record, &[])).await.unwrap();
    assert_eq!(take(store, claim(&two, now, 4)).await, ["r2"]);
}
