//! What the double-texting policies need of every daemon store. A rolled-back run's messages
//! stay stored but leave the context of later runs (those it commits after the mark too); a
//! conversation's policy can be changed. Folding queued runs into another (`steer`, `collect`,
//! [`keel_platform::ConversationStore::absorb_queued`]): the absorbed runs leave the queue and
//! end cancelled with a reason naming the run that answers them, in one transaction, with no
//! outbox row (the user is answered once, by that run); a collect's combined message is stored
//! on the run that carries it; a run cancelled, started or absorbed meanwhile is never taken.
//! Run against SQLite (in memory and on a file) and the memory store.

use keel_core::store::Commit;
use keel_core::{AgentState, Message};
use keel_platform::{DaemonStore, DeliveryRoute, NewConversation, QueuedRun};

mod common;
use common::{at, memory, postgres, run_record, sqlite_file, sqlite_in_memory};

macro_rules! lane_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn collect_folds_queued_runs_into_the_oldest_and_keeps_the_combined_text() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                collect_on(&store).await;
            }

            #[tokio::test]
            async fn steer_folds_queued_runs_into_the_running_run_once() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                steer_on(&store).await;
            }

            #[tokio::test]
            async fn a_rolled_back_run_is_kept_but_leaves_the_context() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                rollback_on(&store).await;
            }
        }
    };
}

lane_tests!(memory_store, memory());
lane_tests!(sqlite_memory, sqlite_in_memory());
lane_tests!(sqlite_on_file, sqlite_file());
lane_tests!(postgres_store, postgres());

/// A conversation whose replies go to a Telegram chat, so an outbox row would show.
async fn routed_conversation(store: &dyn DaemonStore, id: &str) {
    store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: None,
            lane_policy: Default::default(),
            at: at(0),
            place: None,
            trusted: true,
        })
        .await
        .unwrap()
        .unwrap();
    let route = DeliveryRoute {
        channel: "telegram".into(),
        target: "{\"chat\":\"42\"}".into(),
    };
    store.set_delivery(id, &route).await.unwrap();
}

async fn enqueue(store: &dyn DaemonStore, run_id: &str, session: &str, minute: i64) {
    let run = QueuedRun {
        run_id: run_id.into(),
        session_id: session.into(),
        user_id: None,
        message: format!("text of {run_id}"),
        enqueued_at: at(minute),
        provider: "mock".into(),
        model: "m".into(),
        options: Default::default(),
        inbound: None,
        slot: None,
    };
    store.enqueue_run(&run, 64).await.unwrap();
}

fn ids(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|id| id.to_string()).collect()
}

async fn queue_of(store: &dyn DaemonStore, session: &str) -> Vec<(String, String)> {
    store
        .queued_runs(session)
        .await
        .unwrap()
        .into_iter()
        .map(|run| (run.run_id, run.message))
        .collect()
}

async fn assert_absorbed(store: &dyn DaemonStore, run_id: &str, reason: &str) {
    let run = store.run(run_id).await.unwrap().unwrap();
    assert_eq!(run.state, AgentState::Cancelled, "{run_id}");
    assert_eq!(run.error.as_deref(), Some(reason), "{run_id}");
    assert_eq!(run.finished_at, Some(at(9)), "{run_id}");
}

async fn collect_on(store: &dyn DaemonStore) {
    routed_conversation(store, "c").await;
    routed_conversation(store, "other").await;
    for (n, id) in ["r1", "r2", "r3", "r4"].iter().enumerate() {
        enqueue(store, id, "c", n as i64 + 1).await;
    }
    enqueue(store, "x1", "other", 1).await;
    // r4 was cancelled meanwhile; x1 is another conversation's; r1 cannot absorb itself.
    assert!(store.cancel_queued("r4", at(8)).await.unwrap());
    let taken = store
        .absorb_queued(
            "r1",
            &ids(&["r2", "r3", "r4", "x1", "r1", "nope"]),
            Some("[12:01] one\n[12:02] two\n[12:03] three"),
            "collected",
            at(9),
        )
        .await
        .unwrap();
    assert_eq!(taken, ids(&["r2", "r3"]));
    assert_eq!(
        queue_of(store, "c").await,
        vec![(
            "r1".to_string(),
            "[12:01] one\n[12:02] two\n[12:03] three".to_string()
        )],
        "the combined text is stored on the run that carries it"
    );
    assert_absorbed(store, "r2", "collected into run r1").await;
    assert_absorbed(store, "r3", "collected into run r1").await;
    let r4 = store.run("r4").await.unwrap().unwrap();
    assert_eq!(r4.error, None, "a run cancelled before is left as it was");
    assert_eq!(queue_of(store, "other").await.len(), 1);
    assert_eq!(
        store.run("x1").await.unwrap().unwrap().state,
        AgentState::Queued
    );
    assert!(
        store
            .pending_outbox("telegram", 10)
            .await
            .unwrap()
            .is_empty(),
        "absorbed runs are not told: their user is answered by r1"
    );

    // Once r1 started (its first commit took it out of the queue and stored its message), a
    // collect into it takes nothing: the text would be lost.
    enqueue(store, "r5", "c", 10).await;
    let mut started = run_record("r1", "c", at(10));
    started.state = AgentState::Running;
    store
        .commit(&Commit::new(&started, &[Message::user("combined")]))
        .await
        .unwrap();
    let taken = store
        .absorb_queued("r1", &ids(&["r5"]), Some("late"), "collected", at(11))
        .await
        .unwrap();
    assert!(taken.is_empty());
    assert_eq!(
        queue_of(store, "c").await,
        vec![("r5".to_string(), "text of r5".to_string())]
    );
}

