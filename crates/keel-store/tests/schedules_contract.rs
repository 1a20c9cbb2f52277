//! What schedules need of every daemon store (issue 34): schedules kept, listed, found due,
//! advanced once (compare-and-set), paused and resumed, deleted with their slots; a slot fires
//! once (its record written with the run's queue row; a slot recorded before, fired, missed or
//! refused, queues nothing); ended fires counted once, a schedule pausing itself after its
//! failures in a row. Run against SQLite (in memory and on a file), the memory store and
//! PostgreSQL (`KEEL_TEST_PG`), and two SQLite stores on one file (two daemons) enqueueing one
//! slot at once (two PostgreSQL workers: `postgres_races`).

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use keel_core::store::Commit;
use keel_core::{AgentState, ErrorReason};
use keel_platform::schedule::{
    CatchUp, Creator, Schedule, ScheduleFilter, ScheduleKind, ScheduleState, SlotKey, SlotOutcome,
    SlotRecord, failures_reason,
};
use keel_platform::{DaemonStore, EnqueueOutcome, NewConversation, QueuedRun, ScheduleStore};

mod common;
use common::{at, memory, postgres, run_record, sqlite_file, sqlite_in_memory};

macro_rules! schedule_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn schedules_are_kept_listed_found_due_advanced_once_and_deleted() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                schedules_on(&store).await;
            }

            #[tokio::test]
            async fn a_slot_fires_once_and_a_missed_slot_never_fires() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                slots_on(&store).await;
            }

            #[tokio::test]
            async fn ended_fires_are_counted_once_and_failures_pause_the_schedule() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                settle_on(&store).await;
            }
        }
    };
}

schedule_tests!(memory_store, memory());
schedule_tests!(sqlite_memory, sqlite_in_memory());
schedule_tests!(sqlite_on_file, sqlite_file());
schedule_tests!(postgres_store, postgres());

async fn conversation(store: &dyn DaemonStore, id: &str, owner: &str) {
    let made = store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: Some(owner.into()),
            lane_policy: Default::default(),
            at: at(0),
            place: None,
            trusted: true,
        })
        .await
        .unwrap();
    assert!(made.is_some());
}

fn schedule(id: &str, session: &str, owner: &str, created: i64) -> Schedule {
    Schedule {
        id: id.into(),
        session_id: session.into(),
        owner: Some(owner.into()),
        created_by: Creator::Operator,
        kind: ScheduleKind::Every,
        spec: "60s".into(),
        tz: None,
        text: "standup".into(),
        catch_up: CatchUp::Once,
        catch_up_cap: 10,
        state: ScheduleState::Active,
        paused_reason: None,
        next_slot: Some(at(10 + created)),
        failures: 0,
        max_failures: 3,
        created_at: at(created),
        updated_at: at(created),
    }
}

fn fire(run_id: &str, session: &str, schedule_id: &str, slot: DateTime<Utc>) -> QueuedRun {
    QueuedRun {
        run_id: run_id.into(),
        session_id: session.into(),
        user_id: Some("ann".into()),
        message: "standup".into(),
        enqueued_at: slot,
        provider: "mock".into(),
        model: "m".into(),
        options: Default::default(),
        inbound: None,
        slot: Some(SlotKey {
            schedule_id: schedule_id.into(),
            slot,
        }),
    }
}

fn filter(session: Option<&str>, owner: Option<&str>) -> ScheduleFilter {
    ScheduleFilter {
        session_id: session.map(Into::into),
        owner: owner.map(Into::into),
        limit: 50,
    }
}

fn ids(schedules: &[Schedule]) -> Vec<&str> {
    schedules.iter().map(|s| s.id.as_str()).collect()
}

