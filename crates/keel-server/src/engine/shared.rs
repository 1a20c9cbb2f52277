//! Shared mode: a store that many `keel serve` workers share (PostgreSQL, `StoreSignals::shared`)
//! makes every worker a taker of every queued run. A dispatcher takes queued runs with the
//! store's `claim_queued` — each the oldest of its conversation, with the conversation's lane
//! claimed for this worker in the same transaction — when a run is queued or a lane is let go
//! anywhere (the store's signals) and every [`DISPATCH_EVERY`] (so a lost signal only delays),
//! up to the places free here. A run queued here may be taken by another worker first: its
//! claim here then finds the lane held by that run for the other worker, and it is given up
//! here. A cancel stored by any worker stops a run driven here at once (the run's heartbeat
//! reads it too, should the signal be lost), and a report waited for here of a run driven
//! elsewhere is read from the store when it is there.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use keel_core::{AgentState, RunReport, StoreError};
use keel_platform::{QueueClaim, QueuedRun, StoreSignal};
use tokio::sync::broadcast::error::RecvError;

use super::{Engine, EngineError, stored_report};

/// How often the dispatcher looks at the queue without a signal.
pub const DISPATCH_EVERY: Duration = Duration::from_secs(1);

/// How often a report of a run driven elsewhere is looked for in the store.
const REPORT_POLL: Duration = Duration::from_millis(250);

impl Engine {
    /// Whether other workers share the store (and its queue) with this one.
    pub(super) fn shared(&self) -> bool {
        self.store.shared()
    }

    /// In shared mode: the signals' listener and the dispatcher, until the engine stops.
    pub(super) fn start_shared(self: &Arc<Self>) {
        if !self.shared() {
            return;
        }
        if let Some(mut signals) = self.store.signals() {
            let engine = Arc::downgrade(self);
            let stopping = self.stopping.clone();
            tokio::spawn(async move {
                loop {
                    let signal = tokio::select! {
                        signal = signals.recv() => signal,
                        _ = stopping.cancelled() => return,
                    };
                    let Some(engine) = engine.upgrade() else {
                        return;
                    };
                    match signal {
                        Ok(StoreSignal::Cancel(run_id)) => engine.cancel_driven_here(&run_id),
                        Ok(StoreSignal::Queued(_) | StoreSignal::Freed(_)) => {
                            engine.dispatch.notify_one()
                        }
                        Ok(StoreSignal::Events(_)) => {}
                        // Some were missed: the queue is looked at now; a cancel missed is
                        // read at the run's next heartbeat.
                        Err(RecvError::Lagged(_)) => engine.dispatch.notify_one(),
                        Err(RecvError::Closed) => return,
                    }
                }
            });
        }
        let engine = Arc::downgrade(self);
        let stopping = self.stopping.clone();
        let wake = self.dispatch.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(DISPATCH_EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = wake.notified() => {}
                    _ = stopping.cancelled() => return,
                }
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                engine.take_queued().await;
            }
        });
    }

    /// The sessions whose queued runs are read back into their lanes at start: every one with
    /// a queue when this worker is alone, none when the dispatcher takes them (shared).
    pub(super) async fn sessions_to_read_back(&self) -> Result<Vec<String>, StoreError> {
        if self.shared() {
            return Ok(Vec::new());
        }
        self.store.queued_sessions().await
    }

    /// A cancel was stored for `run_id`: when it is driven here, it stops at its next safe
    /// point.
    fn cancel_driven_here(&self, run_id: &str) {
        if let Some(control) = self.boundaries.get(run_id) {
            control.cancel.cancel();
        }
    }

    /// Takes as many queued runs as there are free places here, and drives them.
    async fn take_queued(self: &Arc<Self>) {
        let limit = self.permits.available_permits();
        if !self.accepting() || limit == 0 {
            return;
        }
        let claim = QueueClaim {
            worker: &self.options.worker,
            at: Utc::now(),
            stale_after: self.stale_after(),
            limit,
        };
        match self.store.claim_queued(&claim).await {
            Ok(runs) => {
                for run in runs {
                    self.drive_taken(run);
                }
            }
            Err(error) => tracing::error!(%error, "cannot take queued runs"),
        }
    }

    /// Drives a queued run whose lane the dispatcher claimed for this worker (unless it is
    /// driven here already).
    fn drive_taken(self: &Arc<Self>, run: QueuedRun) {
        {
            let mut lanes = self.lock_lanes();
            let lane = lanes.entry(run.session_id.clone()).or_default();
            lane.remove(&run.run_id);
            if lane.running.is_none() {
                lane.running = Some(run.run_id.clone());
            }
        }
        let Some(control) = self.boundaries.add(&run.run_id) else {
            return;
        };
        self.watch_report(&run.run_id);
        let engine = self.clone();
        self.tasks
            .spawn(async move { engine.drive_queued(run, Vec::new(), control).await });
    }

    /// When a lane's holder counts as gone.
    pub(super) fn stale_after(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.options.reconcile.stale_after).unwrap_or_default()
    }

    /// In shared mode, whether `run_id` is still queued in the store (no worker started it,
    /// nobody cancelled it).
    pub(super) async fn still_queued(&self, run_id: &str) -> bool {
        !self.shared()
            || matches!(
                self.store.run(run_id).await,
                Ok(Some(run)) if run.state == AgentState::Queued
            )
    }

    /// In shared mode, whether a stored run this worker just claimed to continue still waits to
    /// be (another worker may have continued it to its end before this claim).
    pub(super) async fn still_continuable(&self, run_id: &str) -> bool {
        !self.shared()
            || matches!(
                self.store.run(run_id).await,
                Ok(Some(run)) if matches!(
                    run.state,
                    AgentState::WaitingOnHuman
                        | AgentState::TimedOut
                        | AgentState::Running
                        | AgentState::WaitingForTool
                )
            )
    }

    /// A run this process meant to drive is driven (or was ended) by another worker: it is
    /// let go here, its lane given back when this claim took a lane nobody held for a run
    /// that already ended, the runs `collect` would have folded into it wait again, and the
    /// lane's next run starts.
    pub(super) async fn given_up(
        self: &Arc<Self>,
        session_id: &str,
        run_id: &str,
        held: bool,
        folded: Vec<QueuedRun>,
    ) {
        if held
            && let Ok(Some(run)) = self.store.run(run_id).await
            && run.state.is_terminal()
            && run.state != AgentState::TimedOut
        {
            let _ = self.store.release_session(session_id, run_id).await;
        }
        tracing::debug!(run_id, "another worker drives this run");
        if !folded.is_empty() {
            let mut lanes = self.lock_lanes();
            let lane = lanes.entry(session_id.to_string()).or_default();
            for run in folded.into_iter().rev() {
                lane.queued.push_front(run);
            }
        }
        self.abandon(session_id, run_id);
        self.pump(session_id);
    }

    /// The report of `run_id` once the store has it (a run driven by another worker), looked
    /// for every [`REPORT_POLL`] until the engine stops.
    pub(super) async fn report_from_store(&self, run_id: &str) -> Result<RunReport, EngineError> {
        loop {
            if let Some(report) = stored_report(self.store.as_ref(), run_id).await? {
                return Ok(report);
            }
            if self.store.run(run_id).await?.is_none() {
                return Err(EngineError::NotFound(run_id.to_string()));
            }
            tokio::select! {
                _ = tokio::time::sleep(REPORT_POLL) => {}
                _ = self.stopping.cancelled() => return self.report(run_id).await,
            }
        }
    }
}
