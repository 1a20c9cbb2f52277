//! The memory flush (seed 004, "memory is flushed first"): before a compaction drops or
//! summarizes older messages, the model gets one turn whose only tools are `memory` and `todo`
//! to save what it must remember; then the compaction runs.
//!
//! The flush is part of the run's state, so it is durable like every other step: a crash before
//! the model answers asks again (nothing was recorded), a crash after its calls ran goes on to
//! the compaction. It is bounded: one turn per compaction, whatever the model answers, and
//! none when the run does not offer `memory`.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Run, Step, ToolResult};
use crate::event::EventKind;
use crate::memory_notes::{MEMORY, MemorySnapshot};
use crate::message::{InternalReason, Message, ToolCall};
use crate::provider::ToolChoice;
use crate::state::AgentState;
use crate::todo::TODO;
use crate::tool::ToolSpec;

/// What the model is asked on its flush turn.
pub const FLUSH_PROMPT: &str = "Older messages of this conversation are about to be summarized \
to save space, and their details will be lost. First save anything worth keeping beyond this \
conversation with the `memory` tool (durable facts about the environment or the task, the \
user's preferences), and bring your `todo` list up to date if you keep one. Only `memory` and \
`todo` can be called on this turn. If there is nothing to save, answer with one short sentence.";

/// The tools of the flush turn.
const FLUSH_TOOLS: [&str; 2] = [MEMORY, TODO];

/// Where the run stands with the flush of the coming compaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Flush {
    /// No flush yet for the coming compaction.
    #[default]
    Idle,
    /// The flush turn is under way; `from` is the number of tool calls before it.
    Asked { from: usize },
    /// The flush is over; the compaction may run.
    Done,
}

impl Run {
    /// Before a compaction: the flush turn when it is owed, else `None` (and the compaction
    /// may go on).
    pub(super) fn flush_before_compaction(&mut self) -> Option<Step> {
        match self.flush {
            Flush::Done => None,
            Flush::Asked { from } => {
                let saved = self.tool_calls[from.min(self.tool_calls.len())..]
                    .iter()
                    .filter(|call| call.name == MEMORY && call.ok)
                    .count();
                self.flush = Flush::Done;
                self.events.push(EventKind::MemoryFlushed { saved });
                None
            }
            Flush::Idle if !self.has_tool(MEMORY) => None,
            Flush::Idle => {
                self.flush = Flush::Asked {
                    from: self.tool_calls.len(),
                };
                self.push(Message::internal_user(
                    FLUSH_PROMPT,
                    InternalReason::MemoryFlush,
                ));
                self.tool_choice = ToolChoice::Auto;
                self.iteration += 1;
                self.retries = 0;
                self.state = AgentState::Running;
                Some(Step::CallModel(self.model_call(Duration::ZERO)))
            }
        }
    }

    /// The run with the session's memory snapshot, taken for it just now: kept with the
    /// session's journal at the first commit, for the session's later runs.
    pub fn with_new_memory_snapshot(mut self, snapshot: MemorySnapshot) -> Self {
        self.journal.memory_snapshot = Some(snapshot);
        self.journal_changed = true;
        self
    }

    /// True while the flush turn is under way.
    pub(super) fn flushing(&self) -> bool {
        matches!(self.flush, Flush::Asked { .. })
    }

    /// The compaction ran (or is no longer needed): the next one gets its own flush.
    pub(super) fn reset_flush(&mut self) {
        self.flush = Flush::Idle;
    }

    /// The tools the next request offers: only the flush tools on the flush turn.
    pub(super) fn offered_tools(&self) -> Arc<[ToolSpec]> {
        if !self.flushing() {
            return self.tools.clone();
        }
        self.tools
            .iter()
            .filter(|tool| FLUSH_TOOLS.contains(&tool.name.as_str()))
            .cloned()
            .collect()
    }

    /// The refusal of a call the flush turn does not allow; `None` when it may run.
    pub(super) fn refuse_outside_flush(&self, call: &ToolCall) -> Option<ToolResult> {
        (self.flushing() && !FLUSH_TOOLS.contains(&call.name.as_str())).then(|| ToolResult {
            call_id: call.id.clone(),
            ok: false,
            content: format!(
                "Error: `{}` was not run: only `memory` and `todo` can be called while saving \
                 before the summary. Call it again afterwards if you still need it.",
                call.name
            ),
        })
    }
}
