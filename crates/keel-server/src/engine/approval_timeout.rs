//! A run waiting in the daemon for approval of a tool call with nobody deciding is denied once
//! `[tools] approval_timeout_secs` passed since it paused — counted from its pause checkpoint,
//! so the clock survives a restart.

use std::sync::Arc;

use chrono::Utc;
use keel_core::{AgentState, ApprovalDecision, StoreError};

use super::Engine;

impl Engine {
    /// Denies `run_id`'s pending call `call_id` (when `None`: the call it waits on now) when
    /// its time is up, unless someone decided first. The timer is bound to that call: once the
    /// run waits on another, this timer ends (that call has its own).
    pub(super) fn deny_when_due(self: &Arc<Self>, run_id: String, call_id: Option<String>) {
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
            let mut call_id = call_id;
            loop {
                let Some(this) = engine.upgrade() else { return };
                let Ok(Some(checkpoint)) = this.store.latest_checkpoint(&run_id).await else {
                    return;
                };
                let Some(pending) = super::report::pending_approval(this.store.as_ref(), &run_id)
                    .await
                    .ok()
                    .flatten()
                else {
                    return;
                };
                let watched = call_id.get_or_insert_with(|| pending.call_id.clone());
                if *watched != pending.call_id {
                    return;
                }
                let since = (Utc::now() - checkpoint.created_at)
                    .to_std()
                    .unwrap_or_default();
                let Some(left) = timeout.checked_sub(since).filter(|left| !left.is_zero()) else {
                    let denied = this.approve(&run_id, &pending.call_id, ApprovalDecision::Deny);
                    if let Err(error) = denied.await {
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
                self.deny_when_due(run.id, None);
            }
        }
        Ok(())
    }
}
