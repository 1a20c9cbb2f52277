//! What a run does with the model's answer or failure: record it, then finish, continue a cut
//! answer, run the tools it asks for, or retry, fall back or fail (the recovery policy).

use std::time::Duration;

use super::{CONTINUE_PROMPT, Run, SoftLimit, Step};
use crate::budget::BudgetStatus;
use crate::checkpoint::Boundary;
use crate::event::EventKind;
use crate::message::{InternalReason, Message, Role, ToolCall};
use crate::provider::{ChatResponse, StopReason, ToolChoice};
use crate::provider_error::ProviderError;
use crate::recovery::{self, Recovery};
use crate::state::{AgentState, ErrorReason};

impl Run {
    /// Feeds back the model's answer (or failure) and returns the next step.
    pub fn on_model_result(&mut self, result: Result<ChatResponse, ProviderError>) -> Step {
        self.boundary = Boundary::LlmResponse;
        let step = match result {
            Ok(response) => self.on_answer(response),
            Err(error) => self.on_model_error(error),
        };
        self.remember(step)
    }

    /// True when one of `calls` has the id of another of them or of a call in the history.
    /// Asked of every answer, so it compares ids in place and builds no set: ids almost never
    /// repeat, and the set of the whole history is built only when one does.
    fn repeats_a_call_id(&self, calls: &[ToolCall]) -> bool {
        calls.iter().enumerate().any(|(i, call)| {
            calls[..i].iter().any(|other| other.id == call.id)
                || self
                    .messages
                    .iter()
                    .any(|m| m.tool_calls.iter().any(|c| c.id == call.id))
        })
    }

    fn on_answer(&mut self, response: ChatResponse) -> Step {
        self.retries = 0;
        self.charge(&response);
        self.model_used = Some(response.model.clone());
        let mut message = response.message;
        message.role = Role::Assistant;
        // The stored answer says which model wrote it and what it cost in output (seed 003).
        message.meta.model = Some(response.model.clone());
        message.meta.output_tokens = Some(response.usage.output_tokens);
        if self.repeats_a_call_id(&message.tool_calls) {
            // One id per call before anything runs: two calls sharing an id (in this answer or
            // with an earlier one) would share a result and an envelope row.
            let mut used = self
                .messages
                .iter()
                .flat_map(|m| m.tool_calls.iter().map(|call| call.id.clone()))
                .collect();
            crate::fixup::make_call_ids_unique(&mut message.tool_calls, &mut used);
        }
        let text = message.content.clone();

        if self.soft_limit == SoftLimit::Summarizing {
            // The summary turn ends the run whatever the model asked for.
            message.tool_calls.clear();
            self.push_assistant(message);
            let summary = self.take_continued(text);
            self.final_text = Some(summary);
            return self.fail(
                AgentState::TimedOut,
                None,
                "stopped at the soft time limit; the answer is the model's summary".into(),
            );
        }

        let calls = message.tool_calls.clone();
        if calls.is_empty() && self.flushing() {
            // A flush turn that saved nothing leaves nothing behind: its answer is not the
            // run's, and the compaction comes next.
            return self.next_model_call();
        }
        self.push_assistant(message);
        if calls.is_empty() {
            let limit = self.settings.max_tokens_recoveries;
            if response.stop_reason == StopReason::MaxTokens && self.max_tokens_recoveries < limit {
                self.max_tokens_recoveries += 1;
                self.continued_text.push_str(&text);
                self.push(Message::internal_user(
                    CONTINUE_PROMPT,
                    InternalReason::MaxTokensRecovery,
                ));
                self.events.push(EventKind::MaxTokensRecovery {
                    attempt: self.max_tokens_recoveries,
                    limit,
                });
                if let Some(detection) = self.guard.observe_text(&text)
                    && let Some(stop) = self.escalate(detection)
                {
                    return stop;
                }
                return self.next_model_call();
            }
            let answer = self.take_continued(text);
            return self.complete(answer);
        }

        if let BudgetStatus::Exceeded(message) =
            self.settings.budgets.check(self.usage.total(), self.cost)
        {
            return self.fail(AgentState::BudgetExceeded, None, message);
        }
        self.text_detection = self.guard.observe_text(&text);
        self.pending = calls;
        // Tools were forbidden on this turn (a directive); a provider that ignores tool_choice
        // still gets no side effect: the loop answers every call with a refusal.
        let forbidden = self.tool_choice == ToolChoice::None;
        let (by_loop, for_tools): (Vec<ToolCall>, Vec<ToolCall>) =
            self.pending.iter().cloned().partition(|call| {
                forbidden
                    || self.answered_by_loop(&call.name)
                    || self.refuse_outside_flush(call).is_some()
            });
        self.answered_by_loop = Vec::new();
        for call in &by_loop {
            let answer = match self.refuse_outside_flush(call) {
                Some(refusal) => Some(refusal),
                None => self.answer_agent_tool(call),
            };
            if let Some(result) = answer {
                self.answered_by_loop.push(result);
            }
        }
        if for_tools.is_empty() {
            return self.on_tool_results(Vec::new());
        }
        self.state = AgentState::WaitingForTool;
        Step::RunTools(for_tools)
    }

    fn on_model_error(&mut self, error: ProviderError) -> Step {
        let has_fallback = self.chain_index + 1 < self.chain.len();
        let jitter = self.next_jitter();
        match recovery::decide(
            &error,
            self.retries,
            has_fallback,
            &self.settings.retry,
            jitter,
        ) {
            Recovery::Retry { wait } => {
                self.retries += 1;
                self.events.push(EventKind::ProviderRetry {
                    iteration: self.iteration,
                    model: self.current().to_string(),
                    attempt: self.retries,
                    wait_ms: wait.as_millis() as u64,
                    kind: error.kind,
                });
                Step::CallModel(self.model_call(wait))
            }
            Recovery::Fallback => {
                let from = self.current().to_string();
                self.chain_index += 1;
                self.retries = 0;
                self.events.push(EventKind::ProviderFallback {
                    iteration: self.iteration,
                    from,
                    to: self.current().to_string(),
                    kind: error.kind,
                });
                Step::CallModel(self.model_call(Duration::ZERO))
            }
            Recovery::ContextOverflow => self.on_context_overflow(&error),
            Recovery::Fail(message) => {
                self.fail(AgentState::Error, Some(ErrorReason::ProviderFatal), message)
            }
        }
    }
}
