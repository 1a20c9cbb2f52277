//! The reconciler (seed 001): runs whose worker died leave a stale heartbeat; it marks them
//! `timed_out`, offering resume when the latest checkpoint allows it (at once when the worker
//! process is known to be gone, see [`crate::worker`]), and cancels runs paused
//! for a human whose cancel request is older than the cancel timeout. keel runs it on every
//! start and periodically in long-running processes.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::event::{Event, EventKind};
use crate::state::AgentState;
use crate::store::{Commit, RunRecord, Store, StoreError};
use crate::worker::{NoProbe, Worker, WorkerProbe, worker_gone};

/// When a run counts as abandoned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReconcilePolicy {
    /// A running run whose heartbeat is older than this lost its worker.
    pub stale_after: Duration,
    /// A paused run whose cancel was requested longer ago than this is cancelled.
    pub cancel_timeout: Duration,
}

impl Default for ReconcilePolicy {
    fn default() -> Self {
        ReconcilePolicy {
            stale_after: Duration::from_secs(60),
            cancel_timeout: Duration::from_secs(180),
        }
    }
}

/// What one pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Runs marked `timed_out`.
    pub timed_out: usize,
    /// Of those, how many can be resumed.
    pub resumable: usize,
    /// Runs marked `cancelled`.
    pub cancelled: usize,
}

impl ReconcileReport {
    /// The pass as an `agent_run.reconcile` event.
    pub fn event(&self, at: DateTime<Utc>) -> Event {
        Event {
            ts: at,
            run_id: String::new(),
            session_id: String::new(),
            kind: EventKind::Reconcile {
                timed_out: self.timed_out,
                resumable: self.resumable,
                cancelled: self.cancelled,
            },
        }
    }
}

/// True when a run in `state` whose heartbeat is `heartbeat` has lost its worker at `now`.
pub fn is_stale(
    state: AgentState,
    heartbeat: Option<DateTime<Utc>>,
    started: DateTime<Utc>,
    now: DateTime<Utc>,
    policy: &ReconcilePolicy,
) -> bool {
    let alive_at = heartbeat.unwrap_or(started);
    // A queued run has no worker yet: it waits for its lane, which is the daemon's queue's
    // business, however long that takes.
    matches!(state, AgentState::Running | AgentState::WaitingForTool)
        && (now - alive_at).to_std().unwrap_or_default() > policy.stale_after
}

/// Why a running run counts as abandoned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Abandoned {
    /// Its worker process is gone (it was killed, or stopped at a safe point on SIGTERM).
    WorkerGone(Worker),
    /// Its heartbeat is older than the policy allows.
    Stale,
}

/// Whether `run`, if it is running, lost its worker at `now`: its recorded worker is gone, or
/// (when that cannot be told, e.g. it ran on another host) its heartbeat is stale.
pub fn abandoned(
    run: &RunRecord,
    now: DateTime<Utc>,
    policy: &ReconcilePolicy,
    probe: &dyn WorkerProbe,
) -> Option<Abandoned> {
    if !matches!(run.state, AgentState::Running | AgentState::WaitingForTool) {
        return None;
    }
    match &run.worker {
        Some(worker) if worker_gone(probe, Some(worker)) => {
            Some(Abandoned::WorkerGone(worker.clone()))
        }
        _ => is_stale(run.state, run.heartbeat_at, run.started_at, now, policy)
            .then_some(Abandoned::Stale),
    }
}

/// One pass over the store's active runs, by heartbeats only.
pub async fn reconcile(
    store: &dyn Store,
    now: DateTime<Utc>,
    policy: &ReconcilePolicy,
) -> Result<ReconcileReport, StoreError> {
    reconcile_with(store, now, policy, &NoProbe).await
}

/// One pass over the store's active runs: a run whose worker `probe` finds gone is taken at
/// once, others when their heartbeat is stale.
pub async fn reconcile_with(
    store: &dyn Store,
    now: DateTime<Utc>,
    policy: &ReconcilePolicy,
    probe: &dyn WorkerProbe,
) -> Result<ReconcileReport, StoreError> {
    let mut report = ReconcileReport::default();
    for mut run in store.active_runs().await? {
        if let Some(why) = abandoned(&run, now, policy, probe) {
            let checkpoint = store.latest_checkpoint(&run.id).await?;
            run.resume_available = checkpoint.is_some_and(|c| c.boundary.resumable());
            run.state = AgentState::TimedOut;
            let what = match why {
                Abandoned::WorkerGone(worker) => format!("its worker ({worker}) is gone"),
                Abandoned::Stale => format!(
                    "its worker stopped responding (no heartbeat for more than {} s)",
                    policy.stale_after.as_secs()
                ),
            };
            run.error = Some(format!(
                "{what}{}",
                if run.resume_available {
                    "; resume it with `keel resume`"
                } else {
                    ""
                }
            ));
            run.updated_at = now;
            run.finished_at = Some(now);
            store.commit(&Commit::new(&run, &[])).await?;
            report.timed_out += 1;
            report.resumable += usize::from(run.resume_available);
        } else if run.state == AgentState::WaitingOnHuman
            && run
                .cancel_requested_at
                .is_some_and(|at| (now - at).to_std().unwrap_or_default() > policy.cancel_timeout)
        {
            run.state = AgentState::Cancelled;
            run.updated_at = now;
            run.finished_at = Some(now);
            store.commit(&Commit::new(&run, &[])).await?;
            report.cancelled += 1;
        }
    }
    Ok(report)
}
