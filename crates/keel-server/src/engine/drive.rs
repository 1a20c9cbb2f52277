//! Driving runs: starting the next queued run of a free lane, driving a stored run again
//! (answered or resumed), a worker slot and the store's lane claim for each, and what happens
//! when a run stops being driven.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use keel_core::{
    AgentError, AgentState, ContinueOptions, LaneClaim, LaneOutcome, RunReport, RunRequest,
};
use keel_platform::QueuedRun;

use super::{Continue, Engine, RunControl, stored_report};

/// What claiming a run's lane came to.
pub(super) enum Claim {
    /// The lane is the run's, for this worker.
    Held,
    /// The engine stops first.
    Stopping,
    /// Another worker holds the lane for this very run (shared store): it drives the run.
    Elsewhere,
}

impl Engine {
    /// Starts the next queued run of `session` if nothing runs there.
    pub(super) fn pump(self: &Arc<Self>, session: &str) {
        if !self.accepting() {
            return;
        }
        let next = {
            let mut lanes = self.lock_lanes();
            let Some(lane) = lanes.get_mut(session) else {
                return;
            };
            if lane.running.is_some() || lane.is_quiet(tokio::time::Instant::now()) {
                return;
            }
            lane.quiet_until = None;
            let Some(next) = lane.queued.pop_front() else {
                return;
            };
            // Under `collect`, the oldest queued run carries every other one.
            // A schedule's fire is never folded, nor folds: the messages after it wait.
            let folded: Vec<QueuedRun> =
                if lane.policy == keel_core::LanePolicy::Collect && next.slot.is_none() {
                    let messages = lane
                        .queued
                        .iter()
                        .take_while(|run| run.slot.is_none())
                        .count();
                    lane.queued.drain(..messages).collect()
                } else {
                    Vec::new()
                };
            lane.running = Some(next.run_id.clone());
            (next, folded)
        };
        let (next, folded) = next;
        let Some(control) = self.boundaries.add(&next.run_id) else {
            // Driven here already: never twice. Its driver frees the lane when it stops; the
            // runs `collect` took wait again.
            if let Some(lane) = self.lock_lanes().get_mut(session) {
                for run in folded.into_iter().rev() {
                    lane.queued.push_front(run);
                }
            }
            return;
        };
        let engine = self.clone();
        self.tasks
            .spawn(async move { engine.drive_queued(next, folded, control).await });
    }

    /// Drives a run taken from the lane's queue (with the runs `collect` folds into it).
    pub(super) async fn drive_queued(
        self: Arc<Self>,
        run: QueuedRun,
        folded: Vec<QueuedRun>,
        control: Arc<RunControl>,
    ) {
        // Shared, the runs are folded once the lane is this worker's: another worker may have
        // taken the run they would be folded into.
        let (run, folded) = if folded.is_empty() || self.shared() {
            (run, folded)
        } else {
            (self.collect(run, folded).await, Vec::new())
        };
        let Some(permit) = self.permit().await else {
            return self.abandon(&run.session_id, &run.run_id);
        };
        // Shared: another worker may have taken it (and even ended it) meanwhile.
        if !self.still_queued(&run.run_id).await {
            drop(permit);
            return self
                .given_up(&run.session_id, &run.run_id, false, folded)
                .await;
        }
        match self.claim(&run.session_id, &run.run_id, &control).await {
            Claim::Held => {}
            Claim::Stopping => {
                drop(permit);
                return self.abandon(&run.session_id, &run.run_id);
            }
            Claim::Elsewhere => {
                drop(permit);
                return self
                    .given_up(&run.session_id, &run.run_id, false, folded)
                    .await;
            }
        }
        if !self.still_queued(&run.run_id).await {
            drop(permit);
            return self
                .given_up(&run.session_id, &run.run_id, true, folded)
                .await;
        }
        let run = if folded.is_empty() {
            run
        } else {
            self.collect(run, folded).await
        };
        if control.cancel.is_cancelled() {
            if let Ok(true) = self.store.cancel_queued(&run.run_id, Utc::now()).await {
                self.metrics.runs_ended_queued("queued", 1);
            }
            let _ = self
                .store
                .release_session(&run.session_id, &run.run_id)
                .await;
            self.forget(&run.session_id, &run.run_id);
            self.publish_stored(&run.run_id).await;
            return self.pump(&run.session_id);
        }
        let Some(agent) = self.agent.get().cloned() else {
            return self.abandon(&run.session_id, &run.run_id);
        };
        self.live.run_starting(&run.run_id, &run.session_id, 0);
        self.tell_pending(&run.run_id, &run.session_id);
        // Under `steer`, messages that arrive meanwhile join the run.
        let steering = super::steer::LaneSteering::of(&self, &run);
        let mut request = RunRequest::new(run.message)
            .session(run.session_id.clone())
            .cancel_token(control.cancel.clone());
        let next_turn = super::between_turns::NextTurn {
            user_id: run.user_id.clone(),
            options: run.options.clone(),
        };
        request.user_id = run.user_id;
        request.options = run.options;
        request.run_id = Some(run.run_id.clone());
        request.steering = steering
            .clone()
            .map(|steering| steering as Arc<dyn keel_core::Steering>);
        // A panic in the run ends it `error (internal)`: its waiters are answered.
        let outcome = tokio::select! {
            outcome = agent.survive_panic(&run.run_id, agent.run(request)) => Some(outcome),
            _ = control.stop.notified() => None,
        };
        drop(permit);
        // What the run took and never stored runs next.
        if let Some(steering) = &steering {
            steering.give_back();
        }
        let completed = super::between_turns::completed(&outcome);
        self.finish(&run.session_id, &run.run_id, outcome).await;
        if completed {
            self.compact_between_turns(&run.session_id, next_turn).await;
        }
    }

