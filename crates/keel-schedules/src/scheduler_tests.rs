use std::sync::Mutex;

use chrono::Duration as Span;
use keel_core::lane::LanePolicy;
use keel_platform::conversation::NewConversation;
use keel_platform::schedule::{DEFAULT_CATCH_UP_CAP, DEFAULT_MAX_FAILURES};
use keel_platform::{CatchUp, Creator, EnqueueOutcome, QueuedRun, ScheduleKind};
use keel_store::{MemoryStore, SqliteStore};

use super::*;

/// A clock the test moves.
pub(crate) struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub(crate) fn at(text: &str) -> Arc<Self> {
        Arc::new(ManualClock(Mutex::new(at(text))))
    }

    pub(crate) fn set(&self, now: DateTime<Utc>) {
        *self.0.lock().unwrap() = now;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

pub(crate) fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

/// A fire that queues the run in the store, as keel-server's does, and remembers what it was
/// told and what it published; `refuse` and `later` make it say no.
#[derive(Default)]
pub(crate) struct StoreFire {
    store: Mutex<Option<Arc<dyn DaemonStore>>>,
    pub(crate) told: Mutex<Vec<String>>,
    pub(crate) events: Mutex<Vec<ScheduleEvent>>,
    pub(crate) refuse: Mutex<Option<String>>,
    pub(crate) later: Mutex<bool>,
}

impl StoreFire {
    pub(crate) fn on(store: Arc<dyn DaemonStore>) -> Arc<Self> {
        let fire = StoreFire::default();
        *fire.store.lock().unwrap() = Some(store);
        Arc::new(fire)
    }

    fn names(&self) -> Vec<&'static str> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.event.name())
            .collect()
    }
}

#[async_trait]
impl Fire for StoreFire {
    async fn fire(
        &self,
        schedule: &Schedule,
        slot: DateTime<Utc>,
        _covers: &[DateTime<Utc>],
        text: String,
    ) -> Result<Fired, FireError> {
        if let Some(reason) = self.refuse.lock().unwrap().clone() {
            return Err(FireError::Refused(reason));
        }
        if *self.later.lock().unwrap() {
            return Err(FireError::Later("the lane is full".into()));
        }
        let store = self.store.lock().unwrap().clone().unwrap();
        let run = QueuedRun {
            run_id: uuid::Uuid::now_v7().to_string(),
            session_id: schedule.session_id.clone(),
            user_id: schedule.owner.clone(),
            message: text,
            enqueued_at: slot,
            provider: "mock".into(),
            model: "mock".into(),
            options: Default::default(),
            inbound: None,
            slot: Some(slot_key(schedule, slot)),
        };
        match store.enqueue_run(&run, 10_000).await {
            Ok(EnqueueOutcome::Queued { .. }) => Ok(Fired { run_id: run.run_id }),
            Ok(EnqueueOutcome::Duplicate { run_id }) => Err(FireError::Duplicate { run_id }),
            Ok(EnqueueOutcome::Full { .. }) => Err(FireError::Later("full".into())),
            Err(error) => Err(FireError::Later(error.to_string())),
        }
    }

    async fn tell(&self, _schedule: &Schedule, text: &str) {
        self.told.lock().unwrap().push(text.to_owned());
    }

    fn publish(&self, event: &ScheduleEvent) {
        self.events.lock().unwrap().push(event.clone());
    }
}

pub(crate) async fn conversation(store: &dyn DaemonStore, id: &str) {
    store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: Some("ana".into()),
            lane_policy: LanePolicy::Queue,
            at: at("2026-11-29T00:00:00Z"),
            place: None,
            trusted: true,
        })
        .await
        .unwrap();
}

pub(crate) fn every_minute(id: &str, session: &str, first: &str, catch_up: CatchUp) -> Schedule {
    Schedule {
        id: id.into(),
        session_id: session.into(),
        owner: Some("ana".into()),
        created_by: Creator::Operator,
        kind: ScheduleKind::Every,
        spec: "60".into(),
        tz: None,
        text: "tick at {time}".into(),
        catch_up,
        catch_up_cap: DEFAULT_CATCH_UP_CAP,
        state: ScheduleState::Active,
        paused_reason: None,
        next_slot: Some(at(first)),
        failures: 0,
        max_failures: DEFAULT_MAX_FAILURES,
        created_at: at("2026-11-29T00:00:00Z"),
        updated_at: at("2026-11-29T00:00:00Z"),
    }
}

