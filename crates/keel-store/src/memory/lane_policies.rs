//! The memory store's share of the double-texting policies (issue 34): queued runs folded
//! into another (`steer`, `collect`), runs rolled back (`rollback`), and a conversation's
//! policy changed.

use chrono::{DateTime, Utc};
use keel_core::lane::LanePolicy;
use keel_core::state::AgentState;

use super::Data;

impl Data {
    /// Folds queued runs into run `into`, all at once under the lock (see
    /// [`keel_platform::ConversationStore::absorb_queued`]). No outbox row, like
    /// [`Data::cancel_queued`].
    pub(super) fn absorb_queued(
        &mut self,
        into: &str,
        absorbed: &[String],
        message: Option<&str>,
        how: &str,
        at: DateTime<Utc>,
    ) -> Vec<String> {
        let Some(session) = self.runs.get(into).map(|run| run.session_id.clone()) else {
            return Vec::new();
        };
        if message.is_some() && !self.queue.iter().any(|queued| queued.run_id == into) {
            return Vec::new();
        }
        let reason = keel_platform::absorbed_reason(how, into);
        let mut taken = Vec::new();
        for run_id in absorbed {
            let Some(at_queue) = self.queue.iter().position(|queued| {
                queued.run_id == *run_id && queued.run_id != into && queued.session_id == session
            }) else {
                continue;
            };
            let Some(run) = self
                .runs
                .get_mut(run_id)
                .filter(|run| run.state == AgentState::Queued)
            else {
                continue;
            };
            run.state = AgentState::Cancelled;
            run.error = Some(reason.clone());
            run.updated_at = at;
            run.finished_at = Some(at);
            run.cancel_requested_at.get_or_insert(at);
            self.queue.remove(at_queue);
            taken.push(run_id.clone());
        }
        if let Some(message) = message
            && let Some(queued) = self.queue.iter_mut().find(|queued| queued.run_id == into)
        {
            queued.message = message.to_string();
        }
        taken
    }

    /// Sets a conversation's lane policy; false when it does not exist.
    pub(super) fn set_lane_policy(&mut self, session_id: &str, policy: LanePolicy) -> bool {
        let Some((info, _)) = self.sessions.get_mut(session_id) else {
            return false;
        };
        info.lane_policy = policy;
        true
    }

    /// Marks a run rolled back by `by`, once (see
    /// [`keel_platform::ConversationStore::roll_back_run`]).
    pub(super) fn roll_back_run(&mut self, run_id: &str, by: &str) -> bool {
        if !self.runs.contains_key(run_id) || self.rolled_back.contains_key(run_id) {
            return false;
        }
        self.rolled_back.insert(run_id.to_string(), by.to_string());
        true
    }

    /// The rolled-back runs of a session, with the runs that replaced them, by run id.
    pub(super) fn rolled_back_runs(&self, session_id: &str) -> Vec<(String, String)> {
        let mut runs: Vec<(String, String)> = self
            .rolled_back
            .iter()
            .filter(|(run, _)| {
                self.runs
                    .get(*run)
                    .is_some_and(|r| r.session_id == session_id)
            })
            .map(|(run, by)| (run.clone(), by.clone()))
            .collect();
        runs.sort();
        runs
    }
}
