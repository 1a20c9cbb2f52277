//! What channels need of every daemon store (DESIGN.md section 14): an inbound event recorded
//! with the run it queued, so a redelivery queues nothing; an outbox row written by the commit
//! that ends a routed run or makes it wait for a person, once per change of state; replies
//! marked delivered once, put off, given up and counted; a channel's own state; pairing codes
//! that work once. Run against SQLite (in memory and on a file), the memory store and
//! PostgreSQL (`KEEL_TEST_PG`; two workers racing for one event or one outbox: `postgres_races`).

use chrono::Duration;
use keel_core::store::Commit;
use keel_core::{AgentState, Message};
use keel_platform::{
    DaemonStore, DeliveryRoute, EnqueueOutcome, InboundKey, NewConversation, Notice, Pairing,
    QueuedRun,
};

mod common;
use common::{at, memory, postgres, run_record, sqlite_file, sqlite_in_memory};

macro_rules! channel_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn an_inbound_event_queues_one_run_however_often_it_comes() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                inbound_on(&store).await;
            }

            #[tokio::test]
            async fn a_routed_run_that_ends_or_waits_writes_one_outbox_row_per_change() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                outbox_on(&store).await;
            }

            #[tokio::test]
            async fn replies_are_delivered_once_put_off_given_up_and_counted() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                delivery_on(&store).await;
            }

            #[tokio::test]
            async fn channel_state_and_pairing_codes() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                state_on(&store).await;
            }
        }
    };
}

channel_tests!(memory_store, memory());
channel_tests!(sqlite_memory, sqlite_in_memory());
channel_tests!(sqlite_on_file, sqlite_file());
channel_tests!(postgres_store, postgres());

async fn conversation(store: &dyn DaemonStore, id: &str) {
    let made = store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: None,
            lane_policy: Default::default(),
            at: at(0),
            place: None,
            trusted: true,
        })
        .await
        .unwrap();
    assert!(made.is_some());
}

fn queued(run_id: &str, session: &str, inbound: Option<InboundKey>) -> QueuedRun {
    QueuedRun {
        run_id: run_id.into(),
        session_id: session.into(),
        user_id: None,
        message: "hello".into(),
        enqueued_at: at(1),
        provider: "mock".into(),
        model: "m".into(),
        options: Default::default(),
        inbound,
        slot: None,
    }
}

async fn inbound_on(store: &dyn DaemonStore) {
    conversation(store, "c1").await;
    let key = InboundKey::new("telegram", "1001");
    assert_eq!(store.inbound_run(&key).await.unwrap(), None);
    let first = store
        .enqueue_run(&queued("r1", "c1", Some(key.clone())), 16)
        .await
        .unwrap();
    assert_eq!(first, EnqueueOutcome::Queued { ahead: 0 });
    assert_eq!(store.inbound_run(&key).await.unwrap(), Some("r1".into()));
    // The redelivery queues nothing and names the first run.
    let again = store
        .enqueue_run(&queued("r2", "c1", Some(key.clone())), 16)
        .await
        .unwrap();
    assert_eq!(
        again,
        EnqueueOutcome::Duplicate {
            run_id: "r1".into()
        }
    );
    assert_eq!(store.queued_runs("c1").await.unwrap().len(), 1);
    assert!(store.run("r2").await.unwrap().is_none());
    // Another source's event of the same id is another event.
    let other = InboundKey::new("slack", "1001");
    let third = store
        .enqueue_run(&queued("r3", "c1", Some(other)), 16)
        .await
        .unwrap();
    assert_eq!(third, EnqueueOutcome::Queued { ahead: 1 });
    // A refused event (full lane) is not recorded: its redelivery may come in later.
    let full_key = InboundKey::new("telegram", "1002");
    let full = store
        .enqueue_run(&queued("r4", "c1", Some(full_key.clone())), 2)
        .await
        .unwrap();
    assert_eq!(full, EnqueueOutcome::Full { queued: 2 });
    assert_eq!(store.inbound_run(&full_key).await.unwrap(), None);
    // An event that queues no run (a button press) is recorded once.
    let press = InboundKey::new("telegram", "cb-9");
    assert!(store.record_inbound(&press, "r1", at(2)).await.unwrap());
    assert!(!store.record_inbound(&press, "r1", at(3)).await.unwrap());
    assert_eq!(store.inbound_run(&press).await.unwrap(), Some("r1".into()));
}

fn route(chat: &str) -> DeliveryRoute {
    DeliveryRoute {
        channel: "telegram".into(),
        target: format!("{{\"chat\":\"{chat}\"}}"),
    }
}

async fn commit_state(store: &dyn DaemonStore, run: &keel_core::RunRecord, messages: &[Message]) {
    store.commit(&Commit::new(run, messages)).await.unwrap();
}

