//! The run state machine: the loop's decisions, with no I/O.
//!
//! A [`Run`] holds one turn's transcript, counters, budgets and guardrail state. The driver asks
//! it for the next [`Step`] (call this model with this request, run these tools, finish),
//! performs the step, and feeds the outcome back. Every return to the driver is a safe boundary
//! where the driver persists what is new. Because a `Run` is plain data, decisions are
//! unit-testable without a runtime and a run can be checkpointed and restored elsewhere.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::agent_tools;
use crate::budget::BudgetStatus;
use crate::checkpoint::Boundary;
use crate::event::EventKind;
use crate::journal::Journal;
use crate::loop_guard::{Detection, LoopGuard};
use crate::message::{InternalReason, Message, Role, ToolCall};
use crate::provider::{ToolChoice, Usage};
use crate::run_settings::{ModelTarget, RunSettings};
use crate::state::{AgentState, ErrorReason};
use crate::store::StoredMessage;
use crate::tokens::{self, Encoding};
use crate::tool::ToolSpec;

mod answer;
mod approval;
mod between_turns;
mod context;
mod durable;
mod escalation;
mod extensions;
mod flush;
mod pinned;
mod relaunch;
mod shared_budget;
mod steer;
mod step;
mod stopping;
mod turn;
mod view;

pub use durable::{NextStep, RestoreError, prompt_hash};
pub use shared_budget::BatchSpend;
pub use step::{ModelCall, Step, ToolCallReport, ToolResult};
pub use stopping::INTERNAL_ERROR_ANSWER;

pub use crate::run_settings::{
    DEFAULT_ITERATION_CAP, DEFAULT_MAX_ITERATIONS, DEFAULT_TOOL_RESULT_MAX_CHARS,
};

/// The prompt that continues an answer cut at `max_tokens`.
pub const CONTINUE_PROMPT: &str = "Your previous answer was cut off at the output token limit. \
Continue from exactly where you left off, without repeating anything.";

/// The prompt of the last turn at the soft time limit.
pub const SUMMARIZE_PROMPT: &str = "Time is up for this task. Do not call any more tools. \
Summarize what you have done so far, what you found, and what is left to do.";

/// Where the run stands against its soft time limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
enum SoftLimit {
    #[default]
    NotReached,
    /// Reached; the next model call is the summary turn.
    Reached,
    /// The summary turn is under way.
    Summarizing,
}

