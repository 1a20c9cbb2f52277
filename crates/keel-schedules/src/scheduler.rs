//! The loop in `keel serve` that fires schedules. Every tick it reads the due schedules, plans
//! each ([`crate::catch_up::plan`]), records the missed slots, fires the rest through the
//! server's [`Fire`], moves each schedule's next slot on (compare-and-set, so of two daemons one
//! moves it), and counts the fires whose runs ended: a success forgets the failures in a row, a
//! bad end counts one, and at the schedule's `max_failures` it pauses itself and says so in the
//! conversation.
//!
//! Exactly once is the store's: a fire is a run queued with its slot's key, recorded `fired` in
//! the transaction that queues it, and a slot recorded before (fired, missed or refused) queues
//! nothing. So two daemons on one store, a restart at the firing instant, or a clock step may
//! plan a slot twice but never run it twice; the first word on a slot wins.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::AgentState;
use keel_core::clock::Clock;
use keel_core::store::StoreError;
use keel_platform::{DaemonStore, Schedule, ScheduleState, SlotKey, SlotOutcome, SlotRecord};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::catch_up::{DEFAULT_GRACE, plan};
use crate::message::render;
use crate::spec::Spec;

/// How the loop runs (`[schedules]` of keel.toml).
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerOptions {
    /// Time between ticks (`tick_ms`, 1000).
    pub tick: Duration,
    /// How late a slot may fire and still count as on time (`grace_secs`, 60).
    pub grace: chrono::Duration,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            tick: Duration::from_millis(1000),
            grace: DEFAULT_GRACE,
        }
    }
}

/// A fire that queued a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fired {
    /// The run the slot became.
    pub run_id: String,
}

/// Why a fire queued no run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FireError {
    /// The slot was recorded before (another daemon fired it, or it was recorded missed or
    /// refused): nothing was queued, and nothing more is to be done.
    #[error("the slot was recorded before")]
    Duplicate {
        /// The run its fire became; empty when it was recorded without one.
        run_id: String,
    },
    /// Refused before running (its owner is over the monthly budget, the conversation is
    /// gone): the slot is recorded `refused` with this reason.
    #[error("refused: {0}")]
    Refused(String),
    /// Not now (the conversation's lane is full, the daemon is stopping, the store failed):
    /// the slot is tried again at the next tick.
    #[error("not now: {0}")]
    Later(String),
}

/// The server's side of a fire: queue the run, say things in the conversation, publish events.
#[async_trait]
pub trait Fire: Send + Sync {
    /// Queues `text` as a run of `schedule`'s owner in its conversation (with the
    /// conversation's trust, persona and budget; its answer goes to the conversation's
    /// channel), keyed by the slot so that it runs once; it stands for the missed slots
    /// `covers` too (a `once` catch-up).
    async fn fire(
        &self,
        schedule: &Schedule,
        slot: DateTime<Utc>,
        covers: &[DateTime<Utc>],
        text: String,
    ) -> Result<Fired, FireError>;

    /// Says `text` in the schedule's conversation, where it has a channel to say it on.
    async fn tell(&self, schedule: &Schedule, text: &str);

    /// Publishes what became of a slot or a schedule.
    fn publish(&self, event: &ScheduleEvent);
}

/// What the scheduler did, as its events name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ScheduleEventKind {
    /// A slot's run was queued.
    #[serde(rename = "schedule.fired")]
    Fired,
    /// A slot passed without a run.
    #[serde(rename = "schedule.missed")]
    Missed,
    /// A slot was refused before running (over budget).
    #[serde(rename = "schedule.refused")]
    Refused,
    /// A fired slot's run ended badly.
    #[serde(rename = "schedule.failed")]
    Failed,
    /// The schedule paused itself.
    #[serde(rename = "schedule.paused")]
    Paused,
}

impl ScheduleEventKind {
    /// The event's name (`schedule.fired`, …).
    pub fn name(self) -> &'static str {
        match self {
            ScheduleEventKind::Fired => "schedule.fired",
            ScheduleEventKind::Missed => "schedule.missed",
            ScheduleEventKind::Refused => "schedule.refused",
            ScheduleEventKind::Failed => "schedule.failed",
            ScheduleEventKind::Paused => "schedule.paused",
        }
    }
}

/// One event of the scheduler.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScheduleEvent {
    /// What happened.
    pub event: ScheduleEventKind,
    /// The schedule.
    pub schedule_id: String,
    /// Its conversation.
    pub session_id: String,
    /// The slot it concerns (none for a pause).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<DateTime<Utc>>,
    /// The run it concerns: the fired run, or the failed one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Why: a miss's, a refusal's, a failure's or a pause's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Missed slots a catch-up run stands for too.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub covers: Vec<DateTime<Utc>>,
}

