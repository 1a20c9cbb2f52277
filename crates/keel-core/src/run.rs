//! The run state machine: the loop's decisions, with no I/O.
//!
//! A [`Run`] holds one turn's transcript, counters and settings. The driver asks it for the next
//! [`Step`] (call the model with this request, run these tools, finish), performs the step, and
//! feeds the outcome back. Every return to the driver is a safe boundary where the driver
//! persists what is new. Because a `Run` is plain data, decisions are unit-testable without a
//! runtime and a run can later be checkpointed and restored elsewhere.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::event::EventKind;
use crate::message::{InternalReason, Message, ToolCall};
use crate::provider::{ChatRequest, ChatResponse, ToolChoice, Usage};
use crate::provider_error::ProviderError;
use crate::state::{AgentState, ErrorReason};
use crate::store::RunRecord;
use crate::tool::ToolSpec;

/// Default cap on model calls per run.
pub const DEFAULT_MAX_ITERATIONS: u32 = 25;
/// Default cap on the characters of one tool result.
pub const DEFAULT_TOOL_RESULT_MAX_CHARS: usize = 8000;

/// What a run may do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Provider name, for records and events.
    pub provider: String,
    /// Model to ask.
    pub model: String,
    /// System prompt sent first on every call.
    pub system_prompt: Option<String>,
    /// Cap on model calls.
    pub max_iterations: u32,
    /// Cap on the characters of one tool result; longer results are cut with a marker.
    pub tool_result_max_chars: usize,
    /// Cap on output tokens per call.
    pub max_tokens: Option<u32>,
    /// Ask the provider for streamed answers.
    pub stream: bool,
}

impl RunSettings {
    /// Defaults for a provider and model.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        RunSettings {
            provider: provider.into(),
            model: model.into(),
            system_prompt: None,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            tool_result_max_chars: DEFAULT_TOOL_RESULT_MAX_CHARS,
            max_tokens: None,
            stream: true,
        }
    }
}

/// What the driver must do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Call the model with this request and feed the result to [`Run::on_model_result`].
    CallModel(ChatRequest),
    /// Run these tool calls (results in this order) and feed them to [`Run::on_tool_results`].
    RunTools(Vec<ToolCall>),
    /// The run is over; its state is terminal.
    Finish,
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

/// One run of the loop over one turn of a conversation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    id: String,
    session_id: String,
    settings: RunSettings,
    tools: Vec<ToolSpec>,
    /// The conversation as the model sees it: stored history, then this turn.
    messages: Vec<Message>,
    /// How many of `messages` (a prefix) are already in the store.
    persisted: usize,
    iteration: u32,
    state: AgentState,
    reason: Option<ErrorReason>,
    usage: Usage,
    model_used: Option<String>,
    pending: Vec<ToolCall>,
    tool_calls: Vec<ToolCallReport>,
    final_text: Option<String>,
    error: Option<String>,
    started_at: DateTime<Utc>,
    #[serde(skip)]
    events: Vec<EventKind>,
}

impl Run {
    /// A new run: `history` is what the store already holds for the session, `input` the new
    /// user message (not yet stored).
    pub fn new(
        id: impl Into<String>,
        session_id: impl Into<String>,
        settings: RunSettings,
        tools: Vec<ToolSpec>,
        history: Vec<Message>,
        input: Message,
        started_at: DateTime<Utc>,
    ) -> Run {
        let persisted = history.len();
        let mut messages = history;
        messages.push(input);
        Run {
            id: id.into(),
            session_id: session_id.into(),
            settings,
            tools,
            messages,
            persisted,
            iteration: 0,
            state: AgentState::Running,
            reason: None,
            usage: Usage::default(),
            model_used: None,
            pending: Vec::new(),
            tool_calls: Vec::new(),
            final_text: None,
            error: None,
            started_at,
            events: Vec::new(),
        }
    }

    /// The first step.
    pub fn start(&mut self) -> Step {
        self.events.push(EventKind::RunStarted {
            provider: self.settings.provider.clone(),
            model: self.settings.model.clone(),
        });
        self.next_model_call()
    }

    /// Feeds back the model's answer (or failure) and returns the next step.
    pub fn on_model_result(&mut self, result: Result<ChatResponse, ProviderError>) -> Step {
        let response = match result {
            Ok(response) => response,
            Err(error) => {
                return self.fail(
                    AgentState::Error,
                    Some(ErrorReason::ProviderFatal),
                    format!("model call failed: {error}"),
                );
            }
        };
        self.usage += response.usage;
        self.model_used = Some(response.model.clone());
        let mut message = response.message;
        message.role = crate::message::Role::Assistant;
        let calls = message.tool_calls.clone();
        let text = message.content.clone();
        self.messages.push(message);
        if calls.is_empty() {
            // An answer cut at max_tokens is, for now, the end of the turn (recovery comes with
            // the guardrails). Tool calls, when present, win over any stop reason.
            return self.complete(text);
        }
        self.state = AgentState::WaitingForTool;
        self.pending = calls.clone();
        Step::RunTools(calls)
    }

