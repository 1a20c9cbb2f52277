//! What the run shows the outside: the request it sends (with its ephemeral layers), the record
//! the store keeps, what is still to persist, and read-only views of its state.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{ModelCall, Run, ToolCallReport};
use crate::event::EventKind;
use crate::message::{InternalReason, Message};
use crate::provider::{ChatRequest, ChatResponse, Usage};
use crate::run_settings::RunSettings;
use crate::state::{AgentState, ErrorReason};
use crate::store::RunRecord;
use crate::token_log::TokenCharge;

impl Run {
    pub(super) fn model_call(&self, wait: Duration) -> ModelCall {
        let target = self.current();
        let mut messages = Vec::with_capacity(self.messages.len() - self.context_start + 3);
        // The system prompt alone: the same bytes for every call of the session's runs and
        // their resumes, so the provider's prompt cache keeps serving it. What changes per
        // message or per call comes after it: the turn context with the run's message, the
        // warning layers at the end.
        if let Some(prompt) = &self.settings.system_prompt {
            messages.push(Arc::new(Message::system(prompt.clone())));
        }
        self.add_context_messages(&mut messages);
        let mut messages = crate::fixup::fixup_shared(messages);
        // Ephemeral layers go into the request, never into the transcript; at the end, so the
        // cached prefix of the prompt stays the same.
        if !self.warnings.is_empty() {
            messages.push(Arc::new(Message::internal_user(
                self.warnings.join("\n\n"),
                InternalReason::Warning,
            )));
            messages = crate::fixup::fixup_shared(messages);
        }
        ModelCall {
            provider: target.provider.clone(),
            request: ChatRequest {
                model: target.model.clone(),
                messages,
                tools: self.offered_tools(),
                tool_choice: self.tool_choice.clone(),
                max_tokens: self.settings.max_tokens,
                temperature: self.settings.temperature,
                stream: self.settings.stream,
            },
            wait,
        }
    }

    /// Copies of the messages not yet in the store, oldest first: what the next commit writes.
    pub fn unpersisted(&self) -> Vec<Message> {
        self.messages[self.persisted..]
            .iter()
            .map(|message| Message::clone(message))
            .collect()
    }

    /// Records that everything so far is in the store.
    pub fn mark_persisted(&mut self) {
        self.persisted = self.messages.len();
    }

    /// Decision events since the last call, for the driver to stamp and emit.
    pub fn drain_events(&mut self) -> Vec<EventKind> {
        std::mem::take(&mut self.events)
    }

    /// Token log rows of the model calls since the last call, stamped `now`, for the driver's
    /// next commit.
    pub fn drain_charges(&mut self, now: DateTime<Utc>) -> Vec<TokenCharge> {
        self.charges
            .drain(..)
            .map(|(model, usage, cost)| TokenCharge {
                user_id: self.user_id.clone(),
                model,
                usage,
                cost,
                at: now,
            })
            .collect()
    }

    /// Counts a model's answer: the run's usage and cost, and a token log row for the next
    /// commit. A model without a price is priced as the one asked for, else costs nothing.
    pub(super) fn charge(&mut self, response: &ChatResponse) {
        let cost = self
            .settings
            .prices
            .price(&response.model)
            .or_else(|| self.settings.prices.price(&self.current().model))
            .map_or(0.0, |price| price.cost(&response.usage));
        self.usage += response.usage;
        self.cost += cost;
        self.settle_shared_budget(response.usage.total(), cost);
        self.charges
            .push((response.model.clone(), response.usage, cost));
    }

    /// The run as the store keeps it.
    pub fn record(&self, now: DateTime<Utc>) -> RunRecord {
        RunRecord {
            id: self.id.clone(),
            session_id: self.session_id.clone(),
            state: self.state,
            reason: self.reason,
            provider: self.settings.provider.clone(),
            model: self.settings.model.clone(),
            model_used: self.model_used.clone(),
            iterations: self.iteration,
            usage: self.usage,
            final_text: self.final_text.clone(),
            error: self.error.clone(),
            started_at: self.started_at,
            updated_at: now,
            finished_at: self.state.is_terminal().then_some(now),
            cost: self.cost,
            heartbeat_at: Some(now),
            cancel_requested_at: None,
            resume_available: false,
            launch: self.settings.launch.clone(),
            worker: self.settings.worker.clone(),
        }
    }

    /// Run id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Session id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Settings.
    pub fn settings(&self) -> &RunSettings {
        &self.settings
    }

    /// Current state.
    pub fn state(&self) -> AgentState {
        self.state
    }

    /// Why the run ended in `error`.
    pub fn reason(&self) -> Option<ErrorReason> {
        self.reason
    }

    /// Model calls made so far.
    pub fn iteration(&self) -> u32 {
        self.iteration
    }

    /// The current iteration limit (raised by `request_more_iterations`).
    pub fn iteration_limit(&self) -> u32 {
        self.iteration_limit
    }

    /// Tokens used so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Dollars spent so far, at the price table's prices.
    pub fn cost(&self) -> f64 {
        self.cost
    }

    /// The model that last answered.
    pub fn model_used(&self) -> Option<&str> {
        self.model_used.as_deref()
    }

    /// The final answer, or the loop's note when it stopped without one.
    pub fn final_text(&self) -> Option<&str> {
        self.final_text.as_deref()
    }

    /// What went wrong, when something did.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Every tool call of this run with its outcome.
    pub fn tool_calls(&self) -> &[ToolCallReport] {
        &self.tool_calls
    }

    /// The transcript as the model sees it.
    pub fn messages(&self) -> &[Arc<Message>] {
        &self.messages
    }
}
