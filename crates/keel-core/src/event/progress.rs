//! What the driver tells the event stream as a run goes, for an embedder (the typed callbacks
//! read it): the run's status at each step, the reasoning and tool calls of each model answer, and each completed turn. The
//! run (the state machine) decides; this only describes what the driver is about to do.

use super::status::{ModelReasoning, ParsedToolCall, RunStatus, StatusChange, StepSummary};
use super::{Emitter, EventKind};
use crate::provider::ChatResponse;
use crate::run::{Run, Step};

/// One drive's progress: the status last told, and the turn whose model answered but which
/// is not reported complete yet.
#[derive(Default)]
pub(crate) struct Progress {
    told: Option<(RunStatus, u32)>,
    answered: Option<Answered>,
}

/// A turn whose model answered.
struct Answered {
    iteration: u32,
    /// The run's tool-call reports before this turn's.
    reports_before: usize,
    /// The calls the answer asked for.
    calls: usize,
}

impl Progress {
    /// The model of the run's current iteration answered with `response` (before the run
    /// takes it): tells what the answer carried, and remembers the turn.
    pub(crate) fn answered(&mut self, run: &Run, response: &ChatResponse, emitter: &Emitter) {
        announce_answer(emitter, run.iteration(), response);
        self.answered = Some(Answered {
            iteration: run.iteration(),
            reports_before: run.tool_calls().len(),
            calls: response.message.tool_calls.len(),
        });
    }

    /// Before the boundary that stores `step`: the turn that `step` closes (every call of the
    /// answer has its result, and the run moves on to the model or ends) is reported, and a run
    /// that ends says it is finished — both before the run's terminal event.
    pub(crate) fn before_boundary(&mut self, step: &Step, run: &Run, emitter: &Emitter) {
        if matches!(step, Step::CallModel(_) | Step::Summarize(_) | Step::Finish)
            && let Some(turn) = self.answered.take()
        {
            let reports = run.tool_calls().get(turn.reports_before..).unwrap_or(&[]);
            // Cancelled or cut by the hard limit while its tools ran: not a complete turn.
            if reports.len() == turn.calls {
                emitter.emit(EventKind::StepCompleted(StepSummary {
                    iteration: turn.iteration,
                    tools: reports.iter().map(|call| call.name.clone()).collect(),
                    usage: run.usage(),
                }));
            }
        }
        if matches!(step, Step::Finish) {
            self.tell(RunStatus::Finished, run, emitter);
        }
    }

    /// `step` (not `Finish`) is about to be performed.
    pub(crate) fn entering(&mut self, step: &Step, run: &Run, emitter: &Emitter) {
        let status = match step {
            Step::CallModel(_) => RunStatus::Thinking,
            Step::RunTools(_) => RunStatus::Executing,
            Step::Summarize(_) => RunStatus::Compacting,
            Step::AwaitApproval(_) => RunStatus::WaitingForApproval,
            Step::AskHuman(_) => RunStatus::WaitingForHuman,
            Step::Finish => RunStatus::Finished,
        };
        self.tell(status, run, emitter);
    }

    /// Emits `agent.status` when the status or the iteration changed.
    fn tell(&mut self, status: RunStatus, run: &Run, emitter: &Emitter) {
        let now = (status, run.iteration());
        if self.told == Some(now) {
            return;
        }
        let previous = self.told.replace(now).map(|(status, _)| status);
        emitter.emit(EventKind::StatusChanged(StatusChange {
            status,
            previous,
            iteration: now.1,
            state: run.state(),
        }));
    }
}

/// Tells what a model answer of `iteration` carried: its reasoning text, then each tool call
/// (with its id as the model gave it).
fn announce_answer(emitter: &Emitter, iteration: u32, response: &ChatResponse) {
    if !emitter.has_sinks() {
        return;
    }
    let message = &response.message;
    if let Some(reasoning) = message.reasoning.as_ref().filter(|r| !r.text.is_empty()) {
        emitter.emit(EventKind::ModelReasoning(ModelReasoning {
            iteration,
            text: reasoning.text.clone(),
        }));
    }
    for (index, call) in message.tool_calls.iter().enumerate() {
        emitter.emit(EventKind::ToolCallParsed(ParsedToolCall {
            iteration,
            index,
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        }));
    }
}
