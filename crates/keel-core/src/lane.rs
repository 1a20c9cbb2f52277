//! Session lanes: at most one active run per conversation, enforced by the store (a claim made
//! in a transaction), so two processes never interleave their turns in one session.
//!
//! A run claims its session's lane before it reads the history ([`crate::Store::claim_session`]);
//! the claim is released in the same transaction as the run's terminal commit, or by
//! [`crate::Store::release_session`] when the run never got that far. While it is held, another
//! claim gets [`LaneOutcome::Busy`] and may wait and try again.
//!
//! A claim never blocks forever on a dead worker. The lane is free again when its holder:
//! - reached a terminal state (whoever wrote it: the loop, the reconciler, a resume);
//! - is running, but nothing of it was seen (its claim, a heartbeat, a commit) for longer than
//!   the claim's `stale_after`: its worker is gone, and the claim is taken over;
//! - is paused (`waiting_on_human`) and someone asked it to stop.
//!
//! A paused run keeps its lane, whatever its heartbeat: the answer (`keel answer`) continues
//! that run, and a new turn started before it would put messages between the question and its
//! answer. [`LaneHolder::paused`] says so, so a caller can tell the user instead of waiting.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::state::AgentState;
use crate::store::RunRecord;

/// What a message for a conversation that is busy (a run running or queued) does: the
/// double-texting policies (seeds 001 and 004, issue 34). keel-server's engine applies them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LanePolicy {
    /// Wait in the lane's FIFO queue until the runs before it end (seed 001).
    #[default]
    Queue,
    /// Cancel the running run at its next safe point, then run (seed 004). A tool call in
    /// flight finishes and its result is recorded; the boundary after it cancels.
    Interrupt,
    /// Refuse the message while the lane has a run running or queued (HTTP 409; a short
    /// reply on a chat platform). Nothing is stored as a run.
    Reject,
    /// Join the running run at its next boundary, before its next model call.
    Steer,
    /// Coalesce the messages that arrive while a run works (or within a quiet window after
    /// the first) into one follow-up run, each line marked with its arrival time.
    Collect,
    /// Cancel the running run and hide its messages from the conversation's history (kept in
    /// the store, marked), then run the new message.
    Rollback,
}

impl LanePolicy {
    /// Every policy, in the order the documentation lists them.
    pub const ALL: [LanePolicy; 6] = [
        LanePolicy::Queue,
        LanePolicy::Interrupt,
        LanePolicy::Reject,
        LanePolicy::Steer,
        LanePolicy::Collect,
        LanePolicy::Rollback,
    ];

    /// The policy's name, as stored and as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            LanePolicy::Queue => "queue",
            LanePolicy::Interrupt => "interrupt",
            LanePolicy::Reject => "reject",
            LanePolicy::Steer => "steer",
            LanePolicy::Collect => "collect",
            LanePolicy::Rollback => "rollback",
        }
    }

    /// The policy named `name` (one of [`LanePolicy::ALL`]'s names).
    pub fn parse(name: &str) -> Option<LanePolicy> {
        LanePolicy::ALL
            .into_iter()
            .find(|policy| policy.as_str() == name)
    }

    /// The names accepted, for error messages: `"queue", "interrupt", …`.
    pub fn names() -> String {
        LanePolicy::ALL
            .iter()
            .map(|policy| format!("\"{}\"", policy.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A request for a session's lane.
#[derive(Clone, Copy, Debug)]
pub struct LaneClaim<'a> {
    /// The session (created if missing).
    pub session_id: &'a str,
    /// The run that will hold the lane; claiming again for the same run succeeds.
    pub run_id: &'a str,
    /// Who runs it, e.g. `host:pid`: for people reading a busy lane.
    pub worker: &'a str,
    /// Now.
    pub at: DateTime<Utc>,
    /// A running holder silent this long lost its worker: its claim is taken over.
    pub stale_after: Duration,
}

/// The run holding a lane.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaneHolder {
    /// The run.
    pub run_id: String,
    /// Its worker, as it claimed the lane.
    pub worker: String,
    /// When it claimed the lane.
    pub claimed_at: DateTime<Utc>,
    /// The run waits for a human: the lane stays held until it is answered or cancelled.
    pub paused: bool,
}

/// What a claim got.
#[derive(Clone, Debug, PartialEq)]
pub enum LaneOutcome {
    /// The lane is the run's now.
    Claimed,
    /// Another run holds it.
    Busy(LaneHolder),
}

/// Whether the lane claimed by `holder_run_id` at `claimed_at` is still held by it, given its
/// run record (`None`: not stored yet) and the claim asking for it. Every store decides with
/// these rules (the SQL store in SQL, with the same meaning).
pub fn lane_is_held(
    holder_run_id: &str,
    claimed_at: DateTime<Utc>,
    run: Option<&RunRecord>,
    claim: &LaneClaim<'_>,
) -> bool {
    if holder_run_id == claim.run_id {
        return false;
    }
    let Some(run) = run else {
        return claimed_at > claim.at - claim.stale_after;
    };
    match run.state {
        state if state.is_terminal() => false,
        AgentState::WaitingOnHuman => run.cancel_requested_at.is_none(),
        _ => {
            let seen = [Some(claimed_at), run.heartbeat_at, Some(run.updated_at)]
                .into_iter()
                .flatten()
                .max()
                .unwrap_or(claimed_at);
            seen > claim.at - claim.stale_after
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).unwrap() + Duration::seconds(secs)
    }

    fn claim(now: i64) -> LaneClaim<'static> {
        LaneClaim {
            session_id: "s",
            run_id: "new",
            worker: "w",
            at: at(now),
            stale_after: Duration::seconds(60),
        }
    }

    fn record(state: AgentState, seen: i64) -> RunRecord {
        RunRecord {
            id: "old".into(),
            session_id: "s".into(),
            state,
            reason: None,
            provider: "p".into(),
            model: "m".into(),
            model_used: None,
            iterations: 0,
            usage: Default::default(),
            final_text: None,
            error: None,
            started_at: at(0),
            updated_at: at(0),
            finished_at: None,
            cost: 0.0,
            heartbeat_at: Some(at(seen)),
            cancel_requested_at: None,
            resume_available: false,
            launch: None,
            worker: None,
        }
    }

    #[test]
    fn a_live_run_holds_and_a_silent_one_is_taken_over() {
        let running = record(AgentState::Running, 100);
        assert!(lane_is_held("old", at(0), Some(&running), &claim(159)));
        assert!(!lane_is_held("old", at(0), Some(&running), &claim(161)));
        assert!(
            lane_is_held("old", at(0), None, &claim(59)),
            "not stored yet"
        );
        assert!(!lane_is_held("old", at(0), None, &claim(61)));
    }

    #[test]
    fn a_finished_run_never_holds_and_a_paused_one_holds_until_cancelled() {
        let done = record(AgentState::Completed, 100);
        assert!(!lane_is_held("old", at(0), Some(&done), &claim(101)));
        let mut paused = record(AgentState::WaitingOnHuman, 0);
        assert!(lane_is_held("old", at(0), Some(&paused), &claim(10_000)));
        paused.cancel_requested_at = Some(at(5));
        assert!(!lane_is_held("old", at(0), Some(&paused), &claim(10)));
    }

    #[test]
    fn the_holder_claims_again() {
        let running = record(AgentState::Running, 100);
        let mut again = claim(101);
        again.run_id = "old";
        assert!(!lane_is_held("old", at(0), Some(&running), &again));
    }
}
