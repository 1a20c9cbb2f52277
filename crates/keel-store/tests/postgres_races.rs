//! Two `keel serve` workers on one PostgreSQL database (two stores on one schema), racing for
//! the same thing at the same moment: a schedule's slot (recorded, or enqueued as a run with
//! its `SlotKey`), a channel's event (recorded, or enqueued with its `InboundKey`), a schedule
//! advanced by two ticks, a fire settled twice, and the outbox read by two couriers. Exactly one
//! wins each race, the other is told so (`Duplicate`, `false`, nothing taken); no outbox item
//! is taken by both, and a target's items go out in order. `KEEL_TEST_PG` names the database
//! (`skip` skips).

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use keel_platform::schedule::{
    CatchUp, Creator, Schedule, ScheduleKind, ScheduleState, SlotKey, SlotOutcome, SlotRecord,
};
use keel_platform::{
    ChannelStore, ConversationStore, EnqueueOutcome, InboundKey, NewConversation, Notice,
    QueuedRun, ScheduleStore,
};
use keel_store::PgStore;
use sqlx::postgres::PgConnectOptions;
use tokio::sync::Barrier;

mod common;
use common::at;

/// How many attempts race in each test.
const RACERS: usize = 40;

/// Two workers' stores on one fresh schema (`None` when skipped).
async fn two_workers() -> Option<[Arc<PgStore>; 2]> {
    let (_, url) = keel_store::postgres::testing::fresh_schema().await?;
    let options = PgConnectOptions::from_str(&url).unwrap();
    let first = PgStore::open_with(options.clone(), 8).await.unwrap();
    let second = PgStore::open_with(options, 8).await.unwrap();
    Some([Arc::new(first), Arc::new(second)])
}

