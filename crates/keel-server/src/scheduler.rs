//! Schedules in the daemon: the server's side of a fire ([`ServerFire`], keel-schedules'
//! [`Fire`]) and the start of the scheduler loop ([`start`]).
//!
//! A fire is a message to the schedule's conversation, queued in its lane like any other
//! (`Engine::submit_scheduled`; under `interrupt` or `rollback` it queues rather than stop the
//! running run), as a run of the schedule's owner with the conversation's trust, persona and
//! place (`Inbox::options_for`), so its answer goes to the conversation's channel through the
//! outbox. Its run tells `schedule.fired` when it starts; the other schedule events (missed,
//! refused, failed, paused) have no run of their own and go to the log and the
//! conversation's live stream. Its slot's key is recorded with the queued run, so the slot
//! runs once. An owner over the monthly budget is refused before anything is queued, and the
//! slot is recorded `refused` with the reason.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::clock::Clock;
use keel_core::store::StoreError;
use keel_core::token_log::{budget_spent, usage_month};
use keel_platform::channel::Notice;
use keel_platform::{DaemonStore, Inbox, Schedule};
use keel_schedules::scheduler::{SchedulerOptions, slot_key};
use keel_schedules::{Fire, FireError, Fired, ScheduleEvent, Scheduler};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::engine::{Engine, EngineError};
use crate::hub::Hub;
use crate::state::AppState;

/// The daemon's [`Fire`]: the engine queues, the store tells, the hub announces.
pub struct ServerFire {
    engine: Arc<Engine>,
    store: Arc<dyn DaemonStore>,
    inbox: Arc<Inbox>,
    hub: Arc<Hub>,
    clock: Arc<dyn Clock>,
}

impl ServerFire {
    /// The fire of the daemon whose state is `state`; `clock` is the scheduler's (the month a
    /// budget is counted in).
    pub fn new(state: &AppState, clock: Arc<dyn Clock>) -> Self {
        ServerFire {
            engine: state.engine.clone(),
            store: state.store.clone(),
            inbox: state.inbox.clone(),
            hub: state.hub.clone(),
            clock,
        }
    }

    /// Why `user` may not run now: their monthly token budget is spent (the check a run makes
    /// before its loop, made before the run is queued so the slot can say so).
    async fn over_budget(&self, user: &str) -> Result<Option<String>, StoreError> {
        let Some(budget) = self
            .store
            .user(user)
            .await?
            .and_then(|record| record.monthly_token_budget)
        else {
            return Ok(None);
        };
        let now = self.clock.now();
        let used = self
            .store
            .monthly_usage(user, &usage_month(now))
            .await?
            .total();
        Ok(budget_spent(user, used, budget, now))
    }
}

fn later(error: impl std::fmt::Display) -> FireError {
    FireError::Later(error.to_string())
}

#[async_trait]
impl Fire for ServerFire {
    async fn fire(
        &self,
        schedule: &Schedule,
        slot: DateTime<Utc>,
        covers: &[DateTime<Utc>],
        text: String,
    ) -> Result<Fired, FireError> {
        let Some(conversation) = self
            .store
            .session(&schedule.session_id)
            .await
            .map_err(later)?
        else {
            return Err(FireError::Refused(format!(
                "its conversation `{}` is gone",
                schedule.session_id
            )));
        };
        if let Some(owner) = &schedule.owner
            && let Some(reason) = self.over_budget(owner).await.map_err(later)?
        {
            return Err(FireError::Refused(reason));
        }
        let options = self.inbox.options_for(&conversation).await.map_err(later)?;
        match self
            .engine
            .submit_catching_up(
                &conversation,
                text,
                schedule.owner.clone(),
                options,
                slot_key(schedule, slot),
                covers.to_vec(),
            )
            .await
        {
            Ok(submitted) => Ok(Fired {
                run_id: submitted.run_id,
            }),
            Err(EngineError::Duplicate { run_id }) => Err(FireError::Duplicate { run_id }),
            Err(other) => Err(later(other)),
        }
    }

    async fn tell(&self, schedule: &Schedule, text: &str) {
        let route = match self.store.delivery(&schedule.session_id).await {
            Ok(Some(route)) => route,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(schedule = %schedule.id, %error, "cannot read the conversation's route");
                return;
            }
        };
        let notice = Notice {
            channel: route.channel,
            target: route.target,
            session_id: schedule.session_id.clone(),
            body: text.to_owned(),
            at: Utc::now(),
        };
        if let Err(error) = self.store.add_notice(&notice).await {
            tracing::warn!(schedule = %schedule.id, %error, "cannot tell the conversation");
        }
    }

    fn publish(&self, event: &ScheduleEvent) {
        tracing::info!(
            event = event.event.name(),
            schedule = %event.schedule_id,
            conversation = %event.session_id,
            slot = ?event.slot,
            run = ?event.run_id,
            reason = ?event.reason,
            "schedule"
        );
        // A fire is told on its run's stream when the run starts (the engine keeps it).
        if event.event == keel_schedules::ScheduleEventKind::Fired {
            return;
        }
        if let Ok(data) = serde_json::to_string(event) {
            self.hub.announce(
                &event.session_id,
                &format!("schedule:{}", event.schedule_id),
                event.event.name(),
                data,
            );
        }
    }
}

/// The running scheduler: stop it with [`RunningScheduler::stop`].
pub struct RunningScheduler {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl RunningScheduler {
    /// Stops the loop after its current tick.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Starts the scheduler of the daemon whose state is `state`, at `clock`'s time.
pub fn start(
    state: &AppState,
    clock: Arc<dyn Clock>,
    options: SchedulerOptions,
) -> RunningScheduler {
    let fire = Arc::new(ServerFire::new(state, clock.clone()));
    let scheduler = Arc::new(Scheduler::new(state.store.clone(), fire, clock, options));
    let stop = CancellationToken::new();
    let task = tokio::spawn(scheduler.run(stop.clone()));
    RunningScheduler { stop, task }
}
