//! Session lanes, the behaviour every `Store` must have (keel-core's `lane` module): one active
//! run per session, released by the run's terminal commit, taken over when the holder's worker
//! went silent, kept by a paused run. Run against `SqliteStore` (in memory and on a file) and
//! keel-core's `MemoryStore`; the last test races claims from many tasks on one file.

use chrono::{DateTime, Duration, Utc};
use keel_core::store::Commit;
use keel_core::{AgentState, LaneClaim, LaneHolder, LaneOutcome, Message, Store, StoreError};
use keel_platform::DaemonStore;
use keel_store::SqliteStore;

mod common;
use common::{at, memory, postgres, run_record, sqlite_file, sqlite_in_memory};

/// Runs every lane check on a fresh store made by `make`.
macro_rules! lane_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn a_second_run_is_busy_until_the_first_ends() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                one_run_at_a_time_on(&store).await;
            }

            #[tokio::test]
            async fn a_silent_holder_is_taken_over() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                takeover_on(&store).await;
            }

            #[tokio::test]
            async fn a_paused_run_keeps_its_lane_until_cancelled() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                paused_on(&store).await;
            }

            #[tokio::test]
            async fn a_second_worker_writing_a_stored_boundary_is_superseded() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                superseded_on(&store).await;
            }
        }
    };
}

lane_tests!(memory_store, memory());
lane_tests!(sqlite_in_memory_store, sqlite_in_memory());
lane_tests!(sqlite_file_store, sqlite_file());
lane_tests!(postgres_store, postgres());

/// A claim of session `s` for `run_id` at `now`, with a staleness of one minute.
fn claim(run_id: &str, now: DateTime<Utc>) -> LaneClaim<'_> {
    LaneClaim {
        session_id: "s",
        run_id,
        worker: "host:1",
        at: now,
        stale_after: Duration::minutes(1),
    }
}

fn busy_with(outcome: LaneOutcome) -> LaneHolder {
    match outcome {
        LaneOutcome::Busy(holder) => holder,
        LaneOutcome::Claimed => panic!("claimed a held lane"),
    }
}

async fn one_run_at_a_time_on(store: &dyn DaemonStore) {
    assert_eq!(
        store.claim_session(&claim("a", at(0))).await.unwrap(),
        LaneOutcome::Claimed
    );
    assert!(
        store.session("s").await.unwrap().is_some(),
        "the session is created"
    );
    let holder = busy_with(store.claim_session(&claim("b", at(0))).await.unwrap());
    assert_eq!(
        holder,
        LaneHolder {
            run_id: "a".into(),
            worker: "host:1".into(),
            claimed_at: at(0),
            paused: false,
        }
    );
    assert_eq!(
        store.claim_session(&claim("a", at(0))).await.unwrap(),
        LaneOutcome::Claimed,
        "the holder may claim again"
    );

    // A running commit keeps the lane; the terminal one releases it in the same transaction.
    let mut run = run_record("a", "s", at(0));
    run.heartbeat_at = Some(at(0));
    store
        .commit(&Commit::new(&run, &[Message::user("A")]))
        .await
        .unwrap();
    busy_with(store.claim_session(&claim("b", at(0))).await.unwrap());
    run.state = AgentState::Completed;
    run.finished_at = Some(at(0));
    store
        .commit(&Commit::new(&run, &[Message::assistant("final A")]))
        .await
        .unwrap();
    assert_eq!(
        store.claim_session(&claim("b", at(0))).await.unwrap(),
        LaneOutcome::Claimed
    );

    // A run that ends without a terminal commit releases its lane itself; only its own.
    assert!(!store.release_session("s", "a").await.unwrap());
    busy_with(store.claim_session(&claim("c", at(0))).await.unwrap());
    assert!(store.release_session("s", "b").await.unwrap());
    assert_eq!(
        store.claim_session(&claim("c", at(0))).await.unwrap(),
        LaneOutcome::Claimed
    );
    let mut other = claim("d", at(0));
    other.session_id = "t";
    assert_eq!(
        store.claim_session(&other).await.unwrap(),
        LaneOutcome::Claimed,
        "sessions have lanes of their own"
    );
}