/// Runs `RACERS` attempts at once, alternating between the workers, each released by one
/// barrier; their answers, in attempt order.
async fn race<T, F, Fut>(workers: &[Arc<PgStore>; 2], attempt: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(Arc<PgStore>, usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(RACERS));
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let barrier = Arc::clone(&barrier);
            let attempt = attempt(Arc::clone(&workers[i % 2]), i);
            tokio::spawn(async move {
                barrier.wait().await;
                attempt.await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

/// A conversation, created through the store.
async fn conversation(store: &PgStore, id: &str) {
    let made = store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: Some("ann".into()),
            lane_policy: Default::default(),
            at: at(0),
            place: None,
            trusted: true,
        })
        .await
        .unwrap();
    assert!(made.is_some());
}

/// A session row written directly (for the races that need nothing else of it).
async fn bare_session(store: &PgStore, id: &str) {
    sqlx::query("INSERT INTO sessions (id, created_at, updated_at) VALUES ($1, $2, $2)")
        .bind(id)
        .bind("2025-03-01T12:00:00.000000017Z")
        .execute(store.pool())
        .await
        .unwrap();
}

fn schedule(id: &str, session: &str) -> Schedule {
    Schedule {
        id: id.into(),
        session_id: session.into(),
        owner: Some("ann".into()),
        created_by: Creator::Operator,
        kind: ScheduleKind::Every,
        spec: "60s".into(),
        tz: None,
        text: "standup".into(),
        catch_up: CatchUp::Once,
        catch_up_cap: 10,
        state: ScheduleState::Active,
        paused_reason: None,
        next_slot: Some(at(11)),
        failures: 0,
        max_failures: 3,
        created_at: at(1),
        updated_at: at(1),
    }
}

fn queued(run_id: &str, inbound: Option<InboundKey>, slot: Option<SlotKey>) -> QueuedRun {
    QueuedRun {
        run_id: run_id.into(),
        session_id: "c1".into(),
        user_id: Some("ann".into()),
        message: "standup".into(),
        enqueued_at: at(11),
        provider: "mock".into(),
        model: "m".into(),
        options: Default::default(),
        inbound,
        slot,
    }
}

/// The one run queued, checked against every duplicate's answer.
fn one_queued(outcomes: &[EnqueueOutcome]) -> Vec<String> {
    let queued = outcomes
        .iter()
        .filter(|o| matches!(o, EnqueueOutcome::Queued { .. }))
        .count();
    assert_eq!(queued, 1, "{outcomes:?}");
    outcomes
        .iter()
        .filter_map(|o| match o {
            EnqueueOutcome::Queued { .. } => None,
            EnqueueOutcome::Duplicate { run_id } => Some(run_id.clone()),
            other => panic!("{other:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slot_recorded_by_two_workers_at_once_is_recorded_once() {
    let Some(workers) = two_workers().await else {
        return;
    };
    let recorded = race(&workers, |store, i| async move {
        let record = SlotRecord {
            schedule_id: "s1".into(),
            slot: at(11),
            outcome: SlotOutcome::Fired,
            run_id: Some(format!("r{i}")),
            reason: None,
            at: at(11),
        };
        store.record_slot(&record).await.unwrap()
    })
    .await;
    assert_eq!(recorded.iter().filter(|won| **won).count(), 1);
    let winner = recorded.iter().position(|won| *won).unwrap();
    for store in &workers {
        let slots = store.slots("s1", 10).await.unwrap();
        assert_eq!(slots.len(), 1);
        assert_eq!(slots[0].record.run_id, Some(format!("r{winner}")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_event_recorded_by_two_workers_at_once_is_recorded_once() {
    let Some(workers) = two_workers().await else {
        return;
    };
    let key = InboundKey::new("telegram", "cb-9");
    let recorded = race(&workers, |store, i| {
        let key = key.clone();
        async move {
            store
                .record_inbound(&key, &format!("r{i}"), at(2))
                .await
                .unwrap()
        }
    })
    .await;
    assert_eq!(recorded.iter().filter(|won| **won).count(), 1);
    let winner = recorded.iter().position(|won| *won).unwrap();
    for store in &workers {
        assert_eq!(
            store.inbound_run(&key).await.unwrap(),
            Some(format!("r{winner}"))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_ticking_at_once_advance_a_schedule_once() {
    let Some(workers) = two_workers().await else {
        return;
    };
    bare_session(&workers[0], "c1").await;
    workers[0]
        .create_schedule(&schedule("s1", "c1"))
        .await
        .unwrap();
    // Both find it due, and both try to move it on.
    for store in &workers {
        let due = store.due_schedules(at(12)).await.unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].next_slot, Some(at(11)));
    }
    let advanced = race(&workers, |store, _| async move {
        store
            .advance_schedule("s1", Some(at(11)), Some(at(12)), at(11))
            .await
            .unwrap()
    })
    .await;
    assert_eq!(advanced.iter().filter(|won| **won).count(), 1);
    let schedule = workers[1].schedule("s1").await.unwrap().unwrap();
    assert_eq!(schedule.next_slot, Some(at(12)));
    assert!(workers[1].due_schedules(at(11)).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_enqueueing_one_slot_at_once_queue_one_run() {
    let Some(workers) = two_workers().await else {
        return;
    };
    conversation(&workers[0], "c1").await;
    workers[0]
        .create_schedule(&schedule("s1", "c1"))
        .await
        .unwrap();
    let key = SlotKey {
        schedule_id: "s1".into(),
        slot: at(11),
    };
    let outcomes = race(&workers, |store, i| {
        let run = queued(&format!("r{i}"), None, Some(key.clone()));
        async move { store.enqueue_run(&run, 100).await.unwrap() }
    })
    .await;
    let duplicates = one_queued(&outcomes);
    let runs = workers[1].queued_runs("c1").await.unwrap();
    assert_eq!(runs.len(), 1);
    assert!(duplicates.iter().all(|id| *id == runs[0].run_id));
    let slots = workers[0].slots("s1", 10).await.unwrap();
    assert_eq!(slots.len(), 1);
    assert_eq!(slots[0].record.run_id.as_ref(), Some(&runs[0].run_id));
    // The slot is taken: recording it again changes nothing.
    let again = SlotRecord {
        schedule_id: "s1".into(),
        slot: at(11),
        outcome: SlotOutcome::Missed,
        run_id: None,
        reason: None,
        at: at(12),
    };
    assert!(!workers[1].record_slot(&again).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_enqueueing_one_event_at_once_queue_one_run() {
    let Some(workers) = two_workers().await else {
        return;
    };
    conversation(&workers[0], "c1").await;
    let key = InboundKey::new("telegram", "1001");
    let outcomes = race(&workers, |store, i| {
        let run = queued(&format!("r{i}"), Some(key.clone()), None);
        async move { store.enqueue_run(&run, 100).await.unwrap() }
    })
    .await;
    let duplicates = one_queued(&outcomes);
    let runs = workers[0].queued_runs("c1").await.unwrap();
    assert_eq!(runs.len(), 1);
    assert!(duplicates.iter().all(|id| *id == runs[0].run_id));
    for store in &workers {
        assert_eq!(
            store.inbound_run(&key).await.unwrap().as_ref(),
            Some(&runs[0].run_id)
        );
    }
}

/// Notices for `targets` targets of channel `slack`, `per_target` each, interleaved.
async fn notices(store: &PgStore, targets: usize, per_target: usize) {
    for n in 0..per_target {
        for t in 0..targets {
            store
                .add_notice(&Notice {
                    channel: "slack".into(),
                    target: format!("C{t}"),
                    session_id: String::new(),
                    body: format!("{t}/{n}"),
                    at: at(n as i64),
                })
                .await
                .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_reading_the_outbox_at_once_never_take_one_item() {
    let Some(workers) = two_workers().await else {
        return;
    };
    notices(&workers[0], 6, 5).await;
    // Every read at once, with a small limit: what one worker took, the other never gets.
    let taken = race(&workers, |store, i| async move {
        let items = store.pending_outbox("slack", 4).await.unwrap();
        (i % 2, items)
    })
    .await;
    let mut by_worker: [BTreeSet<i64>; 2] = Default::default();
    let mut targets: [BTreeSet<String>; 2] = Default::default();
    for (worker, items) in &taken {
        assert!(items.len() <= 4);
        assert!(items.windows(2).all(|w| w[0].id < w[1].id), "oldest first");
        for item in items {
            by_worker[*worker].insert(item.id);
            targets[*worker].insert(item.target.clone());
        }
    }
    assert!(by_worker[0].is_disjoint(&by_worker[1]), "{by_worker:?}");
    assert!(targets[0].is_disjoint(&targets[1]), "{targets:?}");
    // A worker reading again gets its own items again.
    for (worker, store) in workers.iter().enumerate() {
        let again: BTreeSet<i64> = store
            .pending_outbox("slack", 1_000)
            .await
            .unwrap()
            .iter()
            .map(|item| item.id)
            .collect();
        assert!(by_worker[worker].is_subset(&again));
        assert!(again.is_disjoint(&by_worker[1 - worker]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_couriers_deliver_each_item_once_and_each_target_in_order() {
    let Some(workers) = two_workers().await else {
        return;
    };
    notices(&workers[0], 5, 8).await;
    let sent: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
    let couriers: Vec<_> = workers
        .iter()
        .map(|store| {
            let (store, sent) = (Arc::clone(store), Arc::clone(&sent));
            tokio::spawn(async move {
                let mut delivered = 0;
                loop {
                    // A small limit: targets change hands between the couriers as they empty.
                    let items = store.pending_outbox("slack", 3).await.unwrap();
                    if items.is_empty() {
                        let stats = store.outbox_stats("slack").await.unwrap();
                        if stats.pending == 0 {
                            return delivered;
                        }
                        tokio::task::yield_now().await;
                        continue;
                    }
                    for item in items {
                        sent.lock().unwrap().push((item.target.clone(), item.id));
                        let receipt = format!("ts-{}", item.id);
                        assert!(
                            store
                                .outbox_delivered(item.id, &receipt, at(20))
                                .await
                                .unwrap(),
                            "item {} was delivered by the other courier",
                            item.id
                        );
                        delivered += 1;
                    }
                }
            })
        })
        .collect();
    let mut total = 0;
    for courier in couriers {
        total += courier.await.unwrap();
    }
    assert_eq!(total, 40);
    let sent = sent.lock().unwrap().clone();
    let mut by_target: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (target, id) in sent.iter() {
        by_target.entry(target).or_default().push(*id);
    }
    assert_eq!(by_target.len(), 5);
    for (target, ids) in by_target {
        assert_eq!(ids.len(), 8, "{target}: {ids:?}");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{target}: {ids:?}");
    }
    let stats = workers[1].outbox_stats("slack").await.unwrap();
    assert_eq!((stats.pending, stats.delivered), (0, 40));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_workers_items_go_to_another_once_its_time_is_up() {
    let Some(workers) = two_workers().await else {
        return;
    };
    notices(&workers[0], 1, 3).await;
    let held = workers[0].pending_outbox("slack", 10).await.unwrap();
    assert_eq!(held.len(), 3);
    // The first worker holds the target: a new item of it waits for the same worker.
    notices(&workers[0], 1, 1).await;
    assert!(
        workers[1]
            .pending_outbox("slack", 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A retry keeps the item its taker's.
    workers[0]
        .outbox_retry(held[0].id, "503", at(30))
        .await
        .unwrap();
    assert!(
        workers[1]
            .pending_outbox("slack", 10)
            .await
            .unwrap()
            .is_empty()
    );
    // The first worker dies: once its time is up (made so here), the other takes everything,
    // oldest first, and the dead worker's late mark of an item it still had is refused.
    sqlx::query("UPDATE outbox SET taken_until = now() - interval '1 second'")
        .execute(workers[0].pool())
        .await
        .unwrap();
    let taken = workers[1].pending_outbox("slack", 10).await.unwrap();
    assert_eq!(taken.len(), 4);
    assert_eq!(taken[0].id, held[0].id);
    assert_eq!(taken[0].attempts, 1);
    assert!(
        workers[1]
            .outbox_delivered(taken[0].id, "b", at(31))
            .await
            .unwrap()
    );
    assert!(
        !workers[0]
            .outbox_delivered(held[0].id, "a", at(32))
            .await
            .unwrap()
    );
    assert!(
        workers[0]
            .pending_outbox("slack", 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// When one worker settles a fire, a second settling it at once counts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fire_settled_by_two_workers_at_once_is_counted_once() {
    let Some(workers) = two_workers().await else {
        return;
    };
    bare_session(&workers[0], "c1").await;
    workers[0]
        .create_schedule(&schedule("s1", "c1"))
        .await
        .unwrap();
    let slot: DateTime<Utc> = at(11);
    let record = SlotRecord {
        schedule_id: "s1".into(),
        slot,
        outcome: SlotOutcome::Fired,
        run_id: Some("r1".into()),
        reason: None,
        at: slot,
    };
    assert!(workers[0].record_slot(&record).await.unwrap());
    let key = SlotKey {
        schedule_id: "s1".into(),
        slot,
    };
    let settled = race(&workers, |store, _| {
        let key = key.clone();
        async move {
            store
                .settle_fire(&key, Some("the provider said no"), at(12))
                .await
                .unwrap()
        }
    })
    .await;
    assert_eq!(settled.iter().filter(|s| s.is_some()).count(), 1);
    let schedule = workers[1].schedule("s1").await.unwrap().unwrap();
    assert_eq!(schedule.failures, 1);
    assert_eq!(schedule.state, ScheduleState::Active);
}
