//! Compaction between turns (seed 004's gateway compression): after a run of a channel
//! conversation (one with a delivery route) completes and nothing else waits in its lane, the
//! engine compacts it in the background when its context stands above
//! [`EngineOptions::compact_between_turns`](super::EngineOptions) of the window, so the person's
//! next message is answered without a summary call first.
//!
//! The work is [`keel_core::Agent::compact_between_turns`]: it holds the session's lane in the
//! store while it works, so a message that arrives meanwhile waits in the lane as usual (its
//! run's claim loop waits for the lane), and it stores no run, so nothing is delivered for it.
//! It stops, storing nothing, when the engine stops.

use std::sync::Arc;

use keel_core::{AgentError, AgentState, BetweenTurns, RunOptions, RunReport};

use super::Engine;

/// What the conversation's next run is counted with: the user and the pipeline's choices of the
/// run that just ended (none known for a run driven again after an answer or a resume: then
/// every tool the agent has counts).
#[derive(Default)]
pub(super) struct NextTurn {
    pub(super) user_id: Option<String>,
    pub(super) options: RunOptions,
}

/// Whether a driven run's outcome is a completed run.
pub(super) fn completed(outcome: &Option<Result<RunReport, AgentError>>) -> bool {
    matches!(outcome, Some(Ok(report)) if report.state == AgentState::Completed)
}

impl Engine {
    /// After a run of `session` completed (and was let go): starts the compaction between
    /// turns in the background when it is on, the conversation has a delivery route, and no
    /// other run runs or waits in its lane here.
    pub(super) async fn compact_between_turns(self: &Arc<Self>, session: &str, next: NextTurn) {
        let above = self.options.compact_between_turns;
        if above.is_nan() || above <= 0.0 || !self.accepting() {
            return;
        }
        if self
            .lock_lanes()
            .get(session)
            .is_some_and(|lane| !lane.is_idle())
        {
            return;
        }
        match self.store.delivery(session).await {
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, session, "cannot read the conversation's delivery route");
                return;
            }
        }
        let Some(agent) = self.agent.get().cloned() else {
            return;
        };
        let request = BetweenTurns {
            session_id: session.to_string(),
            above,
            user_id: next.user_id,
            options: next.options,
            worker: self.options.worker.clone(),
            stale_after: self.options.reconcile.stale_after,
            cancel: self.stopping.child_token(),
        };
        let session = session.to_string();
        self.tasks.spawn(async move {
            match agent.compact_between_turns(request).await {
                Ok(Some(report)) => tracing::info!(
                    session,
                    before_tokens = report.before_tokens,
                    after_tokens = report.after_tokens,
                    "compacted between turns"
                ),
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, session, "compaction between turns failed"),
            }
        });
    }
}