async fn takeover_on(store: &dyn DaemonStore) {
    // Claimed, never stored: its claim is its only sign of life.
    store.claim_session(&claim("a", at(0))).await.unwrap();
    busy_with(
        store
            .claim_session(&claim("b", at(0) + Duration::seconds(59)))
            .await
            .unwrap(),
    );
    assert_eq!(
        store.claim_session(&claim("b", at(2))).await.unwrap(),
        LaneOutcome::Claimed,
        "silent for two minutes: taken over"
    );

    // Stored and heartbeating: alive while its heartbeat is fresh.
    let mut run = run_record("b", "s", at(2));
    run.heartbeat_at = Some(at(2));
    store.commit(&Commit::new(&run, &[])).await.unwrap();
    store.heartbeat("b", at(10)).await.unwrap();
    busy_with(
        store
            .claim_session(&claim("c", at(10) + Duration::seconds(59)))
            .await
            .unwrap(),
    );
    assert_eq!(
        store.claim_session(&claim("c", at(12))).await.unwrap(),
        LaneOutcome::Claimed
    );
    busy_with(store.claim_session(&claim("b", at(12))).await.unwrap());

    // The silent worker wakes up: its messages are refused, whole; its bookkeeping is not.
    let late = [Message::user("from b, late"), Message::assistant("b again")];
    let err = store.commit(&Commit::new(&run, &late)).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::LaneLost { run_id, session_id, holder }
            if run_id == "b" && session_id == "s" && holder == "c"),
        "{err:?}"
    );
    assert!(err.to_string().contains("lost session s to run c"), "{err}");
    let err = store
        .append_messages("s", Some("b"), &late)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LaneLost { .. }), "{err:?}");
    run.state = AgentState::TimedOut;
    store.commit(&Commit::new(&run, &[])).await.unwrap();
    store
        .append_messages("s", None, &[Message::user("no run")])
        .await
        .unwrap();
    let c = run_record("c", "s", at(12));
    store
        .commit(&Commit::new(&c, &[Message::user("from c")]))
        .await
        .unwrap();
    let texts: Vec<String> = store
        .messages("s")
        .await
        .unwrap()
        .into_iter()
        .map(|stored| stored.message.content)
        .collect();
    assert_eq!(texts, ["no run", "from c"]);
}

async fn paused_on(store: &dyn DaemonStore) {
    store.claim_session(&claim("a", at(0))).await.unwrap();
    let mut run = run_record("a", "s", at(0));
    run.state = AgentState::WaitingOnHuman;
    run.heartbeat_at = Some(at(0));
    store.commit(&Commit::new(&run, &[])).await.unwrap();
    let holder = busy_with(store.claim_session(&claim("b", at(600))).await.unwrap());
    assert!(
        holder.paused,
        "a paused run holds, however old its heartbeat"
    );
    assert!(store.request_cancel("a", at(601)).await.unwrap());
    assert_eq!(
        store.claim_session(&claim("b", at(602))).await.unwrap(),
        LaneOutcome::Claimed,
        "asked to stop, it gives the lane up"
    );
}

async fn superseded_on(store: &dyn DaemonStore) {
    let run = run_record("a", "s", at(0));
    let checkpoint = keel_core::Checkpoint {
        run_id: "a".into(),
        seq: 3,
        boundary: keel_core::Boundary::LlmResponse,
        iteration: 1,
        message_cursor: 1,
        persisted: 1,
        prompt_hash: "h".into(),
        completed_calls: Vec::new(),
        state: "{}".into(),
        frame: None,
        created_at: at(0),
    };
    let mut commit = Commit::new(&run, &[]);
    commit.checkpoint = Some(&checkpoint);
    store.commit(&commit).await.unwrap();
    let stale = [Message::assistant("from the stalled worker")];
    commit.messages = &stale;
    let err = store.commit(&commit).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Superseded { run_id, seq: 3 } if run_id == "a"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("taken over by another worker"), "{text}");
    assert!(!text.contains("UNIQUE"), "{text}");
    assert_eq!(
        store.messages("s").await.unwrap().len(),
        0,
        "nothing of the stale commit is kept"
    );
}

/// Many claims at once on one file, from two stores (two processes' worth of connections): one
/// wins, every other one is told who holds the lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claims_on_one_file_have_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let first = SqliteStore::open(&path).await.unwrap();
    let second = SqliteStore::open(&path).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..40 {
        let store = if i % 2 == 0 { &first } else { &second }.clone();
        tasks.spawn(async move {
            let run_id = format!("r{i}");
            let outcome = store.claim_session(&claim(&run_id, Utc::now())).await;
            (run_id, outcome.unwrap())
        });
    }
    let mut winners = Vec::new();
    let mut holders = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined.unwrap() {
            (run_id, LaneOutcome::Claimed) => winners.push(run_id),
            (_, LaneOutcome::Busy(holder)) => holders.push(holder.run_id),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert!(holders.iter().all(|holder| *holder == winners[0]));
}