async fn schedules_on(store: &dyn DaemonStore) {
    conversation(store, "c1", "ann").await;
    conversation(store, "c2", "bob").await;
    let first = schedule("s1", "c1", "ann", 1);
    store.create_schedule(&first).await.unwrap();
    store
        .create_schedule(&schedule("s2", "c1", "ann", 2))
        .await
        .unwrap();
    store
        .create_schedule(&schedule("s3", "c2", "bob", 3))
        .await
        .unwrap();
    // Kept as given; a second with the same id, or one for no conversation, is refused.
    assert_eq!(store.schedule("s1").await.unwrap(), Some(first.clone()));
    assert_eq!(store.schedule("nope").await.unwrap(), None);
    assert!(matches!(
        store.create_schedule(&first).await,
        Err(keel_core::StoreError::Conflict(_))
    ));
    assert!(matches!(
        store
            .create_schedule(&schedule("s9", "missing", "ann", 1))
            .await,
        Err(keel_core::StoreError::NotFound(_))
    ));
    // Listed newest first, by conversation or owner, at most `limit`.
    let all = store.list_schedules(&filter(None, None)).await.unwrap();
    assert_eq!(ids(&all), ["s3", "s2", "s1"]);
    let of_c1 = store
        .list_schedules(&filter(Some("c1"), None))
        .await
        .unwrap();
    assert_eq!(ids(&of_c1), ["s2", "s1"]);
    let of_bob = store
        .list_schedules(&filter(None, Some("bob")))
        .await
        .unwrap();
    assert_eq!(ids(&of_bob), ["s3"]);
    // A schedule in bob's conversation made at a group member's word is listed as bob's.
    store
        .create_schedule(&schedule("s4", "c2", "cid", 4))
        .await
        .unwrap();
    let of_bob = store
        .list_schedules(&filter(None, Some("bob")))
        .await
        .unwrap();
    assert_eq!(ids(&of_bob), ["s4", "s3"]);
    let of_cid = store
        .list_schedules(&filter(None, Some("cid")))
        .await
        .unwrap();
    assert!(of_cid.is_empty());
    assert!(store.delete_schedule("s4").await.unwrap());
    let one = ScheduleFilter {
        limit: 1,
        ..filter(None, None)
    };
    assert_eq!(ids(&store.list_schedules(&one).await.unwrap()), ["s3"]);

    // Due: active with a next slot at or before now, the earliest first.
    assert!(store.due_schedules(at(10)).await.unwrap().is_empty());
    assert_eq!(
        ids(&store.due_schedules(at(12)).await.unwrap()),
        ["s1", "s2"]
    );
    // Advanced once: the second daemon's compare-and-set finds the slot moved.
    assert!(
        store
            .advance_schedule("s1", Some(at(11)), Some(at(12)), at(11))
            .await
            .unwrap()
    );
    assert!(
        !store
            .advance_schedule("s1", Some(at(11)), Some(at(12)), at(11))
            .await
            .unwrap()
    );
    let advanced = store.schedule("s1").await.unwrap().unwrap();
    assert_eq!(advanced.next_slot, Some(at(12)));
    assert_eq!(advanced.updated_at, at(11));
    // No next slot: done, and never due again.
    assert!(
        store
            .advance_schedule("s2", Some(at(12)), None, at(12))
            .await
            .unwrap()
    );
    let done = store.schedule("s2").await.unwrap().unwrap();
    assert_eq!((done.state, done.next_slot), (ScheduleState::Done, None));
    assert_eq!(
        ids(&store.due_schedules(at(99)).await.unwrap()),
        ["s1", "s3"]
    );

    // Paused with a reason: not due, not advanced.
    assert!(
        store
            .set_schedule_state("s1", ScheduleState::Paused, Some("by ann"), None, at(13))
            .await
            .unwrap()
    );
    let paused = store.schedule("s1").await.unwrap().unwrap();
    assert_eq!(paused.state, ScheduleState::Paused);
    assert_eq!(paused.paused_reason.as_deref(), Some("by ann"));
    assert_eq!(paused.next_slot, Some(at(12)));
    assert_eq!(ids(&store.due_schedules(at(99)).await.unwrap()), ["s3"]);
    assert!(
        !store
            .advance_schedule("s1", Some(at(12)), Some(at(13)), at(13))
            .await
            .unwrap()
    );
    // Resumed from a new slot: the reason is gone.
    assert!(
        store
            .set_schedule_state("s1", ScheduleState::Active, Some("x"), Some(at(20)), at(14))
            .await
            .unwrap()
    );
    let resumed = store.schedule("s1").await.unwrap().unwrap();
    assert_eq!(resumed.state, ScheduleState::Active);
    assert_eq!(resumed.paused_reason, None);
    assert_eq!(resumed.next_slot, Some(at(20)));
    assert!(
        !store
            .set_schedule_state("nope", ScheduleState::Paused, None, None, at(14))
            .await
            .unwrap()
    );

    // Deleted with its slots' records: a slot of a new schedule of that id is new.
    let slot = SlotRecord {
        schedule_id: "s3".into(),
        slot: at(13),
        outcome: SlotOutcome::Missed,
        run_id: None,
        reason: None,
        at: at(14),
    };
    assert!(store.record_slot(&slot).await.unwrap());
    assert!(store.delete_schedule("s3").await.unwrap());
    assert!(!store.delete_schedule("s3").await.unwrap());
    assert_eq!(store.schedule("s3").await.unwrap(), None);
    assert!(store.slots("s3", 10).await.unwrap().is_empty());
    assert!(store.record_slot(&slot).await.unwrap());
}