/// One run of the loop over one turn of a conversation. Its checkpointed state leaves out what
/// is empty or at its default, so a boundary writes only what it has.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// In the checkpoint's own columns, so not in its state: a restore takes it from there
    /// (states written before 2026-11-27 also hold it).
    #[serde(skip_serializing, default)]
    id: String,
    session_id: String,
    /// With `tools`, the run's frame: not in each checkpoint's state but in the frame written
    /// with the first (see [`Checkpoint::frame`]).
    #[serde(skip, default = "durable::unset_settings")]
    settings: RunSettings,
    #[serde(skip, default = "durable::no_tools")]
    tools: Arc<[ToolSpec]>,
    /// The frame is in the store (written with an earlier checkpoint, or restored from one).
    #[serde(skip)]
    frame_stored: bool,
    /// The conversation: the stored history this run loaded, then this turn. Compaction never
    /// removes anything from it; it changes what part of it is sent. Not in checkpoints: a
    /// restored run reads it back from the store.
    #[serde(skip)]
    messages: Vec<Arc<Message>>,
    /// The cached token count of each message.
    #[serde(skip)]
    counts: Vec<u32>,
    /// The seq of each loaded message; messages after them get `next_seq`, `next_seq + 1`, ...
    #[serde(skip)]
    seqs: Vec<u64>,
    /// The seq of the first message the run holds: where a restore reads from. The checkpoint's
    /// `message_cursor`, so not in its state; nor are `next_seq` and `persisted`, which a
    /// restore derives from the checkpoint's `persisted` (states written before 2026-11-27
    /// also hold all three).
    #[serde(skip_serializing, default)]
    first_seq: u64,
    #[serde(skip_serializing, default)]
    next_seq: u64,
    /// How many of `messages` (a prefix) are already in the store.
    #[serde(skip_serializing, default)]
    persisted: usize,
    /// The encoding tokens are counted with.
    encoding: Encoding,
    /// Tokens of the system prompt and the tool definitions, sent with every call.
    fixed_tokens: u32,
    /// Where the verbatim part of the context starts, and the summary that stands in for what
    /// comes before it.
    context_start: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    summary_index: Option<usize>,
    /// The pinned messages before the context start, sent verbatim all the same (see
    /// [`pinned`]), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    kept: Vec<usize>,
    /// The first user message, which the sliding window always keeps.
    first_user: Option<usize>,
    #[serde(default, skip_serializing_if = "crate::checkpoint::is_default")]
    ladder: context::Ladder,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending_summary: Option<context::PendingSummary>,
    /// The context strategy's own state (see [`crate::context_strategy`]); the built-ins keep
    /// none.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    context_state: serde_json::Value,
    /// The memory flush owed before the coming compaction.
    #[serde(default, skip_serializing_if = "crate::checkpoint::is_default")]
    flush: flush::Flush,
    /// In the checkpoint's own columns, so not in its state: a restore takes it from there
    /// (states written before 2026-11-27 also hold it).
    #[serde(skip_serializing, default)]
    iteration: u32,
    iteration_limit: u32,
    state: AgentState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<ErrorReason>,
    usage: Usage,
    cost: f64,
    model_used: Option<String>,
    /// The model chain and where the run is in it.
    chain: Vec<ModelTarget>,
    chain_index: usize,
    /// Retries spent on the current call.
    #[serde(default, skip_serializing_if = "crate::checkpoint::is_default")]
    retries: u32,
    /// The tool choice and warning layers of the current iteration (kept for its retries).
    tool_choice: ToolChoice,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
    /// Set by the loop guard for the next iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_tool_choice: Option<ToolChoice>,
    guard: LoopGuard,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text_detection: Option<Detection>,
    /// Text of answers cut at max_tokens, waiting for their continuation.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    continued_text: String,
    #[serde(default, skip_serializing_if = "crate::checkpoint::is_default")]
    max_tokens_recoveries: u32,
    #[serde(default, skip_serializing_if = "crate::checkpoint::is_default")]
    soft_limit: SoftLimit,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    budget_warned: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pending: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    answered_by_loop: Vec<ToolResult>,
    /// The step the run owes the driver, and the boundary it last passed: what a checkpoint
    /// resumes from.
    next: durable::NextStep,
    /// In the checkpoint's own columns, so not in its state (see `id`).
    #[serde(skip_serializing, default = "durable::no_boundary")]
    boundary: Boundary,
    /// Hash of the system prompt the run started with; in the checkpoint's own columns, so not
    /// in its state (see `id`).
    #[serde(skip_serializing, default)]
    prompt_hash: String,
    /// The session's run journal, and whether this step changed it.
    #[serde(default, skip_serializing_if = "Journal::is_empty")]
    journal: Journal,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    journal_changed: bool,
    /// An `ask_human` call waiting for its answer: (call id, question).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    question: Option<(String, String)>,
    /// The choices the waiting question offers (`clarify`); empty for a free answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    question_choices: Vec<String>,
    /// A tool call waiting for a person's approval, and the calls of this run approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    approval: Option<crate::approval::PendingApproval>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    approved: Vec<String>,
    /// The user the run is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user_id: Option<String>,
    /// What the run's message is sent with (skills and known facts chosen for it, the journal
    /// and task list as they stood), kept so every call and a resume send the same (see
    /// [`turn`]); and what to say about the recall in the run's first events.
    #[serde(default, skip_serializing_if = "crate::checkpoint::is_default")]
    turn: turn::TurnContext,
    /// Events emitted as the run starts, after the tools it offers.
    #[serde(skip)]
    opening: Vec<EventKind>,
    /// Every tool call of the run. Not in checkpoints, which would grow with every call: a
    /// restore rebuilds them from the run's tool results (see [`Run::restore`]). Checkpoints
    /// written before 2026-11-27 listed (id, name, ok), which a restore still reads.
    #[serde(
        default,
        deserialize_with = "durable::compact_calls::deserialize",
        skip_serializing
    )]
    tool_calls: Vec<ToolCallReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    final_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(serialize_with = "crate::timestamp::serialize")]
    started_at: DateTime<Utc>,
    /// State of the jitter generator (xorshift), seeded from the run id.
    rng: u64,
    #[serde(skip)]
    events: Vec<EventKind>,
    /// Model calls since the last commit: (model, usage, cost).
    #[serde(skip)]
    charges: Vec<(String, Usage, f64)>,
    /// The length of the last checkpoint's state, to size the next one's buffer.
    #[serde(skip)]
    state_len: usize,
    /// The budget a sub-agent shares with its parent and siblings, and the room it holds.
    #[serde(skip)]
    share: shared_budget::Share,
    /// The offered tools the loop answers through an extension: (name, the extension's index).
    /// Not in checkpoints: a restored run indexes its resuming agent's (see
    /// [`Run::with_extensions`]).
    #[serde(skip)]
    by_loop: Vec<(String, usize)>,
    /// A run between turns, whose only work is a compaction (see [`between_turns`]).
    #[serde(skip)]
    between_turns: bool,
}