async fn outbox_on(store: &dyn DaemonStore) {
    conversation(store, "routed").await;
    conversation(store, "plain").await;
    store.set_delivery("routed", &route("42")).await.unwrap();
    assert_eq!(store.delivery("routed").await.unwrap(), Some(route("42")));
    assert_eq!(store.delivery("plain").await.unwrap(), None);

    let mut run = run_record("run-a", "routed", at(1));
    commit_state(store, &run, &[Message::user("hi")]).await;
    assert!(
        store
            .pending_outbox("telegram", 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Waiting for a person: one row.
    run.state = AgentState::WaitingOnHuman;
    run.updated_at = at(2);
    commit_state(store, &run, &[]).await;
    // The same state committed again adds nothing.
    run.updated_at = at(3);
    commit_state(store, &run, &[]).await;
    let rows = store.pending_outbox("telegram", 10).await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].run_state.as_deref(), Some("waiting_on_human"));
    assert_eq!(rows[0].run_id.as_deref(), Some("run-a"));
    assert_eq!(rows[0].target, route("42").target);
    assert_eq!(rows[0].session_id, "routed");
    // Written at the run's change of state.
    assert_eq!(rows[0].created_at, at(2));
    // Answered, it runs and ends: a second row, after the first.
    run.state = AgentState::Running;
    run.updated_at = at(4);
    commit_state(store, &run, &[]).await;
    run.state = AgentState::Completed;
    run.final_text = Some("done".into());
    run.updated_at = at(5);
    run.finished_at = Some(at(5));
    commit_state(store, &run, &[Message::assistant("done")]).await;
    let rows = store.pending_outbox("telegram", 10).await.unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows[0].id < rows[1].id);
    assert_eq!(rows[1].run_state.as_deref(), Some("completed"));
    // Another channel's outbox is its own.
    assert!(store.pending_outbox("slack", 10).await.unwrap().is_empty());

    // A conversation without a route writes nothing.
    let mut plain = run_record("run-b", "plain", at(1));
    plain.state = AgentState::Completed;
    commit_state(store, &plain, &[Message::user("x")]).await;
    assert_eq!(store.pending_outbox("telegram", 10).await.unwrap().len(), 2);
}

async fn delivery_on(store: &dyn DaemonStore) {
    for (n, body) in ["one", "two", "three"].iter().enumerate() {
        store
            .add_notice(&Notice {
                channel: "slack".into(),
                target: "C1".into(),
                session_id: String::new(),
                body: (*body).into(),
                at: at(n as i64),
            })
            .await
            .unwrap();
    }
    let rows = store.pending_outbox("slack", 10).await.unwrap();
    let bodies: Vec<_> = rows.iter().map(|r| r.body.clone().unwrap()).collect();
    assert_eq!(bodies, ["one", "two", "three"]);
    assert_eq!(store.pending_outbox("slack", 2).await.unwrap().len(), 2);
    let (one, two, three) = (rows[0].id, rows[1].id, rows[2].id);

    store
        .outbox_retry(one, "503 from slack", at(10))
        .await
        .unwrap();
    let item = store.outbox_item(one).await.unwrap().unwrap();
    assert_eq!(item.attempts, 1);
    assert_eq!(item.next_attempt_at, at(10));
    assert_eq!(item.last_error.as_deref(), Some("503 from slack"));
    let stats = store.outbox_stats("slack").await.unwrap();
    assert_eq!((stats.pending, stats.delivered, stats.failed), (3, 0, 0));
    assert_eq!(stats.oldest_pending_at, Some(at(0)));
    assert_eq!(stats.last_error.as_deref(), Some("503 from slack"));

    assert!(store.outbox_delivered(one, "ts-1", at(11)).await.unwrap());
    // Delivered once: a second mark is refused.
    assert!(!store.outbox_delivered(one, "ts-1b", at(12)).await.unwrap());
    let item = store.outbox_item(one).await.unwrap().unwrap();
    assert_eq!(item.receipt.as_deref(), Some("ts-1"));
    assert_eq!(item.delivered_at, Some(at(11)));
    assert_eq!(item.attempts, 2);

    store
        .outbox_failed(two, "channel_not_found", at(12))
        .await
        .unwrap();
    assert!(!store.outbox_delivered(two, "late", at(13)).await.unwrap());
    let pending = store.pending_outbox("slack", 10).await.unwrap();
    assert_eq!(pending.iter().map(|r| r.id).collect::<Vec<_>>(), [three]);
    let stats = store.outbox_stats("slack").await.unwrap();
    assert_eq!((stats.pending, stats.delivered, stats.failed), (1, 1, 1));
    assert_eq!(stats.oldest_pending_at, Some(at(2)));
    assert!(store.outbox_item(9_999).await.unwrap().is_none());
}

async fn state_on(store: &dyn DaemonStore) {
    assert_eq!(
        store.channel_state("telegram", "offset").await.unwrap(),
        None
    );
    store
        .set_channel_state("telegram", "offset", "17", at(0))
        .await
        .unwrap();
    store
        .set_channel_state("telegram", "offset", "18", at(1))
        .await
        .unwrap();
    store
        .set_channel_state("telegram", "last_error", "boom", at(1))
        .await
        .unwrap();
    store
        .set_channel_state("slack", "offset", "x", at(1))
        .await
        .unwrap();
    assert_eq!(
        store.channel_state("telegram", "offset").await.unwrap(),
        Some("18".into())
    );
    assert_eq!(
        store.channel_states("telegram").await.unwrap(),
        [
            ("last_error".to_string(), "boom".to_string()),
            ("offset".to_string(), "18".to_string())
        ]
    );

    let pairing = |code: &str| Pairing {
        code: code.into(),
        platform: "telegram".into(),
        platform_user_id: "777".into(),
        username: Some("eve".into()),
        created_at: at(0) + Duration::seconds(1),
    };
    store.save_pairing(&pairing("AAAA-1111")).await.unwrap();
    // A new code for the same sender replaces the old one.
    store.save_pairing(&pairing("BBBB-2222")).await.unwrap();
    assert_eq!(store.take_pairing("AAAA-1111").await.unwrap(), None);
    assert_eq!(
        store.pairing_of("telegram", "777").await.unwrap(),
        Some(pairing("BBBB-2222"))
    );
    assert_eq!(
        store.take_pairing("BBBB-2222").await.unwrap(),
        Some(pairing("BBBB-2222"))
    );
    // A code works once.
    assert_eq!(store.take_pairing("BBBB-2222").await.unwrap(), None);
    assert_eq!(store.pairing_of("telegram", "777").await.unwrap(), None);
}
