//! The reconciler (seed 001): runs whose worker died leave a stale heartbeat; it marks them
//! `timed_out`, offering resume when the latest checkpoint allows it, and cancels runs paused
//! for a human whose cancel request is older than the cancel timeout. keel runs it on every
//! start and periodically in long-running processes.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::event::{Event, EventKind};
use crate::state::AgentState;
use crate::store::{Commit, Store, StoreError};

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
    matches!(
        state,
        AgentState::Queued | AgentState::Running | AgentState::WaitingForTool
    ) && (now - alive_at).to_std().unwrap_or_default() > policy.stale_after
}

/// One pass over the store's active runs.
pub async fn reconcile(
    store: &dyn Store,
    now: DateTime<Utc>,
    policy: &ReconcilePolicy,
) -> Result<ReconcileReport, StoreError> {
    let mut report = ReconcileReport::default();
    for mut run in store.active_runs().await? {
        if is_stale(run.state, run.heartbeat_at, run.started_at, now, policy) {
            let checkpoint = store.latest_checkpoint(&run.id).await?;
            run.resume_available = checkpoint.is_some_and(|c| c.boundary.resumable());
            run.state = AgentState::TimedOut;
            run.error = Some(format!(
                "its worker stopped responding (no heartbeat for more than {} s){}",
                policy.stale_after.as_secs(),
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