    /// Drives a stored run again in the background; false when it is driven here already.
    pub(super) fn continue_run(
        self: &Arc<Self>,
        run_id: String,
        session_id: String,
        how: Continue,
    ) -> bool {
        let Some(control) = self.boundaries.add(&run_id) else {
            return false;
        };
        self.watch_report(&run_id);
        // The lane is this run's until it stops: a queued run started now would find the run's
        // stored state (`timed_out`, say) terminal and take the lane from under it.
        {
            let mut lanes = self.lock_lanes();
            let lane = lanes.entry(session_id.clone()).or_default();
            if lane.running.is_none() {
                lane.running = Some(run_id.clone());
            }
        }
        let engine = self.clone();
        self.tasks.spawn(async move {
            let Some(permit) = engine.permit().await else {
                return engine.abandon(&session_id, &run_id);
            };
            let Some(agent) = engine.agent.get().cloned() else {
                return engine.abandon(&session_id, &run_id);
            };
            match engine.claim(&session_id, &run_id, &control).await {
                Claim::Held => {}
                Claim::Stopping => return engine.abandon(&session_id, &run_id),
                // Another worker continues it (the same approval or resume reached it too).
                Claim::Elsewhere => {
                    return engine
                        .given_up(&session_id, &run_id, false, Vec::new())
                        .await;
                }
            }
            if !engine.still_continuable(&run_id).await {
                return engine
                    .given_up(&session_id, &run_id, true, Vec::new())
                    .await;
            }
            let stored = engine
                .store
                .events_after(&run_id, 0)
                .await
                .map_or(0, |events| events.len() as u64);
            engine.live.run_starting(&run_id, &session_id, stored);
            // The run's cancel (`Engine::cancel`) reaches it however it goes on.
            let continued = ContinueOptions {
                cancel: Some(control.cancel.clone()),
                ..ContinueOptions::default()
            };
            let run = async {
                match how {
                    Continue::Answer(text) => {
                        agent.answer_with_options(&run_id, &text, continued).await
                    }
                    Continue::Approve(call_id, decision) => {
                        agent
                            .approve_with_options(&run_id, &call_id, decision, continued)
                            .await
                    }
                    Continue::Resume(mut options) => {
                        options.cancel = Some(control.cancel.clone());
                        agent.resume(&run_id, options).await
                    }
                }
            };
            // A panic in the run ends it `error (internal)`: its waiters are answered.
            let outcome = tokio::select! {
                outcome = agent.survive_panic(&run_id, run) => Some(outcome),
                _ = control.stop.notified() => None,
            };
            drop(permit);
            let completed = super::between_turns::completed(&outcome);
            engine.finish(&session_id, &run_id, outcome).await;
            if completed {
                let next_turn = super::between_turns::NextTurn::default();
                engine.compact_between_turns(&session_id, next_turn).await;
            }
        });
        true
    }

