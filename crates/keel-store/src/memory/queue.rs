//! The memory store's share of many workers taking queued runs
//! ([`keel_platform::ConversationStore::claim_queued`]): each session's oldest queued run whose
//! lane is free, claimed for the worker under the store's one lock.

use keel_core::lane::LaneHolder;
use keel_core::state::AgentState;
use keel_platform::conversation::{QueueClaim, QueuedRun};

use super::Data;

impl Data {
    /// Claims the lanes of the oldest queued runs whose sessions' lanes are free (see
    /// [`keel_platform::ConversationStore::claim_queued`]).
    pub(super) fn claim_queued(&mut self, claim: &QueueClaim<'_>) -> Vec<QueuedRun> {
        let mut heads: Vec<QueuedRun> = Vec::new();
        for queued in &self.queue {
            if !heads
                .iter()
                .any(|head| head.session_id == queued.session_id)
            {
                heads.push(queued.clone());
            }
        }
        heads.retain(|head| self.lane_is_free_for_queue(&head.session_id, claim));
        heads.truncate(claim.limit);
        for head in &heads {
            self.lanes.insert(
                head.session_id.clone(),
                LaneHolder {
                    run_id: head.run_id.clone(),
                    worker: claim.worker.to_string(),
                    claimed_at: claim.at,
                    paused: false,
                },
            );
        }
        heads
    }

    /// Whether a queued run may take `session_id`'s lane now: nobody holds it, or its holder
    /// lapsed without executing (keel-core's lane rules; an executing holder, even a silent
    /// one, is the reconciler's to end first).
    fn lane_is_free_for_queue(&self, session_id: &str, claim: &QueueClaim<'_>) -> bool {
        let Some(holder) = self.lanes.get(session_id) else {
            return true;
        };
        let cutoff = claim.at - claim.stale_after;
        let Some(run) = self.runs.get(&holder.run_id) else {
            return holder.claimed_at <= cutoff;
        };
        match run.state {
            state if state.is_terminal() => true,
            AgentState::WaitingOnHuman => run.cancel_requested_at.is_some(),
            AgentState::Queued => [
                Some(holder.claimed_at),
                run.heartbeat_at,
                Some(run.updated_at),
            ]
            .into_iter()
            .flatten()
            .all(|seen| seen <= cutoff),
            _ => false,
        }
    }
}