struct Rig {
    store: Arc<dyn DaemonStore>,
    fire: Arc<StoreFire>,
    clock: Arc<ManualClock>,
    scheduler: Scheduler,
}

async fn rig(catch_up: CatchUp, now: &str) -> Rig {
    let store: Arc<dyn DaemonStore> = Arc::new(MemoryStore::new());
    conversation(store.as_ref(), "c1").await;
    store
        .create_schedule(&every_minute("s1", "c1", "2026-11-29T12:01:00Z", catch_up))
        .await
        .unwrap();
    let fire = StoreFire::on(store.clone());
    let clock = ManualClock::at(now);
    let scheduler = Scheduler::new(
        store.clone(),
        fire.clone(),
        clock.clone(),
        SchedulerOptions::default(),
    );
    Rig {
        store,
        fire,
        clock,
        scheduler,
    }
}

impl Rig {
    async fn queued(&self) -> Vec<String> {
        self.store
            .queued_runs("c1")
            .await
            .unwrap()
            .into_iter()
            .map(|run| run.message)
            .collect()
    }

    /// The slots recorded, oldest first, as `HH:MM outcome`.
    async fn slots(&self) -> Vec<String> {
        let mut slots = self.store.slots("s1", 100).await.unwrap();
        slots.reverse();
        slots
            .iter()
            .map(|entry| {
                format!(
                    "{} {}",
                    entry.record.slot.format("%H:%M"),
                    entry.record.outcome
                )
            })
            .collect()
    }

    async fn next_slot(&self) -> Option<DateTime<Utc>> {
        self.store.schedule("s1").await.unwrap().unwrap().next_slot
    }
}

#[tokio::test]
async fn an_on_time_slot_becomes_a_queued_run_and_the_next_slot_moves_on() {
    let rig = rig(CatchUp::Skip, "2026-11-29T12:00:30Z").await;
    assert_eq!(rig.scheduler.tick().await.unwrap(), TickReport::default());
    rig.clock.set(at("2026-11-29T12:01:02Z"));
    let report = rig.scheduler.tick().await.unwrap();
    assert_eq!(report.fired, 1);
    assert_eq!(rig.queued().await, ["tick at 12:01"]);
    assert_eq!(rig.slots().await, ["12:01 fired"]);
    assert_eq!(rig.next_slot().await, Some(at("2026-11-29T12:02:00Z")));
    assert_eq!(rig.fire.names(), ["schedule.fired"]);
    // The same instant again: nothing more.
    assert_eq!(rig.scheduler.tick().await.unwrap().fired, 0);
    assert_eq!(rig.queued().await.len(), 1);
}

#[tokio::test]
async fn three_slots_passed_while_down_under_each_policy() {
    // Back at 12:04:01: 12:01, 12:02 and 12:03 are more than the minute's grace old; 12:04
    // is on time and fires under every policy.
    let now = "2026-11-29T12:04:01Z";
    let skip = rig(CatchUp::Skip, now).await;
    skip.scheduler.tick().await.unwrap();
    let once = rig(CatchUp::Once, now).await;
    once.scheduler.tick().await.unwrap();
    let all = rig(CatchUp::All, now).await;
    all.scheduler.tick().await.unwrap();
    assert_eq!(
        skip.slots().await,
        [
            "12:01 missed",
            "12:02 missed",
            "12:03 missed",
            "12:04 fired"
        ]
    );
    assert_eq!(skip.queued().await, ["tick at 12:04"]);
    assert_eq!(
        all.slots().await,
        ["12:01 fired", "12:02 fired", "12:03 fired", "12:04 fired"]
    );
    assert_eq!(
        all.queued().await,
        [
            "tick at 12:01",
            "tick at 12:02",
            "tick at 12:03",
            "tick at 12:04"
        ]
    );
    assert_eq!(
        once.slots().await,
        [
            "12:01 missed",
            "12:02 missed",
            "12:03 missed",
            "12:04 fired"
        ]
    );
    let runs = once.queued().await;
    assert_eq!(runs.len(), 1);
    assert!(
        runs[0].starts_with(
            "tick at 12:04\n\n(Scheduled for 2026-11-29 12:04 UTC; this one run also stands \
             for 3 earlier times"
        ),
        "{runs:?}"
    );
    for rig in [&skip, &once, &all] {
        assert_eq!(rig.next_slot().await, Some(at("2026-11-29T12:05:00Z")));
    }
}