/// What one tick did, for tests and logs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Runs queued.
    pub fired: usize,
    /// Slots recorded missed.
    pub missed: usize,
    /// Slots recorded refused.
    pub refused: usize,
    /// Slots another daemon (or an earlier pass) had recorded already.
    pub duplicates: usize,
    /// Ended fires counted.
    pub settled: usize,
    /// Schedules paused by this tick.
    pub paused: usize,
}

/// The scheduler: the store it reads, the server's [`Fire`], a clock.
pub struct Scheduler {
    store: Arc<dyn DaemonStore>,
    fire: Arc<dyn Fire>,
    clock: Arc<dyn Clock>,
    options: SchedulerOptions,
}

impl Scheduler {
    /// A scheduler over `store` firing through `fire`, at `clock`'s time.
    pub fn new(
        store: Arc<dyn DaemonStore>,
        fire: Arc<dyn Fire>,
        clock: Arc<dyn Clock>,
        options: SchedulerOptions,
    ) -> Self {
        Scheduler {
            store,
            fire,
            clock,
            options,
        }
    }

    /// Ticks every `options.tick` until `stop` fires. A tick that fails (the store) is logged
    /// and the next one tries again.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(self.options.tick);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            if let Err(error) = self.tick().await {
                tracing::warn!(%error, "the scheduler's tick failed; trying again at the next");
            }
        }
    }

    /// One pass: fires what is due, then counts the fires whose runs ended.
    pub async fn tick(&self) -> Result<TickReport, StoreError> {
        let now = self.clock.now();
        let mut report = TickReport::default();
        for schedule in self.store.due_schedules(now).await? {
            if let Err(error) = self.run_due(&schedule, now, &mut report).await {
                tracing::warn!(schedule = %schedule.id, %error, "cannot fire a due schedule");
            }
        }
        self.settle(now, &mut report).await?;
        Ok(report)
    }

    /// Plans one due schedule and does what the plan says.
    async fn run_due(
        &self,
        schedule: &Schedule,
        now: DateTime<Utc>,
        report: &mut TickReport,
    ) -> Result<(), StoreError> {
        let Some(next) = schedule.next_slot else {
            return Ok(());
        };
        let spec = match Spec::parse(
            schedule.kind.as_str(),
            &schedule.spec,
            schedule.tz.as_deref(),
        ) {
            Ok(spec) => spec,
            Err(error) => {
                let reason = format!("its time no longer reads: {error}");
                return self.pause(schedule, &reason, now, report).await;
            }
        };
        let plan = plan(
            &spec,
            next,
            now,
            self.options.grace,
            schedule.catch_up,
            schedule.catch_up_cap,
        );
        for miss in &plan.missed {
            let recorded = self
                .store
                .record_slot(&record(
                    schedule,
                    miss.slot,
                    SlotOutcome::Missed,
                    Some(&miss.reason),
                    now,
                ))
                .await?;
            if recorded {
                report.missed += 1;
                self.publish(
                    ScheduleEventKind::Missed,
                    schedule,
                    Some(miss.slot),
                    None,
                    Some(miss.reason.clone()),
                );
            } else {
                report.duplicates += 1;
            }
        }
        let mut advance_to = plan.next_slot;
        for fire in &plan.fires {
            let text = render(&schedule.text, fire.slot, spec.tz(), &fire.covers);
            match self
                .fire
                .fire(schedule, fire.slot, &fire.covers, text)
                .await
            {
                Ok(fired) => {
                    report.fired += 1;
                    let mut event = self.event(
                        ScheduleEventKind::Fired,
                        schedule,
                        Some(fire.slot),
                        Some(fired.run_id),
                        None,
                    );
                    event.covers = fire.covers.clone();
                    self.fire.publish(&event);
                }
                Err(FireError::Duplicate { .. }) => report.duplicates += 1,
                Err(FireError::Refused(reason)) => {
                    let recorded = self
                        .store
                        .record_slot(&record(
                            schedule,
                            fire.slot,
                            SlotOutcome::Refused,
                            Some(&reason),
                            now,
                        ))
                        .await?;
                    if recorded {
                        report.refused += 1;
                        self.publish(
                            ScheduleEventKind::Refused,
                            schedule,
                            Some(fire.slot),
                            None,
                            Some(reason),
                        );
                    }
                }
                Err(FireError::Later(why)) => {
                    tracing::info!(schedule = %schedule.id, slot = %fire.slot, %why,
                        "a schedule's slot waits for the next tick");
                    advance_to = Some(fire.slot);
                    break;
                }
            }
        }
        if advance_to != Some(next) {
            self.store
                .advance_schedule(&schedule.id, Some(next), advance_to, now)
                .await?;
        }
        Ok(())
    }

    /// Counts the fires whose runs ended.
    async fn settle(&self, now: DateTime<Utc>, report: &mut TickReport) -> Result<(), StoreError> {
        for ended in self.store.unsettled_fires().await? {
            let failure = failure_of(ended.run_state, ended.reason.as_deref());
            let Some(settled) = self
                .store
                .settle_fire(&ended.key, failure.as_deref(), now)
                .await?
            else {
                continue;
            };
            report.settled += 1;
            let schedule = &settled.schedule;
            if let Some(reason) = failure {
                self.publish(
                    ScheduleEventKind::Failed,
                    schedule,
                    Some(ended.key.slot),
                    Some(ended.run_id.clone()),
                    Some(reason),
                );
            }
            if settled.paused_now {
                report.paused += 1;
                let reason = schedule.paused_reason.clone().unwrap_or_default();
                self.announce_pause(schedule, &reason).await;
            }
        }
        Ok(())
    }

    /// Pauses a schedule that cannot go on, and says so.
    async fn pause(
        &self,
        schedule: &Schedule,
        reason: &str,
        now: DateTime<Utc>,
        report: &mut TickReport,
    ) -> Result<(), StoreError> {
        self.store
            .set_schedule_state(&schedule.id, ScheduleState::Paused, Some(reason), None, now)
            .await?;
        report.paused += 1;
        self.announce_pause(schedule, reason).await;
        Ok(())
    }

    async fn announce_pause(&self, schedule: &Schedule, reason: &str) {
        self.publish(
            ScheduleEventKind::Paused,
            schedule,
            None,
            None,
            Some(reason.to_owned()),
        );
        let text = format!(
            "Schedule {} (\"{}\") is paused: {reason}. An operator can resume it with `keel \
             schedules resume {}`.",
            schedule.id,
            short(&schedule.text),
            schedule.id
        );
        self.fire.tell(schedule, &text).await;
    }

    fn publish(
        &self,
        kind: ScheduleEventKind,
        schedule: &Schedule,
        slot: Option<DateTime<Utc>>,
        run_id: Option<String>,
        reason: Option<String>,
    ) {
        self.fire
            .publish(&self.event(kind, schedule, slot, run_id, reason));
    }

    fn event(
        &self,
        kind: ScheduleEventKind,
        schedule: &Schedule,
        slot: Option<DateTime<Utc>>,
        run_id: Option<String>,
        reason: Option<String>,
    ) -> ScheduleEvent {
        ScheduleEvent {
            event: kind,
            schedule_id: schedule.id.clone(),
            session_id: schedule.session_id.clone(),
            slot,
            run_id,
            reason,
            covers: Vec::new(),
        }
    }
}