async fn steer_on(store: &dyn DaemonStore) {
    routed_conversation(store, "c").await;
    enqueue(store, "r0", "c", 0).await;
    let mut running = run_record("r0", "c", at(1));
    running.state = AgentState::Running;
    store
        .commit(&Commit::new(&running, &[Message::user("first")]))
        .await
        .unwrap();
    enqueue(store, "r1", "c", 2).await;
    enqueue(store, "r2", "c", 3).await;
    // Into a running run, without a message: the texts go to the run's next model call.
    let taken = store
        .absorb_queued("r0", &ids(&["r1", "r2"]), None, "steered", at(9))
        .await
        .unwrap();
    assert_eq!(taken, ids(&["r1", "r2"]));
    assert!(queue_of(store, "c").await.is_empty());
    assert_absorbed(store, "r1", "steered into run r0").await;
    assert_absorbed(store, "r2", "steered into run r0").await;
    // Never twice.
    let again = store
        .absorb_queued("r0", &ids(&["r1", "r2"]), None, "steered", at(12))
        .await
        .unwrap();
    assert!(again.is_empty());
    assert_absorbed(store, "r1", "steered into run r0").await;
    // Into a run that does not exist: nothing.
    enqueue(store, "r3", "c", 13).await;
    let none = store
        .absorb_queued("ghost", &ids(&["r3"]), None, "steered", at(14))
        .await
        .unwrap();
    assert!(none.is_empty());
    assert_eq!(queue_of(store, "c").await.len(), 1);
    assert!(
        store
            .pending_outbox("telegram", 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn rollback_on(store: &dyn DaemonStore) {
    routed_conversation(store, "c").await;
    let mut first = run_record("r1", "c", at(1));
    store
        .commit(&Commit::new(&first, &[Message::user("draft it")]))
        .await
        .unwrap();
    assert!(store.roll_back_run("r1", "r2", at(2)).await.unwrap());
    assert!(
        !store.roll_back_run("r1", "r2", at(2)).await.unwrap(),
        "once"
    );
    assert!(!store.roll_back_run("ghost", "r2", at(2)).await.unwrap());
    // What it commits after the mark is hidden too.
    first.state = AgentState::Cancelled;
    first.finished_at = Some(at(3));
    store
        .commit(&Commit::new(&first, &[Message::assistant("half a dra")]))
        .await
        .unwrap();
    let second = run_record("r2", "c", at(4));
    store
        .commit(&Commit::new(&second, &[Message::user("just say hi")]))
        .await
        .unwrap();
    let context: Vec<String> = store
        .context_messages("c")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.message.content)
        .collect();
    assert_eq!(context, vec!["just say hi".to_string()]);
    assert_eq!(store.messages("c").await.unwrap().len(), 3, "kept");
    assert_eq!(
        store.rolled_back_runs("c").await.unwrap(),
        vec![("r1".to_string(), "r2".to_string())]
    );
    assert!(
        store
            .set_lane_policy("c", keel_core::LanePolicy::Collect)
            .await
            .unwrap()
    );
    assert_eq!(
        store.session("c").await.unwrap().unwrap().lane_policy,
        keel_core::LanePolicy::Collect
    );
    assert!(
        !store
            .set_lane_policy("nope", keel_core::LanePolicy::Reject)
            .await
            .unwrap()
    );
}
