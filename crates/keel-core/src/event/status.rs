//! What the loop tells an embedder as a run goes (the live progress events): the data of
//! `agent.status`, `agent.model.reasoning`, `agent.tool_call.parsed` and
//! `agent.step.completed`. The driver emits them (see `progress`); `keel_extensions::callbacks`
//! hands them, typed, to an embedder's handlers.

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