/// Why an ended fire counts as a failure, or `None` when it does not: a completed run is a
/// success, and so is a cancelled one (a person, or a lane policy, chose to stop it: not the
/// schedule's fault); every other end is a failure with its reason.
pub fn failure_of(state: AgentState, reason: Option<&str>) -> Option<String> {
    match state {
        AgentState::Completed | AgentState::Cancelled => None,
        other => Some(match reason {
            Some(reason) if !reason.trim().is_empty() => {
                format!("the run ended {}: {reason}", other.as_str())
            }
            _ => format!("the run ended {}", other.as_str()),
        }),
    }
}

fn record(
    schedule: &Schedule,
    slot: DateTime<Utc>,
    outcome: SlotOutcome,
    reason: Option<&str>,
    at: DateTime<Utc>,
) -> SlotRecord {
    SlotRecord {
        schedule_id: schedule.id.clone(),
        slot,
        outcome,
        run_id: None,
        reason: reason.map(str::to_owned),
        at,
    }
}

/// The key of `schedule`'s `slot`, as its fire's run carries it.
pub fn slot_key(schedule: &Schedule, slot: DateTime<Utc>) -> SlotKey {
    SlotKey {
        schedule_id: schedule.id.clone(),
        slot,
    }
}

/// The first 60 characters of `text`, on one line.
fn short(text: &str) -> String {
    let line = text.replace('\n', " ");
    match line.char_indices().nth(60) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
pub(crate) mod tests;
