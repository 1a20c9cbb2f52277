//! What each callback receives. The owned payloads are also the data of the events they come
//! from (one source of truth); [`ToolProgress`] and [`Thinking`] are views of existing events.

use serde::{Deserialize, Serialize};

use crate::provider::Usage;
use crate::state::AgentState;

/// What a run is doing, as the `agent.status` event says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// A model call is in flight (or waits out a retry's backoff).
    Thinking,
    /// The model's tool calls are running.
    Executing,
    /// Older messages are being summarized to fit the context window.
    Compacting,
    /// A tool call waits for a person's approval.
    WaitingForApproval,
    /// The model asked the human a question and waits for the answer.
    WaitingForHuman,
    /// The run reached a terminal state.
    Finished,
}

impl RunStatus {
    /// The snake_case name used in events and output.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Thinking => "thinking",
            RunStatus::Executing => "executing",
            RunStatus::Compacting => "compacting",
            RunStatus::WaitingForApproval => "waiting_for_approval",
            RunStatus::WaitingForHuman => "waiting_for_human",
            RunStatus::Finished => "finished",
        }
    }
}

/// A run's status changed (`agent.status`; live only, never stored).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusChange {
    /// What the run does now.
    pub status: RunStatus,
    /// What it did before, since the driver took it up (`None` the first time).
    pub previous: Option<RunStatus>,
    /// The model call the run is at (1-based; 0 before the first).
    pub iteration: u32,
    /// The run's state (terminal once `status` is `finished`).
    pub state: AgentState,
}

/// The model is, or stopped, thinking: a view of [`StatusChange`] for a "thinking…" indicator.
/// `Started` when a model call begins; `Stopped` when the run moves on from it (the answer
/// arrived, the call failed for good, or the run was cancelled). Retries of the same call are
/// one thinking spell; each new model call is a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Thinking {
    /// A model call began.
    Started {
        /// Its iteration, 1-based.
        iteration: u32,
    },
    /// The call is over.
    Stopped,
}

/// The reasoning text of one model answer (`agent.model.reasoning`; live only: the text is
/// stored on the assistant message). Sent once per answer that carried reasoning text, whole,
/// streamed or not; the pieces of a streamed one also arrive as [`StreamDelta::Reasoning`].
///
/// [`StreamDelta::Reasoning`]: crate::provider::StreamDelta::Reasoning
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelReasoning {
    /// The model call it came with, 1-based.
    pub iteration: u32,
    /// The reasoning, as the provider exposed it (a summary for some models).
    pub text: String,
}

/// A tool call of a model answer, parsed whole (`agent.tool_call.parsed`; live only: the call
/// is stored on the assistant message). Sent when the answer is complete, before the loop
/// guard, approvals and hooks see the call and before it runs; its pieces also arrive as
/// stream deltas while a streamed answer comes in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParsedToolCall {
    /// The model call it came with, 1-based.
    pub iteration: u32,
    /// Its position among the answer's calls, from 0.
    pub index: usize,
    /// Call id.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// Raw JSON arguments, as the model wrote them.
    pub arguments: String,
}

/// One complete agent turn (`agent.step.completed`, stored): the model answered and every
/// tool call it asked for has its result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepSummary {
    /// The turn's model call, 1-based.
    pub iteration: u32,
    /// The tools the turn called, in call order (the loop's own tools included); empty when
    /// the model answered with text.
    pub tools: Vec<String>,
    /// Tokens the run used so far.
    pub usage: Usage,
}

/// A tool call began, is retried, or ended: a view of `agent.tool.started`,
/// `agent.tool.retry` and `agent.tool.completed`, borrowing from the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolProgress<'a> {
    /// Before the tool runs.
    Started {
        /// Call id.
        call_id: &'a str,
        /// Tool name.
        name: &'a str,
        /// Raw JSON arguments.
        arguments: &'a str,
    },
    /// A transient failure of an idempotent tool; it runs again after `wait_ms`.
    Retrying {
        /// Call id.
        call_id: &'a str,
        /// Tool name.
        name: &'a str,
        /// The retry number, from 1.
        attempt: u32,
        /// The wait before it.
        wait_ms: u64,
        /// What went wrong.
        error: &'a str,
    },
    /// After the tool ran.
    Completed {
        /// Call id.
        call_id: &'a str,
        /// Tool name.
        name: &'a str,
        /// False when the result is an error.
        ok: bool,
        /// The result as the model sees it.
        output: &'a str,
        /// How long the call took.
        duration_ms: u64,
    },
}