async fn slots_on(store: &dyn DaemonStore) {
    conversation(store, "c1", "ann").await;
    store
        .create_schedule(&schedule("s1", "c1", "ann", 1))
        .await
        .unwrap();
    // A fire queues its run and records its slot with it.
    let queued = store
        .enqueue_run(&fire("r1", "c1", "s1", at(11)), 16)
        .await
        .unwrap();
    assert_eq!(queued, EnqueueOutcome::Queued { ahead: 0 });
    // The same slot again (another daemon, a restart): nothing is queued.
    let again = store
        .enqueue_run(&fire("r2", "c1", "s1", at(11)), 16)
        .await
        .unwrap();
    assert_eq!(
        again,
        EnqueueOutcome::Duplicate {
            run_id: "r1".into()
        }
    );
    assert!(store.run("r2").await.unwrap().is_none());
    assert_eq!(store.queued_runs("c1").await.unwrap().len(), 1);
    // A fire cannot be recorded over.
    let missed = |minutes| SlotRecord {
        schedule_id: "s1".into(),
        slot: at(minutes),
        outcome: SlotOutcome::Missed,
        run_id: None,
        reason: Some("the daemon was down".into()),
        at: at(20),
    };
    assert!(!store.record_slot(&missed(11)).await.unwrap());
    // A missed slot, or a refused one, never fires after.
    assert!(store.record_slot(&missed(12)).await.unwrap());
    assert!(!store.record_slot(&missed(12)).await.unwrap());
    let late = store
        .enqueue_run(&fire("r3", "c1", "s1", at(12)), 16)
        .await
        .unwrap();
    assert_eq!(late, EnqueueOutcome::Duplicate { run_id: "".into() });
    let refused = SlotRecord {
        outcome: SlotOutcome::Refused,
        reason: Some("over the monthly budget".into()),
        ..missed(13)
    };
    assert!(store.record_slot(&refused).await.unwrap());
    // A full lane refuses the fire without recording it: it may fire when there is room.
    let full = store
        .enqueue_run(&fire("r4", "c1", "s1", at(14)), 1)
        .await
        .unwrap();
    assert_eq!(full, EnqueueOutcome::Full { queued: 1 });
    // Listed newest first, the fire with its run's state.
    let slots = store.slots("s1", 10).await.unwrap();
    let seen: Vec<_> = slots
        .iter()
        .map(|s| (s.record.slot, s.record.outcome, s.run_state))
        .collect();
    assert_eq!(
        seen,
        [
            (at(13), SlotOutcome::Refused, None),
            (at(12), SlotOutcome::Missed, None),
            (at(11), SlotOutcome::Fired, Some(AgentState::Queued)),
        ]
    );
    assert_eq!(
        slots[0].record.reason.as_deref(),
        Some("over the monthly budget")
    );
    assert_eq!(slots[2].record.run_id.as_deref(), Some("r1"));
    assert_eq!(store.slots("s1", 1).await.unwrap().len(), 1);
}

/// Ends queued run `run_id` of `session` in `state` at `minutes`.
async fn end(
    store: &dyn DaemonStore,
    run_id: &str,
    session: &str,
    state: AgentState,
    minutes: i64,
) {
    let mut run = run_record(run_id, session, at(minutes));
    run.state = state;
    run.finished_at = Some(at(minutes));
    if state == AgentState::Error {
        run.reason = Some(ErrorReason::ProviderFatal);
        run.error = Some("the provider said no".into());
    }
    store.commit(&Commit::new(&run, &[])).await.unwrap();
}

