//! What a run and its driver hand each other: the step to perform, a model call, a tool's
//! result, and the report of a tool call.

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::Run;
use crate::approval::PendingApproval;
use crate::message::ToolCall;
use crate::provider::ChatRequest;

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

/// The outcome of one tool call, as the driver hands it back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The call it answers.
    pub call_id: String,
    /// False when `content` is an error message.
    pub ok: bool,
    /// What the model will see (already cut to size).
    pub content: String,
}

/// One tool call of a run, as reported at the end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallReport {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments: parsed JSON when they were valid JSON, else the raw text.
    pub arguments: serde_json::Value,
    /// False when the tool failed or the call was refused.
    pub ok: bool,
    /// What the model saw.
    pub output: String,
}

impl ToolCallReport {
    /// A call's raw arguments as a report shows them: the JSON they hold, or the text itself
    /// when it is not JSON.
    pub fn arguments_of(raw: &str) -> serde_json::Value {
        serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_string()))
    }
}