impl Run {
    /// A new run: `history` is what the store holds for the session (all of it, or what
    /// [`crate::Store::context_messages`] returns), `input` the new user message (not yet
    /// stored).
    pub fn new(
        id: impl Into<String>,
        session_id: impl Into<String>,
        settings: RunSettings,
        tools: Vec<ToolSpec>,
        history: Vec<StoredMessage>,
        input: Message,
        started_at: DateTime<Utc>,
    ) -> Run {
        let mut run = Run::loaded(id, session_id, settings, tools, history, started_at);
        run.turn.input = Some(run.messages.len());
        run.push(input);
        run
    }

    /// A run of `history` with no new message yet: [`Run::new`] before its input.
    fn loaded(
        id: impl Into<String>,
        session_id: impl Into<String>,
        settings: RunSettings,
        tools: Vec<ToolSpec>,
        history: Vec<StoredMessage>,
        started_at: DateTime<Utc>,
    ) -> Run {
        let id = id.into();
        let mut tools = tools;
        // The loop's own tools follow the registry's: the extensions' in their order, with
        // `ask_human` among them where it always was (after the task list) unless a tool of
        // that name is offered already.
        let mut asked = tools.iter().any(|tool| tool.name == agent_tools::ASK_HUMAN);
        for extension in settings.extensions.iter() {
            for spec in extension.loop_tools(&settings) {
                if !asked && spec.interactive {
                    tools.push(agent_tools::ask_human_spec());
                    asked = true;
                }
                if !tools.iter().any(|tool| tool.name == spec.name) {
                    tools.push(spec);
                }
            }
        }
        if !asked {
            tools.push(agent_tools::ask_human_spec());
        }
        let prompt_hash = durable::prompt_hash(settings.system_prompt.as_deref());
        let rng = id.bytes().fold(0x9E37_79B9_7F4A_7C15u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
        }) | 1;
        let encoding = Encoding::for_model(&settings.model);
        let fixed_tokens = settings.system_prompt.as_deref().map_or(0, |prompt| {
            encoding.count_repeated(prompt) + tokens::MESSAGE_OVERHEAD
        }) + tokens::tools_tokens(encoding, &tools);
        let next_seq = history.last().map_or(1, |stored| stored.seq + 1);
        let first_seq = history.first().map_or(next_seq, |stored| stored.seq);
        let mut run = Run {
            session_id: session_id.into(),
            chain: settings.chain(),
            iteration_limit: settings.max_iterations,
            guard: LoopGuard::new(settings.guard.clone()),
            settings,
            tools: durable::shared_tools(tools),
            frame_stored: false,
            messages: Vec::with_capacity(history.len() + 8),
            counts: Vec::with_capacity(history.len() + 8),
            seqs: history.iter().map(|stored| stored.seq).collect(),
            next_seq,
            persisted: history.len(),
            first_seq,
            next: durable::NextStep::CallModel,
            boundary: Boundary::Input,
            prompt_hash,
            journal: Journal::default(),
            journal_changed: false,
            question: None,
            question_choices: Vec::new(),
            approval: None,
            approved: Vec::new(),
            user_id: None,
            turn: turn::TurnContext::default(),
            opening: Vec::new(),
            encoding,
            fixed_tokens,
            context_start: 0,
            summary_index: None,
            kept: Vec::new(),
            first_user: None,
            ladder: context::Ladder::default(),
            pending_summary: None,
            context_state: serde_json::Value::Null,
            flush: flush::Flush::Idle,
            iteration: 0,
            state: AgentState::Running,
            reason: None,
            usage: Usage::default(),
            cost: 0.0,
            model_used: None,
            chain_index: 0,
            retries: 0,
            tool_choice: ToolChoice::Auto,
            warnings: Vec::new(),
            next_tool_choice: None,
            text_detection: None,
            continued_text: String::new(),
            max_tokens_recoveries: 0,
            soft_limit: SoftLimit::NotReached,
            budget_warned: false,
            pending: Vec::new(),
            answered_by_loop: Vec::new(),
            tool_calls: Vec::new(),
            final_text: None,
            error: None,
            started_at,
            rng,
            events: Vec::new(),
            charges: Vec::new(),
            state_len: 0,
            share: shared_budget::Share::default(),
            by_loop: Vec::new(),
            between_turns: false,
            id,
        };
        run.index_loop_tools();
        for stored in history {
            run.push(stored.message);
        }
        run.resume_context();
        run
    }

    /// `messages` as a stored history numbered from 1, for runs whose history did not come
    /// from a store.
    pub fn history(messages: Vec<Message>) -> Vec<StoredMessage> {
        messages
            .into_iter()
            .enumerate()
            .map(|(i, message)| StoredMessage {
                seq: i as u64 + 1,
                run_id: None,
                created_at: DateTime::<Utc>::UNIX_EPOCH,
                message,
            })
            .collect()
    }

    /// Appends a message to the transcript, counting its tokens once: the message keeps the
    /// count of its whole self, the run the count of what a request carries of it.
    fn push(&mut self, mut message: Message) {
        let count = self.count_sent(&mut message);
        for extension in self.settings.extensions.iter() {
            extension.on_message(&mut message);
        }
        if self.first_user.is_none() && message.role == Role::User && !message.is_internal() {
            self.first_user = Some(self.messages.len());
        }
        self.messages.push(Arc::new(message));
        self.counts.push(count);
    }

    /// The tools offered to the model: a call to any other is refused, not run.
    pub fn tools(&self) -> &Arc<[ToolSpec]> {
        &self.tools
    }

    /// The first step.
    pub fn start(&mut self) -> Step {
        self.boundary = Boundary::Input;
        let step = self.first_step();
        self.remember(step)
    }

    fn first_step(&mut self) -> Step {
        self.events.push(EventKind::RunStarted {
            provider: self.settings.provider.clone(),
            model: self.settings.model.clone(),
            context: self.context_pieces(),
        });
        self.events.push(EventKind::ToolsOffered {
            tools: self.tools.iter().map(|tool| tool.name.clone()).collect(),
            permission: self.settings.permission,
        });
        let opening = std::mem::take(&mut self.opening);
        self.events.extend(opening);
        self.next_model_call()
    }

    /// Feeds back the results of the last [`Step::RunTools`] and returns the next step.
    /// Results are appended in call order whatever order they arrive in; a call without a
    /// result gets an error result, so the transcript never holds a call without its answer.
    pub fn on_tool_results(&mut self, results: Vec<ToolResult>) -> Step {
        self.boundary = Boundary::ToolResult;
        self.answered_by_loop.extend(results);
        let step = match self.question.clone() {
            // The human's answer is the last result of this batch; wait for it.
            Some((_, question)) => {
                self.state = AgentState::WaitingOnHuman;
                self.boundary = Boundary::HumanPause;
                let choices = self.question_choices.clone();
                self.events.push(EventKind::HumanAsked {
                    question: question.clone(),
                    choices: choices.clone(),
                });
                Step::AskHuman(crate::human::Question {
                    text: question,
                    choices,
                })
            }
            None => self.finish_batch(),
        };
        self.remember(step)
    }

    /// Appends the batch's results in call order and moves on.
    fn finish_batch(&mut self) -> Step {
        let mut by_id: BTreeMap<String, ToolResult> = std::mem::take(&mut self.answered_by_loop)
            .into_iter()
            .map(|r| (r.call_id.clone(), r))
            .collect();
        let calls = std::mem::take(&mut self.pending);
        let mut ordered = Vec::with_capacity(calls.len());
        for call in &calls {
            let result = by_id.remove(&call.id).unwrap_or_else(|| ToolResult {
                call_id: call.id.clone(),
                ok: false,
                content: format!("Error: tool `{}` produced no result.", call.name),
            });
            self.tool_calls.push(ToolCallReport {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: ToolCallReport::arguments_of(&call.arguments),
                ok: result.ok,
                output: result.content.clone(),
            });
            let mut message = Message::tool_result(call.id.clone(), result.content.clone());
            message.meta.failed = !result.ok;
            self.push(message);
            ordered.push(result);
        }
        self.state = AgentState::Running;
        let detection = self
            .guard
            .observe_batch(&calls, &ordered)
            .or(self.text_detection.take());
        if let Some(detection) = detection
            && let Some(stop) = self.escalate(detection)
        {
            return stop;
        }
        self.next_model_call()
    }

    fn next_model_call(&mut self) -> Step {
        if self.iteration >= self.iteration_limit {
            let text = self.iteration_limit_summary();
            let mut note = Message::assistant(text.clone());
            note.meta.internal = Some(InternalReason::IterationLimit);
            self.push(note);
            self.final_text = Some(text.clone());
            return self.fail(AgentState::MaxSteps, None, text);
        }
        self.warnings.clear();
        // A sub-agent's shared budget first: its own limits are what was left of its parent's,
        // which the shared one counts with its siblings' spending.
        if let Some(step) = self.reserve_shared_budget() {
            return step;
        }
        match self.settings.budgets.check(self.usage.total(), self.cost) {
            BudgetStatus::Exceeded(message) => {
                return self.fail(AgentState::BudgetExceeded, None, message);
            }
            BudgetStatus::Near(message) => {
                if !self.budget_warned {
                    self.budget_warned = true;
                    self.events.push(EventKind::BudgetNear {
                        tokens: self.usage.total(),
                        cost: self.cost,
                        message: message.clone(),
                    });
                }
                self.warnings.push(message);
            }
            BudgetStatus::Ok => {}
        }
        if let Some(step) = self.fit_context() {
            return step;
        }
        self.tool_choice = self.next_tool_choice.take().unwrap_or_default();
        if self.soft_limit == SoftLimit::Reached {
            self.soft_limit = SoftLimit::Summarizing;
            self.push(Message::internal_user(
                SUMMARIZE_PROMPT,
                InternalReason::TimeLimitSummary,
            ));
            self.tool_choice = ToolChoice::None;
        }
        self.iteration += 1;
        self.retries = 0;
        self.state = AgentState::Running;
        Step::CallModel(self.model_call(Duration::ZERO))
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

    fn push_assistant(&mut self, message: Message) {
        if !message.content.is_empty() || !message.tool_calls.is_empty() {
            self.push(message);
        }
    }

    /// The text of any continued answer, followed by `last`.
    fn take_continued(&mut self, last: String) -> String {
        let mut text = std::mem::take(&mut self.continued_text);
        text.push_str(&last);
        text
    }

    fn current(&self) -> &ModelTarget {
        &self.chain[self.chain_index.min(self.chain.len() - 1)]
    }

    fn has_tool(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name)
    }

    /// A number in [0, 1) from the run's own generator: deterministic per run, different
    /// between runs, and restored with a checkpoint.
    fn next_jitter(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod guardrail_tests;

#[cfg(test)]
mod context_tests;
