//! The turn before a compaction (seed 004's memory flush, "memory is flushed first"): before a
//! compaction drops or summarizes older messages, an extension may give the model one turn whose
//! only tools are the ones it names (the memory notes' `memory` and `todo`) to save what it must
//! remember; then the compaction runs (see [`crate::extension::PreCompactionTurn`]).
//!
//! The flush is part of the run's state, so it is durable like every other step: a crash before
//! the model answers asks again (nothing was recorded), a crash after its calls ran goes on to
//! the compaction. It is bounded: one turn per compaction, whatever the model answers, and
//! none when no extension asks for one.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Run, Step, ToolResult};
use crate::event::EventKind;
use crate::extension::PreCompactionTurn;
use crate::message::{InternalReason, Message, ToolCall};
use crate::provider::ToolChoice;
use crate::state::AgentState;
use crate::tool::ToolSpec;

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
        if self.between_turns {
            // No model turn with tools between turns (see `super::between_turns`).
            return None;
        }
        match self.flush {
            Flush::Done => None,
            Flush::Asked { from } => {
                let saves_with = self.flush_turn().map_or("", |turn| turn.saves_with);
                let saved = self.tool_calls[from.min(self.tool_calls.len())..]
                    .iter()
                    .filter(|call| call.name == saves_with && call.ok)
                    .count();
                self.flush = Flush::Done;
                self.events.push(EventKind::MemoryFlushed { saved });
                None
            }
            Flush::Idle => {
                let turn = self.flush_turn()?;
                self.flush = Flush::Asked {
                    from: self.tool_calls.len(),
                };
                self.push(Message::internal_user(
                    turn.prompt,
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

    /// The turn an extension wants before a compaction of this run, if any.
    fn flush_turn(&self) -> Option<PreCompactionTurn> {
        self.settings.extensions.before_compaction(&self.tools)
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
        let Some(turn) = self.flushing().then(|| self.flush_turn()).flatten() else {
            return self.tools.clone();
        };
        self.tools
            .iter()
            .filter(|tool| turn.tools.contains(&tool.name.as_str()))
            .cloned()
            .collect()
    }

    /// The refusal of a call the flush turn does not allow; `None` when it may run.
    pub(super) fn refuse_outside_flush(&self, call: &ToolCall) -> Option<ToolResult> {
        if !self.flushing() {
            return None;
        }
        let turn = self.flush_turn()?;
        (!turn.tools.contains(&call.name.as_str())).then(|| ToolResult {
            call_id: call.id.clone(),
            ok: false,
            content: format!(
                "Error: `{}` was not run: only {} can be called while saving before the \
                 summary. Call it again afterwards if you still need it.",
                call.name,
                turn.tools
                    .iter()
                    .map(|tool| format!("`{tool}`"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        })
    }
}