async fn settle_on(store: &dyn DaemonStore) {
    conversation(store, "c1", "ann").await;
    store
        .create_schedule(&schedule("s1", "c1", "ann", 1))
        .await
        .unwrap();
    for (i, run) in ["r1", "r2", "r3", "r4"].iter().enumerate() {
        let slot = at(11 + i as i64);
        let queued = store.enqueue_run(&fire(run, "c1", "s1", slot), 16).await;
        assert!(matches!(queued, Ok(EnqueueOutcome::Queued { .. })));
    }
    // Runs still going are not counted.
    assert!(store.unsettled_fires().await.unwrap().is_empty());
    end(store, "r1", "c1", AgentState::Error, 20).await;
    end(store, "r2", "c1", AgentState::Error, 21).await;
    let ended = store.unsettled_fires().await.unwrap();
    let seen: Vec<_> = ended
        .iter()
        .map(|e| (e.run_id.as_str(), e.run_state))
        .collect();
    assert_eq!(seen, [("r1", AgentState::Error), ("r2", AgentState::Error)]);
    assert_eq!(ended[0].key.slot, at(11));
    assert_eq!(ended[0].reason.as_deref(), Some("the provider said no"));

    // Counted once: the second daemon's settle finds it done.
    let first = store
        .settle_fire(&ended[0].key, Some("the provider said no"), at(22))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((first.schedule.failures, first.paused_now), (1, false));
    assert_eq!(
        store
            .settle_fire(&ended[0].key, Some("again"), at(22))
            .await
            .unwrap(),
        None
    );
    let second = store
        .settle_fire(&ended[1].key, Some("the provider said no"), at(23))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((second.schedule.failures, second.paused_now), (2, false));
    // A success forgets the failures in a row.
    end(store, "r3", "c1", AgentState::Completed, 24).await;
    let ended = store.unsettled_fires().await.unwrap();
    assert_eq!(ended.len(), 1);
    let third = store
        .settle_fire(&ended[0].key, None, at(25))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((third.schedule.failures, third.paused_now), (0, false));
    assert!(store.unsettled_fires().await.unwrap().is_empty());
    // The failed fires are listed failed, with their reason.
    let slots = store.slots("s1", 10).await.unwrap();
    let outcomes: Vec<_> = slots.iter().map(|s| s.record.outcome).collect();
    use SlotOutcome::{Failed, Fired};
    assert_eq!(outcomes, [Fired, Fired, Failed, Failed]);
    assert_eq!(
        slots[3].record.reason.as_deref(),
        Some("the provider said no")
    );

    // At max_failures in a row the schedule pauses itself, once, and says why.
    let mut s = store.schedule("s1").await.unwrap().unwrap();
    s.max_failures = 1;
    store.delete_schedule("s1").await.unwrap();
    s.id = "s2".into();
    store.create_schedule(&s).await.unwrap();
    let key = SlotKey {
        schedule_id: "s2".into(),
        slot: at(30),
    };
    let queued = store.enqueue_run(&fire("r5", "c1", "s2", at(30)), 16).await;
    assert!(matches!(queued, Ok(EnqueueOutcome::Queued { .. })));
    end(store, "r5", "c1", AgentState::TimedOut, 31).await;
    let settled = store
        .settle_fire(&key, Some("timed out"), at(32))
        .await
        .unwrap()
        .unwrap();
    assert!(settled.paused_now);
    assert_eq!(settled.schedule.state, ScheduleState::Paused);
    assert_eq!(
        settled.schedule.paused_reason.as_deref(),
        Some(failures_reason(1, "timed out").as_str())
    );
    assert_eq!(settled.schedule.updated_at, at(32));
}

/// Two daemons (two stores on one file) enqueue one slot 50 times at once: one run is queued,
/// every other attempt is told it is a duplicate of that run.
#[tokio::test]
async fn two_daemons_fire_one_slot_once_under_fifty_concurrent_enqueues() {
    let (first, dir) = sqlite_file().await;
    let second = keel_store::SqliteStore::open(&dir.path().join("keel.db"))
        .await
        .unwrap();
    conversation(&first, "c1", "ann").await;
    first
        .create_schedule(&schedule("s1", "c1", "ann", 1))
        .await
        .unwrap();
    let stores: [Arc<dyn DaemonStore>; 2] = [Arc::new(first), Arc::new(second)];
    let slot = at(11) + Duration::seconds(0);
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let store = Arc::clone(&stores[i % 2]);
            tokio::spawn(async move {
                store
                    .enqueue_run(&fire(&format!("r{i}"), "c1", "s1", slot), 100)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut queued = Vec::new();
    let mut duplicates = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            EnqueueOutcome::Queued { .. } => queued.push(()),
            EnqueueOutcome::Duplicate { run_id } => duplicates.push(run_id),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(queued.len(), 1);
    assert_eq!(duplicates.len(), 49);
    let runs = stores[1].queued_runs("c1").await.unwrap();
    assert_eq!(runs.len(), 1);
    assert!(duplicates.iter().all(|id| *id == runs[0].run_id));
    let slots = stores[0].slots("s1", 10).await.unwrap();
    assert_eq!(slots.len(), 1);
    assert_eq!(
        slots[0].record.run_id.as_deref(),
        Some(runs[0].run_id.as_str())
    );
}
