//! How a run stops short of an answer: a user's cancel, the soft and hard time limits, keel's
//! own failure, a spent monthly budget.

use std::time::Duration;

use super::{Run, SoftLimit, Step, durable};
use crate::event::EventKind;
use crate::state::{AgentState, ErrorReason};

/// What a user is answered when keel itself failed during their run (seed 003).
pub const INTERNAL_ERROR_ANSWER: &str = "I encountered an internal error. Please try again.";

impl Run {
    /// Stops the run at a user's request. Nothing more is written to the transcript.
    pub fn cancel(&mut self) -> Step {
        if self.state.is_terminal() {
            return Step::Finish;
        }
        self.next = durable::NextStep::Finish;
        self.pending.clear();
        self.state = AgentState::Cancelled;
        self.events.push(EventKind::RunCancelled {
            iterations: self.iteration,
        });
        Step::Finish
    }

    /// Notes that the soft time limit passed: the next model call is a last turn that
    /// summarizes, without tools.
    pub fn on_soft_limit(&mut self) {
        if self.soft_limit == SoftLimit::NotReached && !self.state.is_terminal() {
            self.soft_limit = SoftLimit::Reached;
            self.events.push(EventKind::SoftLimit {
                iterations: self.iteration,
            });
        }
    }

    /// Ends the run at the hard time limit.
    pub fn on_hard_limit(&mut self, limit: Duration) -> Step {
        if self.state.is_terminal() {
            return Step::Finish;
        }
        self.fail(
            AgentState::TimedOut,
            None,
            format!(
                "stopped at the hard time limit of {} s",
                limit.as_secs_f64()
            ),
        )
    }

    /// Ends the run in `error (internal)` because keel itself failed (a panic, the store):
    /// `message` is the detail kept for the operator, and the answer the user gets is
    /// [`INTERNAL_ERROR_ANSWER`] (seed 003), never the detail.
    pub fn fail_internal(&mut self, message: impl Into<String>) -> Step {
        if self.state.is_terminal() {
            return Step::Finish;
        }
        self.next = durable::NextStep::Finish;
        self.approval = None;
        self.question = None;
        let step = self.fail(
            AgentState::Error,
            Some(ErrorReason::Internal),
            message.into(),
        );
        self.final_text = Some(INTERNAL_ERROR_ANSWER.to_string());
        step
    }

    /// Ends the run as `budget_exceeded` before it starts (a user's monthly budget is spent).
    pub fn refuse_over_budget(&mut self, message: impl Into<String>) -> Step {
        self.fail(AgentState::BudgetExceeded, None, message.into())
    }
}