    /// Feeds back the results of the last [`Step::RunTools`] and returns the next step.
    /// Results are appended in call order whatever order they arrive in; a call without a
    /// result gets an error result, so the transcript never holds a call without its answer.
    pub fn on_tool_results(&mut self, results: Vec<ToolResult>) -> Step {
        let mut by_id: BTreeMap<String, ToolResult> = results
            .into_iter()
            .map(|r| (r.call_id.clone(), r))
            .collect();
        for call in std::mem::take(&mut self.pending) {
            let result = by_id.remove(&call.id).unwrap_or_else(|| ToolResult {
                call_id: call.id.clone(),
                ok: false,
                content: format!("Error: tool `{}` produced no result.", call.name),
            });
            self.tool_calls.push(ToolCallReport {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: serde_json::from_str(&call.arguments)
                    .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone())),
                ok: result.ok,
                output: result.content.clone(),
            });
            self.messages
                .push(Message::tool_result(call.id, result.content));
        }
        self.state = AgentState::Running;
        self.next_model_call()
    }

    /// Stops the run at a user's request. Nothing more is written to the transcript.
    pub fn cancel(&mut self) -> Step {
        if self.state.is_terminal() {
            return Step::Finish;
        }
        self.pending.clear();
        self.state = AgentState::Cancelled;
        self.events.push(EventKind::RunCancelled {
            iterations: self.iteration,
        });
        Step::Finish
    }

    /// Ends the run in `error` because keel itself failed (e.g. the store).
    pub fn fail_internal(&mut self, message: impl Into<String>) -> Step {
        self.fail(
            AgentState::Error,
            Some(ErrorReason::Internal),
            message.into(),
        )
    }

    fn next_model_call(&mut self) -> Step {
        if self.iteration >= self.settings.max_iterations {
            let text = self.iteration_limit_summary();
            let mut note = Message::assistant(text.clone());
            note.meta.internal = Some(InternalReason::IterationLimit);
            self.messages.push(note);
            self.final_text = Some(text.clone());
            return self.fail(AgentState::MaxSteps, None, text);
        }
        self.iteration += 1;
        self.state = AgentState::Running;
        Step::CallModel(self.request())
    }

    fn request(&self) -> ChatRequest {
        let mut messages = Vec::with_capacity(self.messages.len() + 1);
        if let Some(system) = &self.settings.system_prompt {
            messages.push(Message::system(system.clone()));
        }
        messages.extend(self.messages.iter().cloned());
        ChatRequest {
            model: self.settings.model.clone(),
            messages: crate::fixup::fixup(messages),
            tools: self.tools.clone(),
            tool_choice: ToolChoice::Auto,
            max_tokens: self.settings.max_tokens,
            stream: self.settings.stream,
        }
    }

    fn complete(&mut self, text: String) -> Step {
        self.state = AgentState::Completed;
        self.final_text = Some(text);
        self.events.push(EventKind::RunCompleted {
            iterations: self.iteration,
            usage: self.usage,
        });
        Step::Finish
    }

    fn fail(&mut self, state: AgentState, reason: Option<ErrorReason>, message: String) -> Step {
        self.state = state;
        self.reason = reason;
        self.pending.clear();
        self.events.push(EventKind::RunFailed {
            state,
            reason,
            message: message.clone(),
            iterations: self.iteration,
        });
        self.error = Some(message);
        Step::Finish
    }

    /// What the run did before the iteration limit stopped it, for the user.
    fn iteration_limit_summary(&self) -> String {
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
            self.settings.max_iterations
        )
    }

    /// Messages not yet in the store, oldest first.
    pub fn unpersisted(&self) -> &[Message] {
        &self.messages[self.persisted..]
    }

    /// Records that everything so far is in the store.
    pub fn mark_persisted(&mut self) {
        self.persisted = self.messages.len();
    }

    /// Decision events since the last call, for the driver to stamp and emit.
    pub fn drain_events(&mut self) -> Vec<EventKind> {
        std::mem::take(&mut self.events)
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

    /// Tokens used so far.
    pub fn usage(&self) -> Usage {
        self.usage
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
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
