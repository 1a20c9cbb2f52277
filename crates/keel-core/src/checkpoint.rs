//! Checkpoints: after every safe boundary the run's state is stored in the same transaction as
//! the data it covers, so a run can be resumed in another process (DESIGN.md section 7).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The safe boundaries of the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Boundary {
    /// The user's message is stored.
    Input,
    /// The model's answer is stored (tool calls, if any, not yet run).
    LlmResponse,
    /// A tool batch's results are stored.
    ToolResult,
    /// A compaction summary is stored.
    Compaction,
    /// The run journal changed.
    JournalUpdate,
    /// The run paused for a human.
    HumanPause,
    /// The run reached a terminal state.
    Final,
}

impl Boundary {
    /// The snake_case name used in output and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            Boundary::Input => "input",
            Boundary::LlmResponse => "llm_response",
            Boundary::ToolResult => "tool_result",
            Boundary::Compaction => "compaction",
            Boundary::JournalUpdate => "journal_update",
            Boundary::HumanPause => "human_pause",
            Boundary::Final => "final",
        }
    }

    /// True when a run whose worker died after this boundary can be resumed from it: its next
    /// step is fully determined by what is stored. `human_pause` waits for an answer and
    /// `final` has nothing left to do.
    pub fn resumable(self) -> bool {
        !matches!(self, Boundary::HumanPause | Boundary::Final)
    }
}

impl std::str::FromStr for Boundary {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(s.to_string()))
            .map_err(|_| format!("unknown boundary `{s}`"))
    }
}

/// True for a value at its default: what a checkpoint's state leaves out (and reads back as the
/// default when it is missing).
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// The state of a run at a safe boundary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The run.
    pub run_id: String,
    /// 1-based position among the run's checkpoints.
    pub seq: u32,
    /// Which boundary.
    pub boundary: Boundary,
    /// Model calls made so far.
    pub iteration: u32,
    /// Seq of the first stored message the run holds (its loaded context).
    pub message_cursor: u64,
    /// Seq of the last message the run stored (0 when none).
    pub persisted: u64,
    /// Hash of the system prompt the run was started with: a resume under another prompt
    /// halts for a human instead of guessing.
    pub prompt_hash: String,
    /// Ids of the tool calls completed so far in this run, as checkpoints written before
    /// 2026-11-25 listed them. Runs now leave it empty: nothing reads it (a restore takes the
    /// run's calls from its state and the tool-call envelope), and listing every call made
    /// each checkpoint grow with the run.
    pub completed_calls: Vec<String>,
    /// The run's own state as JSON (counters, guardrails, pending step), without its messages
    /// (those are in the store), without its frame, and without what this checkpoint's other
    /// fields hold (run id, message cursor, iteration, boundary, prompt hash).
    pub state: String,
    /// The run's frame as JSON: its settings and tool specs, which rarely change. Written with
    /// the run's first checkpoint and again only when the frame changes (a resume under a new
    /// system prompt), so a boundary stores only what is new. [`crate::Store::latest_checkpoint`]
    /// fills it in from the latest checkpoint that has one.
    pub frame: Option<String>,
    /// When it was written.
    pub created_at: DateTime<Utc>,
}

/// One tool call as the idempotency envelope records it: written before the call starts and
/// again when it completes, keyed by (run id, call id).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// The run.
    pub run_id: String,
    /// The model's call id.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// Raw JSON arguments.
    pub arguments: String,
    /// Safe to call again with the same arguments.
    pub idempotent: bool,
    /// When it was (or was about to be) started.
    pub started_at: DateTime<Utc>,
    /// When it finished; `None` while running or when the worker died mid-call.
    pub completed_at: Option<DateTime<Utc>>,
    /// Whether it succeeded, once finished.
    pub ok: Option<bool>,
    /// What the model saw, once finished.
    pub output: Option<String>,
}
