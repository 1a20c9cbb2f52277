//! What a run and its driver hand each other: the step to perform, a model call, a tool's
//! result, and the report of a tool call.

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::Run;
use crate::approval::PendingApproval;
use crate::message::ToolCall;
use crate::provider::ChatRequest;
pub use crate::tool::{ToolCallReport, ToolResult};

/// What the driver must do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Call a model and feed the result to [`Run::on_model_result`].
    CallModel(ModelCall),
    /// Run these tool calls (results in this order) and feed them to [`Run::on_tool_results`].
    RunTools(Vec<ToolCall>),
    /// Ask a model to summarize older messages (compaction) and feed the answer to
    /// [`Run::on_summary`]. Not an iteration; its deltas are not streamed.
    Summarize(ModelCall),
    /// Put this question (with its choices, for `clarify`) to the human and feed the answer to
    /// [`Run::on_human_answer`]; with no human at hand, the run waits (`waiting_on_human`) until
    /// `keel answer`.
    AskHuman(crate::human::Question),
    /// A tool call of the pending batch needs a person's approval: ask for it and feed the
    /// decision to [`Run::on_approval`]; with no one at hand, the run waits (`waiting_on_human`)
    /// until `keel approve`.
    AwaitApproval(PendingApproval),
    /// The run is over; its state is terminal.
    Finish,
}

/// One model call to make.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelCall {
    /// The provider to call (a key of the agent's providers).
    pub provider: String,
    /// What to send.
    pub request: ChatRequest,
    /// How long to wait before sending (a retry's backoff).
    pub wait: Duration,
}
