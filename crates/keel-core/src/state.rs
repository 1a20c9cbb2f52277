//! The states a run moves through, and why a run ended in `error`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a run is. The last five are terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentState {
    /// Waiting for its lane.
    Queued,
    /// Calling the model or deciding.
    Running,
    /// Tools are executing.
    WaitingForTool,
    /// Paused until a human answers.
    WaitingOnHuman,
    /// Finished with a final answer.
    Completed,
    /// Stopped at a user's request.
    Cancelled,
    /// Ran out of time.
    TimedOut,
    /// Ran out of iterations.
    MaxSteps,
    /// Ran out of tokens or money.
    BudgetExceeded,
    /// Failed; see the run's [`ErrorReason`].
    Error,
}

impl AgentState {
    /// Every state, in the order a run may pass through them (the live ones, then the ends).
    pub const ALL: [AgentState; 10] = [
        AgentState::Queued,
        AgentState::Running,
        AgentState::WaitingForTool,
        AgentState::WaitingOnHuman,
        AgentState::Completed,
        AgentState::Cancelled,
        AgentState::TimedOut,
        AgentState::MaxSteps,
        AgentState::BudgetExceeded,
        AgentState::Error,
    ];

    /// True for states a run never leaves.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            AgentState::Completed
                | AgentState::Cancelled
                | AgentState::TimedOut
                | AgentState::MaxSteps
                | AgentState::BudgetExceeded
                | AgentState::Error
        )
    }

    /// The snake_case name used in output and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentState::Queued => "queued",
            AgentState::Running => "running",
            AgentState::WaitingForTool => "waiting_for_tool",
            AgentState::WaitingOnHuman => "waiting_on_human",
            AgentState::Completed => "completed",
            AgentState::Cancelled => "cancelled",
            AgentState::TimedOut => "timed_out",
            AgentState::MaxSteps => "max_steps",
            AgentState::BudgetExceeded => "budget_exceeded",
            AgentState::Error => "error",
        }
    }
}

impl fmt::Display for AgentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state name that keel does not know.
#[derive(Debug, thiserror::Error)]
#[error("unknown run state `{0}`")]
pub struct UnknownState(pub String);

impl FromStr for AgentState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(s.to_string()))
            .map_err(|_| UnknownState(s.to_string()))
    }
}

/// Why a run ended in [`AgentState::Error`] (or paused for a human).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorReason {
    /// The model provider failed in a way retries and fallbacks could not fix.
    ProviderFatal,
    /// The loop guard found the model going in circles.
    Stuck,
    /// Resuming would risk repeating a side effect.
    ResumeUnsafe,
    /// The context could not be brought under the model's window.
    ContextExhausted,
    /// keel itself failed (the store, a bug).
    Internal,
    /// A resume found the system prompt changed since the run started.
    PromptDrift,
}

impl ErrorReason {
    /// The snake_case name used in output and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorReason::ProviderFatal => "provider_fatal",
            ErrorReason::Stuck => "stuck",
            ErrorReason::ResumeUnsafe => "resume_unsafe",
            ErrorReason::ContextExhausted => "context_exhausted",
            ErrorReason::Internal => "internal",
            ErrorReason::PromptDrift => "prompt_drift",
        }
    }
}

impl fmt::Display for ErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for state in AgentState::ALL {
            assert_eq!(state.as_str().parse::<AgentState>().unwrap(), state);
        }
        assert!("nope".parse::<AgentState>().is_err());
    }
}
