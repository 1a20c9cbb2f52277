//! Messages that join the run before its next model call (see [`crate::steering`]): when the
//! run takes them, and how they enter its transcript.

use std::time::Duration;

use super::{Run, SoftLimit, Step};
use crate::event::EventKind;
use crate::message::Message;
use crate::state::AgentState;
use crate::steering::SteerMessage;
use crate::tool::ToolResult;

impl Run {
    /// True when messages the user sent meanwhile may join the run now: it is about to call
    /// the model for its own work. Not while it summarizes at its time limit, saves memory
    /// before a compaction, continues an answer cut at its output limit or compacts between
    /// turns, nor once it has ended: those messages wait for a run of their own.
    pub fn takes_steering(&self) -> bool {
        !self.between_turns
            && !self.state.is_terminal()
            && self.state != AgentState::WaitingOnHuman
            && self.soft_limit == SoftLimit::NotReached
            && !self.flushing()
            && self.pending_summary.is_none()
            && self.continued_text.is_empty()
    }

    /// Appends `messages` (oldest first) as the user's before the model call the run owes, and
    /// returns that call made again with them, after `wait` as before. They are new messages of
    /// the run: the next boundary stores them. Nothing changes when `messages` is empty.
    pub fn on_steer(&mut self, messages: &[SteerMessage], wait: Duration) -> Step {
        if !messages.is_empty() {
            for steered in messages {
                self.push(Message::user(steered.text.clone()));
            }
            self.events.push(EventKind::LaneSteered {
                absorbed: messages.iter().map(|m| m.id.clone()).collect(),
            });
        }
        let step = Step::CallModel(self.model_call(wait));
        self.remember(step)
    }

    /// The result of each of `calls` that did not run because a steer was pending: the user
    /// changed course before the batch started.
    pub fn skipped_for_steer(calls: &[crate::message::ToolCall]) -> Vec<ToolResult> {
        calls
            .iter()
            .map(|call| ToolResult {
                call_id: call.id.clone(),
                ok: false,
                content: crate::steering::SKIPPED_FOR_STEER.to_string(),
            })
            .collect()
    }
}