#[tokio::test]
async fn a_refused_slot_is_recorded_with_its_reason_and_runs_nothing() {
    let rig = rig(CatchUp::Skip, "2026-11-29T12:01:00Z").await;
    *rig.fire.refuse.lock().unwrap() = Some("ana is over her monthly budget".into());
    let report = rig.scheduler.tick().await.unwrap();
    assert_eq!(report.refused, 1);
    assert!(rig.queued().await.is_empty());
    let slots = rig.store.slots("s1", 10).await.unwrap();
    assert_eq!(slots[0].record.outcome, SlotOutcome::Refused);
    assert_eq!(
        slots[0].record.reason.as_deref(),
        Some("ana is over her monthly budget")
    );
    assert_eq!(rig.fire.names(), ["schedule.refused"]);
    assert_eq!(rig.next_slot().await, Some(at("2026-11-29T12:02:00Z")));
}

#[tokio::test]
async fn a_fire_that_cannot_happen_now_is_tried_at_the_next_tick() {
    let rig = rig(CatchUp::Skip, "2026-11-29T12:01:00Z").await;
    *rig.fire.later.lock().unwrap() = true;
    rig.scheduler.tick().await.unwrap();
    assert!(rig.slots().await.is_empty());
    assert_eq!(rig.next_slot().await, Some(at("2026-11-29T12:01:00Z")));
    *rig.fire.later.lock().unwrap() = false;
    rig.clock.set(at("2026-11-29T12:01:01Z"));
    rig.scheduler.tick().await.unwrap();
    assert_eq!(rig.slots().await, ["12:01 fired"]);
}

#[tokio::test]
async fn a_restart_at_the_firing_instant_never_fires_twice() {
    let rig = rig(CatchUp::All, "2026-11-29T12:01:00Z").await;
    for _ in 0..50 {
        // A daemon that died after queuing the run but before moving the next slot on: the
        // schedule still says 12:01. A fresh scheduler at the same instant.
        let next = rig.next_slot().await;
        rig.store
            .advance_schedule("s1", next, Some(at("2026-11-29T12:01:00Z")), next.unwrap())
            .await
            .unwrap();
        let fresh = Scheduler::new(
            rig.store.clone(),
            rig.fire.clone(),
            rig.clock.clone(),
            SchedulerOptions::default(),
        );
        fresh.tick().await.unwrap();
    }
    assert_eq!(rig.queued().await, ["tick at 12:01"]);
    assert_eq!(rig.slots().await, ["12:01 fired"]);
    assert_eq!(rig.next_slot().await, Some(at("2026-11-29T12:02:00Z")));
}

#[tokio::test]
async fn a_clock_step_back_fires_nothing_again() {
    let rig = rig(CatchUp::All, "2026-11-29T12:01:00Z").await;
    rig.scheduler.tick().await.unwrap();
    rig.clock.set(at("2026-11-29T11:00:00Z"));
    rig.scheduler.tick().await.unwrap();
    rig.clock.set(at("2026-11-29T12:01:30Z"));
    rig.scheduler.tick().await.unwrap();
    assert_eq!(rig.slots().await, ["12:01 fired"]);
}

/// Ends the run of the newest fired slot in `state`.
async fn end_last_fire(rig: &Rig, state: AgentState) {
    let slots = rig.store.slots("s1", 1).await.unwrap();
    let run_id = slots[0].record.run_id.clone().unwrap();
    let mut run = rig.store.run(&run_id).await.unwrap().unwrap();
    run.state = state;
    rig.store.save_run(&run, &[]).await.unwrap();
}

