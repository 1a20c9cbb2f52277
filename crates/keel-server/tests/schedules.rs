//! The daemon's side of a schedule's fire (`keel_server::scheduler::ServerFire`), through the
//! real engine on `MemoryStore`: a due slot becomes a run of the schedule's owner in its
//! conversation that runs to its answer and is counted a success; an owner over the monthly
//! budget gets the slot recorded `refused` with the reason and no run; a routed conversation
//! is told through its outbox.

mod common;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use keel_core::clock::Clock;
use keel_core::lane::LanePolicy;
use keel_core::store::{Store, UserRecord};
use keel_core::{AgentState, Permission};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_platform::conversation::NewConversation;
use keel_platform::schedule::{DEFAULT_CATCH_UP_CAP, DEFAULT_MAX_FAILURES};
use keel_platform::{
    CatchUp, ChannelStore, ConversationStore, Creator, DeliveryRoute, Schedule, ScheduleKind,
    ScheduleState, ScheduleStore, SlotOutcome,
};
use keel_schedules::scheduler::SchedulerOptions;
use keel_schedules::{Fire, Scheduler};
use keel_server::engine::EngineOptions;
use keel_server::scheduler::ServerFire;

struct At(DateTime<Utc>);

impl Clock for At {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

fn at(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

async fn daemon(budget: Option<u64>) -> (keel_server::AppState, Arc<keel_store::MemoryStore>) {
    daemon_with(budget, LanePolicy::Queue, Step::text("Reminded.")).await
}

async fn daemon_with(
    budget: Option<u64>,
    policy: LanePolicy,
    answer: Step,
) -> (keel_server::AppState, Arc<keel_store::MemoryStore>) {
    let (state, store) = common::state_with(EngineOptions::default(), |builder| {
        builder
            .provider(Arc::new(ScriptedProvider::new(
                Script::new(vec![answer]).with_per_turn(),
            )))
            .model("m")
    })
    .await;
    let now = Utc::now();
    store
        .save_user(&UserRecord {
            id: "ann".into(),
            monthly_token_budget: budget,
            created_at: now,
            updated_at: now,
            permission: Permission::User,
        })
        .await
        .unwrap();
    store
        .create_conversation(&NewConversation {
            id: "c1".into(),
            owner: Some("ann".into()),
            lane_policy: policy,
            at: now,
            place: None,
            trusted: true,
        })
        .await
        .unwrap();
    let slot = Utc::now()
        .date_naive()
        .and_hms_opt(12, 0, 0)
        .unwrap()
        .and_utc();
    store
        .create_schedule(&Schedule {
            id: "s1".into(),
            session_id: "c1".into(),
            owner: Some("ann".into()),
            created_by: Creator::Operator,
            kind: ScheduleKind::Every,
            spec: "3600".into(),
            tz: None,
            text: "water the plants at {time}".into(),
            catch_up: CatchUp::Skip,
            catch_up_cap: DEFAULT_CATCH_UP_CAP,
            state: ScheduleState::Active,
            paused_reason: None,
            next_slot: Some(slot),
            failures: 0,
            max_failures: DEFAULT_MAX_FAILURES,
            created_at: now,
            updated_at: now,
        })
        .await
        .unwrap();
    (state, store)
}

fn scheduler(state: &keel_server::AppState, now: DateTime<Utc>) -> Scheduler {
    let clock: Arc<dyn Clock> = Arc::new(At(now));
    Scheduler::new(
        state.store.clone(),
        Arc::new(ServerFire::new(state, clock.clone())),
        clock,
        SchedulerOptions::default(),
    )
}

fn noon() -> DateTime<Utc> {
    Utc::now()
        .date_naive()
        .and_hms_opt(12, 0, 0)
        .unwrap()
        .and_utc()
}

#[tokio::test]
async fn a_due_slot_runs_as_its_owners_message_and_counts_as_a_success() {
    let (state, store) = daemon(None).await;
    let mut following = state.hub.follow_conversation("c1");
    let report = scheduler(&state, noon()).tick().await.unwrap();
    assert_eq!(report.fired, 1);
    let slots = store.slots("s1", 10).await.unwrap();
    assert_eq!(slots[0].record.outcome, SlotOutcome::Fired);
    let run_id = slots[0].record.run_id.clone().unwrap();
    let done = state.engine.wait(&run_id).await.unwrap();
    assert_eq!(done.state, AgentState::Completed);
    // The run's stream told it was the schedule's fire (after the lane said it was queued).
    let mut names = Vec::new();
    let fired = loop {
        let frame = following.recv().await.unwrap();
        names.push(frame.name);
        if frame.name == "schedule.fired" {
            break frame;
        }
        assert!(names.len() < 50, "no schedule.fired in {names:?}");
    };
    assert_eq!(fired.run_id, run_id);
    assert!(
        fired.data.contains("\"schedule_id\":\"s1\""),
        "{}",
        fired.data
    );
    let run = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(run.session_id, "c1");
    let messages = store.messages("c1").await.unwrap();
    let first = serde_json::to_string(&messages[0].message).unwrap();
    assert!(first.contains("water the plants at 12:00"), "{first}");
    // The next tick counts it: a success.
    let report = scheduler(&state, noon()).tick().await.unwrap();
    assert_eq!((report.fired, report.settled), (0, 1));
    let schedule = store.schedule("s1").await.unwrap().unwrap();
    assert_eq!(schedule.failures, 0);
    assert_eq!(
        schedule.next_slot,
        Some(noon() + chrono::Duration::hours(1))
    );
}

#[tokio::test]
async fn an_owner_over_budget_gets_the_slot_refused_with_the_reason() {
    let (state, store) = daemon(Some(0)).await;
    let report = scheduler(&state, noon()).tick().await.unwrap();
    assert_eq!((report.fired, report.refused), (0, 1));
    let slots = store.slots("s1", 10).await.unwrap();
    assert_eq!(slots[0].record.outcome, SlotOutcome::Refused);
    let reason = slots[0].record.reason.clone().unwrap();
    assert!(
        reason.contains("user `ann` has used 0 of their 0 tokens"),
        "{reason}"
    );
    assert!(store.queued_runs("c1").await.unwrap().is_empty());
    assert!(store.messages("c1").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_routed_conversation_is_told_through_its_outbox() {
    let (state, store) = daemon(None).await;
    let fire = ServerFire::new(&state, Arc::new(At(at("2026-11-29T12:00:00Z"))));
    let schedule = store.schedule("s1").await.unwrap().unwrap();
    // Without a route nobody is told.
    fire.tell(&schedule, "paused").await;
    assert!(
        store
            .pending_outbox("telegram", 10)
            .await
            .unwrap()
            .is_empty()
    );
    store
        .set_delivery(
            "c1",
            &DeliveryRoute {
                channel: "telegram".into(),
                target: "{\"chat\":1}".into(),
            },
        )
        .await
        .unwrap();
    fire.tell(&schedule, "Schedule s1 is paused").await;
    let pending = store.pending_outbox("telegram", 10).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert!(
        pending[0]
            .body
            .as_deref()
            .unwrap()
            .contains("Schedule s1 is paused"),
        "{pending:?}"
    );
}

/// A daemon's state on its own pool of the SQLite file at `path`: two of them are two daemons
/// on one store.
async fn daemon_on(path: &std::path::Path, worker: &str) -> keel_server::AppState {
    use keel_core::Agent;
    use keel_server::engine::Engine;
    use keel_server::hub::Hub;
    let store: Arc<dyn keel_platform::DaemonStore> =
        Arc::new(keel_store::SqliteStore::open(path).await.unwrap());
    let hub = Arc::new(Hub::new(store.clone()));
    let engine = Engine::new(
        store.clone(),
        hub.clone(),
        EngineOptions {
            worker: worker.into(),
            queue_limit: 1000,
            ..EngineOptions::default()
        },
    );
    let agent = Agent::builder()
        .store(store.clone())
        .event_sink(hub.clone())
        .event_sink(engine.sink())
        .provider(Arc::new(ScriptedProvider::new(
            Script::new(vec![Step::text("ok")]).with_per_turn(),
        )))
        .model("m")
        .build()
        .unwrap();
    engine.start(Arc::new(agent)).await.unwrap();
    keel_server::AppState {
        store: store.clone(),
        engine,
        hub,
        max_request_bytes: 64 * 1024,
        inbox: Arc::new(keel_platform::Inbox::new(
            store,
            keel_platform::InboxSettings::default(),
        )),
        modules: Vec::new().into(),
    }
}

/// A clock both daemons read, moved by the test.
struct Shared(std::sync::Mutex<DateTime<Utc>>);

impl Clock for Shared {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_daemons_on_one_sqlite_file_fire_each_of_50_slots_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let one = daemon_on(&path, "daemon-1").await;
    let two = daemon_on(&path, "daemon-2").await;
    let start = noon();
    let now = Utc::now();
    one.store
        .create_conversation(&NewConversation {
            id: "c1".into(),
            owner: None,
            lane_policy: LanePolicy::Queue,
            at: now,
            place: None,
            trusted: true,
        })
        .await
        .unwrap();
    let mut schedule = one_schedule(start);
    schedule.spec = "60".into();
    schedule.owner = None;
    one.store.create_schedule(&schedule).await.unwrap();
    let clock = Arc::new(Shared(std::sync::Mutex::new(start)));
    let scheduler = |state: &keel_server::AppState| {
        let clock: Arc<dyn Clock> = clock.clone();
        Scheduler::new(
            state.store.clone(),
            Arc::new(ServerFire::new(state, clock.clone())),
            clock,
            SchedulerOptions::default(),
        )
    };
    let (first, second) = (scheduler(&one), scheduler(&two));
    let mut fired = 0;
    for minute in 0..50 {
        *clock.0.lock().unwrap() = start + chrono::Duration::minutes(minute);
        let (a, b) = tokio::join!(first.tick(), second.tick());
        fired += a.unwrap().fired + b.unwrap().fired;
    }
    assert_eq!(fired, 50, "each slot fired by one daemon");
    let slots = one.store.slots("s1", 100).await.unwrap();
    assert_eq!(slots.len(), 50);
    assert!(slots.iter().all(|s| s.record.outcome == SlotOutcome::Fired));
    let runs = one
        .store
        .find_runs(&keel_platform::RunFilter {
            session_id: Some("c1".into()),
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        runs.len(),
        50,
        "one run per slot, whichever daemon queued it"
    );
}

fn one_schedule(slot: DateTime<Utc>) -> Schedule {
    let now = Utc::now();
    Schedule {
        id: "s1".into(),
        session_id: "c1".into(),
        owner: Some("ann".into()),
        created_by: Creator::Operator,
        kind: ScheduleKind::Every,
        spec: "3600".into(),
        tz: None,
        text: "tick {time}".into(),
        catch_up: CatchUp::All,
        catch_up_cap: DEFAULT_CATCH_UP_CAP,
        state: ScheduleState::Active,
        paused_reason: None,
        next_slot: Some(slot),
        failures: 0,
        max_failures: DEFAULT_MAX_FAILURES,
        created_at: now,
        updated_at: now,
    }
}

#[tokio::test]
async fn a_fire_queues_behind_the_running_run_even_where_messages_interrupt() {
    let slow = Step::text("Working on it.").with_delay_ms(200);
    let (state, store) = daemon_with(None, LanePolicy::Interrupt, slow).await;
    let conversation = store.session("c1").await.unwrap().unwrap();
    let asked = state
        .engine
        .submit(&conversation, "a long question".into(), Some("ann".into()))
        .await
        .unwrap();
    scheduler(&state, noon()).tick().await.unwrap();
    let fired = store.slots("s1", 1).await.unwrap()[0]
        .record
        .run_id
        .clone()
        .unwrap();
    let asked = state.engine.wait(&asked.run_id).await.unwrap();
    assert_eq!(asked.state, AgentState::Completed, "the fire cancelled it");
    let fired = state.engine.wait(&fired).await.unwrap();
    assert_eq!(fired.state, AgentState::Completed);
}
