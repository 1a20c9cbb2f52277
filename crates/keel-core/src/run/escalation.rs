//! The run's answers to what the model does beyond calling tools: climbing the loop guard's
//! ladder, the agent-level tools the loop answers itself, and the note written when the
//! iteration limit ends a run.

use std::collections::BTreeMap;

use super::{Run, Step, ToolResult};
use crate::agent_tools;
use crate::event::EventKind;
use crate::extension::{LoopAnswer, LoopTurn};
use crate::loop_guard::{Detection, Escalation};
use crate::message::{InternalReason, Message, ToolCall};
use crate::provider::ToolChoice;
use crate::state::{AgentState, ErrorReason};

impl Run {
    /// Climbs the loop guard's ladder; returns the final step when the run must stop.
    pub(super) fn escalate(&mut self, detection: Detection) -> Option<Step> {
        let human = self.settings.human_reachable && self.has_tool("ask_human");
        let escalation = self.guard.escalate(&detection, human);
        self.events.push(EventKind::LoopDetected {
            tier: detection.tier().to_string(),
            tool: detection.tool().map(str::to_string),
            level: escalation.level(),
        });
        let (action, message) = match &escalation {
            Escalation::Nudge(m) => ("nudge", m.clone()),
            Escalation::Directive(m) => ("directive", m.clone()),
            Escalation::AskHuman(m) => ("ask_human", m.clone()),
            Escalation::Stuck(m) => ("stuck", m.clone()),
        };
        self.events.push(EventKind::GuardrailEscalated {
            level: escalation.level(),
            action: action.to_string(),
            message: message.clone(),
        });
        match escalation {
            Escalation::Stuck(message) => {
                Some(self.fail(AgentState::Error, Some(ErrorReason::Stuck), message))
            }
            Escalation::Nudge(message) => {
                self.push(Message::internal_user(message, InternalReason::LoopNudge));
                None
            }
            Escalation::Directive(message) => {
                self.push(Message::internal_user(message, InternalReason::LoopNudge));
                self.next_tool_choice = Some(ToolChoice::None);
                None
            }
            Escalation::AskHuman(message) => {
                self.push(Message::internal_user(message, InternalReason::LoopNudge));
                self.next_tool_choice = Some(ToolChoice::Tool("ask_human".into()));
                None
            }
        }
    }

    /// Answers a call the loop handles itself: `None` for `ask_human`, whose answer comes
    /// from the human later.
    pub(super) fn answer_agent_tool(&mut self, call: &ToolCall) -> Option<ToolResult> {
        let result = |ok: bool, content: String| {
            Some(ToolResult {
                call_id: call.id.clone(),
                ok,
                content,
            })
        };
        if self.tool_choice == ToolChoice::None {
            return result(
                false,
                format!(
                    "Error: `{}` was not run: tools are not allowed on this turn. Answer with \
                     what you have.",
                    call.name
                ),
            );
        }
        let args: serde_json::Value = match serde_json::from_str(call.arguments.trim()) {
            Ok(args) => args,
            Err(e) if !call.arguments.trim().is_empty() => {
                return result(
                    false,
                    format!("Error: the arguments are not valid JSON ({e})."),
                );
            }
            Err(_) => serde_json::json!({}),
        };
        // Interactive: one question per batch, asked after the batch's other calls.
        let interactive = call.name == agent_tools::ASK_HUMAN
            || self
                .tools
                .iter()
                .any(|tool| tool.name == call.name && tool.interactive);
        if interactive && self.question.is_some() {
            return result(
                false,
                "Error: one question at a time: this batch asks one already. Ask again \
                 after its answer if you still need to."
                    .into(),
            );
        }
        let answer = if call.name == agent_tools::ASK_HUMAN {
            match args["question"].as_str().unwrap_or("").trim() {
                "" => LoopAnswer::Err("Error: give the `question` to ask.".into()),
                text => LoopAnswer::Ask(text.into()),
            }
        } else {
            let Some(extension) = self.loop_extension(&call.name) else {
                return result(
                    false,
                    format!("Error: `{}` is not one of your tools here.", call.name),
                );
            };
            let mut turn = LoopTurn {
                journal: &mut self.journal,
                journal_changed: false,
                iteration_limit: &mut self.iteration_limit,
                iteration_cap: self.settings.iteration_cap,
                events: Vec::new(),
            };
            let answer = extension.answer(call, &args, &mut turn);
            self.journal_changed |= turn.journal_changed;
            let events = turn.events;
            self.events.extend(events);
            answer
        };
        match answer {
            LoopAnswer::Ok(content) => result(true, content),
            LoopAnswer::Err(content) => result(false, content),
            LoopAnswer::Ask(question) => {
                self.question = Some((call.id.clone(), question.text));
                self.question_choices = question.choices;
                None
            }
        }
    }

    /// What the run did before the iteration limit stopped it, for the user.
    pub(super) fn iteration_limit_summary(&self) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for call in &self.tool_calls {
            *counts.entry(call.name.as_str()).or_default() += 1;
        }
        let done = if counts.is_empty() {
            "no tool calls".to_string()
        } else {
            counts
                .iter()
                .map(|(name, n)| format!("{name} ×{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "Stopped: reached the limit of {} iterations before a final answer. Done so far: {done}. \
             Send another message to continue, or raise max_iterations.",
            self.iteration_limit
        )
    }
}