    /// A worker slot, unless the engine stops first.
    pub(super) async fn permit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        tokio::select! {
            permit = self.permits.clone().acquire_owned() => permit.ok().filter(|_| self.accepting()),
            _ = self.stopping.cancelled() => None,
        }
    }

    /// Claims the session's lane for the run in the store, waiting while another run (a paused
    /// one, or one of another process) holds it; [`Claim::Stopping`] when the engine stops
    /// first, [`Claim::Elsewhere`] when (shared) another worker holds it for this very run.
    pub(super) async fn claim(
        &self,
        session_id: &str,
        run_id: &str,
        control: &RunControl,
    ) -> Claim {
        let stale_after = self.stale_after();
        let mut wait = Duration::from_millis(50);
        loop {
            let claim = LaneClaim {
                session_id,
                run_id,
                worker: &self.options.worker,
                at: Utc::now(),
                stale_after,
            };
            match self.store.claim_session(&claim).await {
                Ok(LaneOutcome::Claimed) => return Claim::Held,
                Ok(LaneOutcome::Busy(holder))
                    if self.shared()
                        && holder.run_id == run_id
                        && holder.worker != self.options.worker =>
                {
                    return Claim::Elsewhere;
                }
                Ok(LaneOutcome::Busy(_)) if control.cancel.is_cancelled() => return Claim::Held,
                Ok(LaneOutcome::Busy(_)) => {}
                Err(error) => tracing::error!(%error, run_id, "cannot claim the lane"),
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.stopping.cancelled() => return Claim::Stopping,
            }
            wait = (wait * 2).min(Duration::from_secs(1));
        }
    }

    /// After a run stopped being driven: the run let go here, the hub told, its report to
    /// whoever waits (so a waiter that acts on it at once finds the run free), and the lane's
    /// next run started.
    pub(super) async fn finish(
        self: &Arc<Self>,
        session_id: &str,
        run_id: &str,
        outcome: Option<Result<RunReport, AgentError>>,
    ) {
        let (state, report) = match outcome {
            Some(Ok(report)) => {
                let state = report.state;
                if state != AgentState::WaitingOnHuman {
                    let _ = self.store.release_session(session_id, run_id).await;
                }
                if let Some(approval) = &report.approval {
                    self.deny_when_due(run_id.to_string(), Some(approval.call_id.clone()));
                }
                (state, Some(report))
            }
            Some(Err(error)) => {
                tracing::error!(%error, run_id, "a run failed");
                if self
                    .store
                    .cancel_queued(run_id, Utc::now())
                    .await
                    .unwrap_or(false)
                {
                    self.metrics.runs_ended_queued("queued", 1);
                    tracing::error!(run_id, "the run never started; it is cancelled");
                }
                let _ = self.store.release_session(session_id, run_id).await;
                let report = stored_report(self.store.as_ref(), run_id)
                    .await
                    .ok()
                    .flatten();
                let state = self
                    .store
                    .run(run_id)
                    .await
                    .ok()
                    .flatten()
                    .map_or(AgentState::Error, |run| run.state);
                (state, report)
            }
            None => {
                *self.interrupted.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                (AgentState::Running, None)
            }
        };
        self.live.run_stopped(run_id, state);
        self.forget(session_id, run_id);
        if let Some(sender) = self.lock_reports().remove(run_id) {
            let _ = sender.send(report);
        }
        self.pump(session_id);
    }

    /// Sends the stored report of `run_id` to whoever waits on it.
    pub(super) async fn publish_stored(&self, run_id: &str) {
        let report = stored_report(self.store.as_ref(), run_id)
            .await
            .ok()
            .flatten();
        if let Some(sender) = self.lock_reports().remove(run_id) {
            let _ = sender.send(report);
        }
    }

    /// The run no longer occupies its lane here.
    pub(super) fn forget(&self, session_id: &str, run_id: &str) {
        self.boundaries.remove(run_id);
        self.metrics.forget_run(run_id);
        let mut lanes = self.lock_lanes();
        if let Some(lane) = lanes.get_mut(session_id) {
            if lane.running.as_deref() == Some(run_id) {
                lane.running = None;
            }
            if lane.is_idle() && Arc::strong_count(&lane.accepting) == 1 {
                lanes.remove(session_id);
            }
        }
    }

    /// The run is not driven here after all (the engine stops first): its lane is let go, and
    /// whoever waits for its report reads it from the store.
    pub(super) fn abandon(&self, session_id: &str, run_id: &str) {
        self.forget(session_id, run_id);
        self.lock_reports().remove(run_id);
    }

    /// Forgets the lane of `session_id` when nothing runs, waits or is being accepted there.
    pub(super) fn forget_idle_lane(&self, session_id: &str) {
        let mut lanes = self.lock_lanes();
        if lanes
            .get(session_id)
            .is_some_and(|lane| lane.is_idle() && Arc::strong_count(&lane.accepting) == 1)
        {
            lanes.remove(session_id);
        }
    }
}