#[tokio::test]
async fn three_failed_fires_in_a_row_pause_the_schedule_and_say_so() {
    let rig = rig(CatchUp::Skip, "2026-11-29T12:01:00Z").await;
    rig.scheduler.tick().await.unwrap();
    end_last_fire(&rig, AgentState::Error).await;
    rig.clock.set(at("2026-11-29T12:02:00Z"));
    rig.scheduler.tick().await.unwrap();
    // A success in between forgets the failure.
    end_last_fire(&rig, AgentState::Completed).await;
    for minute in 3..=5 {
        rig.clock.set(at(&format!("2026-11-29T12:0{minute}:00Z")));
        let report = rig.scheduler.tick().await.unwrap();
        assert_eq!(report.paused, 0, "minute {minute}");
        end_last_fire(&rig, AgentState::Error).await;
    }
    rig.clock.set(at("2026-11-29T12:05:30Z"));
    let report = rig.scheduler.tick().await.unwrap();
    assert_eq!(report.paused, 1);
    let schedule = rig.store.schedule("s1").await.unwrap().unwrap();
    assert_eq!(schedule.state, ScheduleState::Paused);
    assert!(
        schedule
            .paused_reason
            .as_deref()
            .unwrap()
            .starts_with("3 fires in a row failed"),
        "{schedule:?}"
    );
    let told = rig.fire.told.lock().unwrap().clone();
    assert_eq!(told.len(), 1);
    assert!(
        told[0].contains("is paused: 3 fires in a row failed"),
        "{told:?}"
    );
    // A paused schedule fires no more.
    rig.clock.set(at("2026-11-29T12:09:00Z"));
    assert_eq!(rig.scheduler.tick().await.unwrap().fired, 0);
    let names = rig.fire.names();
    assert_eq!(names.iter().filter(|n| **n == "schedule.failed").count(), 4);
    assert_eq!(names.last(), Some(&"schedule.paused"));
}

#[test]
fn completed_and_cancelled_runs_are_no_failures() {
    assert_eq!(failure_of(AgentState::Completed, None), None);
    assert_eq!(failure_of(AgentState::Cancelled, Some("by ana")), None);
    assert_eq!(
        failure_of(AgentState::Error, Some("the model said 500")).as_deref(),
        Some("the run ended error: the model said 500")
    );
    assert_eq!(
        failure_of(AgentState::TimedOut, None).as_deref(),
        Some("the run ended timed_out")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_daemons_on_one_sqlite_file_fire_each_of_50_slots_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let one: Arc<dyn DaemonStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let two: Arc<dyn DaemonStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
    conversation(one.as_ref(), "c1").await;
    one.create_schedule(&every_minute(
        "s1",
        "c1",
        "2026-11-29T12:00:00Z",
        CatchUp::All,
    ))
    .await
    .unwrap();
    let clock = ManualClock::at("2026-11-29T11:59:00Z");
    let fires = [StoreFire::on(one.clone()), StoreFire::on(two.clone())];
    let daemons = [
        Scheduler::new(
            one.clone(),
            fires[0].clone(),
            clock.clone(),
            SchedulerOptions::default(),
        ),
        Scheduler::new(
            two.clone(),
            fires[1].clone(),
            clock.clone(),
            SchedulerOptions::default(),
        ),
    ];
    for minute in 0..50 {
        clock.set(at("2026-11-29T12:00:00Z") + Span::minutes(minute));
        let (a, b) = tokio::join!(daemons[0].tick(), daemons[1].tick());
        a.unwrap();
        b.unwrap();
    }
    let slots = one.slots("s1", 100).await.unwrap();
    assert_eq!(slots.len(), 50);
    assert!(slots.iter().all(|s| s.record.outcome == SlotOutcome::Fired));
    let runs = one.queued_runs("c1").await.unwrap();
    assert_eq!(runs.len(), 50, "one run per slot");
    let fired: usize = fires
        .iter()
        .map(|f| f.names().iter().filter(|n| **n == "schedule.fired").count())
        .sum();
    assert_eq!(fired, 50);
}
