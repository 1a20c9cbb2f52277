//! A run waiting in the daemon for approval of a tool call with nobody deciding is denied once
//! `[tools] approval_timeout_secs` passed since it paused — counted from its pause checkpoint,
//! so the clock survives a restart.

use std::sync::Arc;

use chrono::Utc;
use keel_core::{AgentState, ApprovalDecision, StoreError};

use super::Engine;

impl Engine {
    /// Denies `run_id`'s pending call when its time is up, unless someone decided first.
    pub(super) fn deny_when_due(self: &Arc<Self>, run_id: String) {
        let Some(timeout) = self
            .agent
            .get()
            .map(|agent| agent.settings().approval_timeout)
        else {
            return;
        };
        let engine = Arc::downgrade(self);
        let stopping = self.stopping.clone();
        tokio::spawn(async move {
            loop {
                let Some(this) = engine.upgrade() else { return };
                let Ok(Some(checkpoint)) = this.store.latest_checkpoint(&run_id).await else {
                    return;
                };
                let waits = super::report::pending_approval(this.store.as_ref(), &run_id)
                    .await
                    .ok()
                    .flatten()
                    .is_some();
                if !waits {
                    return;
                }
                let since = (Utc::now() - checkpoint.created_at)
                    .to_std()
                    .unwrap_or_default();
                let Some(left) = timeout.checked_sub(since).filter(|left| !left.is_zero()) else {
                    if let Err(error) = this.approve(&run_id, ApprovalDecision::Deny).await {
                        tracing::warn!(%error, run_id, "cannot deny an approval that timed out");
                    }
                    return;
                };
                drop(this);
                tokio::select! {
                    _ = tokio::time::sleep(left) => {}
                    _ = stopping.cancelled() => return,
                }
            }
        });
    }

    /// Starts the approval clock of every run waiting (at start, after a restart).
    pub(super) async fn watch_waiting_approvals(self: &Arc<Self>) -> Result<(), StoreError> {
        for run in self.runs_in(AgentState::WaitingOnHuman).await? {
            if run.reason.is_none() {
                self.deny_when_due(run.id);
            }
        }
        Ok(())
    }
}
