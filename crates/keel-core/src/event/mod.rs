//! Events: every decision the loop makes, with a stable dotted name (DESIGN.md section 7).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::provider::{StopReason, StreamDelta, Usage};
use crate::provider_error::ProviderErrorKind;
use crate::state::{AgentState, ErrorReason};

mod emitter;
mod hook;
mod names;
pub(crate) mod progress;
mod route;
mod sink;
mod status;

pub use emitter::Emitter;
pub use hook::{HookEvent, HookOutcome};
pub use route::{MatchedSkill, Tier};
pub use sink::{EventLog, EventSink};
pub use status::{ModelReasoning, ParsedToolCall, RunStatus, StatusChange, StepSummary};

/// One event of one run. Serializes as a flat JSON object `{ts, event, run_id, session_id, ...}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When it happened.
    #[serde(serialize_with = "crate::timestamp::serialize")]
    pub ts: DateTime<Utc>,
    /// The run it belongs to.
    pub run_id: String,
    /// The conversation.
    pub session_id: String,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened. The serde tag is the event's stable name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event")]
pub enum EventKind {
    /// The run began.
    #[serde(rename = "agent_run.started")]
    RunStarted {
        /// Provider name.
        provider: String,
        /// Model asked for.
        model: String,
        /// What the first request is built from, in tokens (seed 003's context builder).
        #[serde(default)]
        context: crate::context::ContextPieces,
    },
    /// The tools the run offers the model: the registry's, less those the caller's permission
    /// does not reach, plus the loop's own.
    #[serde(rename = "agent.tools.offered")]
    ToolsOffered {
        /// Their names, as offered.
        tools: Vec<String>,
        /// The caller's permission they were chosen for.
        permission: crate::tool::Permission,
    },
    /// A model call is about to be made.
    #[serde(rename = "agent.model.request")]
    ModelRequest {
        /// 1-based iteration.
        iteration: u32,
        /// Model asked for.
        model: String,
        /// Messages sent.
        messages: usize,
        /// Tools offered.
        tools: usize,
        /// Streamed or whole.
        stream: bool,
    },
    /// A model call answered.
    #[serde(rename = "agent.model.response")]
    ModelResponse {
        /// 1-based iteration.
        iteration: u32,
        /// Model that answered.
        model: String,
        /// Why it stopped.
        stop_reason: StopReason,
        /// Tool calls asked for.
        tool_calls: usize,
        /// Tokens used.
        usage: Usage,
        /// How long the call took.
        latency_ms: u64,
    },
    /// A model call failed.
    #[serde(rename = "agent.model.error")]
    ModelError {
        /// 1-based iteration.
        iteration: u32,
        /// Error class.
        kind: ProviderErrorKind,
        /// HTTP status, if any.
        status: Option<u16>,
        /// What went wrong.
        message: String,
    },
    /// A piece of a streamed answer.
    #[serde(rename = "agent.stream.delta")]
    StreamDelta {
        /// The delta.
        #[serde(flatten)]
        delta: StreamDelta,
    },
    // Progress (issue 16): what the loop tells an embedder as it goes (see `status`; the typed
    // callbacks of `keel_extensions::callbacks` read these).
    /// The run's status changed. Live only.
    #[serde(rename = "agent.status")]
    StatusChanged(StatusChange),
    /// The reasoning text of a model answer. Live only.
    #[serde(rename = "agent.model.reasoning")]
    ModelReasoning(ModelReasoning),
    /// A tool call parsed from a model answer. Live only.
    #[serde(rename = "agent.tool_call.parsed")]
    ToolCallParsed(ParsedToolCall),
    /// A complete agent turn: the model answered and its tool calls have their results.
    #[serde(rename = "agent.step.completed")]
    StepCompleted(StepSummary),
    /// A tool call began.
    #[serde(rename = "agent.tool.started")]
    ToolStarted {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// Raw JSON arguments.
        arguments: String,
    },
    /// A tool call ended.
    #[serde(rename = "agent.tool.completed")]
    ToolCompleted {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// False when the result is an error.
        ok: bool,
        /// The result as the model sees it.
        output: String,
        /// The result was cut to `tool_result_max_chars`.
        truncated: bool,
        /// How long the call took.
        duration_ms: u64,
    },
    /// A tool hook ran (an extension's: `keel_extensions::tool_hooks`).
    #[serde(rename = "agent.tool.hook")]
    ToolHook {
        /// The hook's position among the configured hooks, from 0.
        index: usize,
        /// The hook's command line.
        hook: String,
        /// `pre_tool` or `post_tool`.
        stage: HookEvent,
        /// Call id.
        call_id: String,
        /// Tool name.
        tool: String,
        /// What the hook did: allow, deny, rewrite, annotate or error.
        outcome: HookOutcome,
        /// Why it denied, or what went wrong.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The arguments it rewrote the call to, as JSON text; the stored call keeps the
        /// model's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<String>,
        /// The note it added to the result.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotation: Option<String>,
        /// How long it ran.
        duration_ms: u64,
    },
    /// A failed model call will be tried again after a wait.
    #[serde(rename = "agent.provider.retry")]
    ProviderRetry {
        /// 1-based iteration.
        iteration: u32,
        /// The model being retried, `provider:model`.
        model: String,
        /// The retry number on this model, from 1.
        attempt: u32,
        /// The wait before it.
        wait_ms: u64,
        /// Why the call failed.
        kind: ProviderErrorKind,
    },
    /// The loop moved to the next model of the fallback chain.
    #[serde(rename = "agent.provider.fallback")]
    ProviderFallback {
        /// 1-based iteration.
        iteration: u32,
        /// The model given up on, `provider:model`.
        from: String,
        /// The model tried next, `provider:model`.
        to: String,
        /// Why the previous one was given up.
        kind: ProviderErrorKind,
    },
    /// A failed idempotent tool call will be tried again after a wait.
    #[serde(rename = "agent.tool.retry")]
    ToolRetry {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// The retry number, from 1.
        attempt: u32,
        /// The wait before it.
        wait_ms: u64,
        /// What went wrong.
        error: String,
    },
    /// The loop guard saw the model going in circles.
    #[serde(rename = "agent.loop.detected")]
    LoopDetected {
        /// Which detector: identical_thrash, pattern_thrash, repeated_batch, repeated_text.
        tier: String,
        /// The tool involved, when one is.
        tool: Option<String>,
        /// The escalation level this detection leads to, 1–3.
        level: u8,
    },
    /// A guardrail climbed its ladder.
    #[serde(rename = "agent.guardrail.escalated")]
    GuardrailEscalated {
        /// 1 nudge, 2 directive, 3 ask_human or stuck.
        level: u8,
        /// `nudge`, `directive`, `ask_human` or `stuck`.
        action: String,
        /// What the model (or the user) was told.
        message: String,
    },
    /// An answer cut at max_tokens is continued.
    #[serde(rename = "agent.max_tokens.recovery")]
    MaxTokensRecovery {
        /// The continuation number, from 1.
        attempt: u32,
        /// How many the run may make.
        limit: u32,
    },
    /// The model asked for more iterations.
    #[serde(rename = "agent.iterations.extended")]
    IterationsExtended {
        /// Whether the limit moved.
        granted: bool,
        /// The limit now.
        limit: u32,
        /// The model's reason.
        reason: String,
    },
    /// The run is close to its token or cost budget; the model was warned.
    #[serde(rename = "agent.budget.near")]
    BudgetNear {
        /// Tokens used so far.
        tokens: u64,
        /// Dollars spent so far.
        cost: f64,
        /// The warning given to the model.
        message: String,
    },
    /// The soft time limit passed; the model gets one last turn to summarize.
    #[serde(rename = "agent.exhaustion.soft_limit")]
    SoftLimit {
        /// Model calls made so far.
        iterations: u32,
    },
    /// Older messages were summarized (R1) or dropped (sliding window) to fit the window.
    #[serde(rename = "agent.compaction.run")]
    CompactionRun {
        /// `compact` or `sliding_window`.
        strategy: String,
        /// Estimated context tokens before.
        before_tokens: u64,
        /// Estimated context tokens after.
        after_tokens: u64,
        /// Messages in the context before.
        before_messages: usize,
        /// Messages in the context after.
        after_messages: usize,
        /// Tool results pinned into the summary.
        pinned: usize,
        /// The summary model failed and the context was truncated instead.
        summary_failed: bool,
    },
    /// Before a compaction, the model had its one turn to save what it must remember.
    #[serde(rename = "agent.memory.flushed")]
    MemoryFlushed {
        /// The `memory` calls of that turn that saved something.
        saved: usize,
    },
    /// A deeper context recovery fired: R2 (deep prune) or R3 (ask the human).
    #[serde(rename = "agent.recovery.fired")]
    RecoveryFired {
        /// `r2` or `r3`.
        tier: String,
        /// Why: `threshold` or `context_overflow`.
        reason: String,
        /// Estimated context tokens before.
        before_tokens: u64,
        /// Estimated context tokens after.
        after_tokens: u64,
        /// Messages in the context before.
        before_messages: usize,
        /// Messages in the context after.
        after_messages: usize,
    },
    /// The run wrote a checkpoint at a safe boundary.
    #[serde(rename = "agent.checkpoint")]
    Checkpoint {
        /// Which boundary.
        boundary: crate::checkpoint::Boundary,
        /// The checkpoint's position among the run's checkpoints.
        seq: u32,
    },
    /// The model asked the human a question.
    #[serde(rename = "agent.human.asked")]
    HumanAsked {
        /// The question.
        question: String,
        /// The choices offered (`clarify`), in order; empty when the answer is free text.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        choices: Vec<String>,
    },
    /// The human answered.
    #[serde(rename = "agent.human.answered")]
    HumanAnswered {
        /// The answer.
        answer: String,
    },
    /// A tool call waits for a person's approval.
    #[serde(rename = "agent.approval.requested")]
    ApprovalRequested {
        /// The call.
        call_id: String,
        /// The tool.
        tool: String,
        /// Why it needs approval.
        reason: String,
    },
    /// A person (or the approval timeout) decided about a call.
    #[serde(rename = "agent.approval.decided")]
    ApprovalDecided {
        /// The call.
        call_id: String,
        /// `approve_once`, `approve_session` or `deny`.
        decision: crate::approval::ApprovalDecision,
    },
    /// Messages the user sent while the run worked joined it before its next model call (the
    /// `steer` lane policy; see [`crate::steering`]).
    #[serde(rename = "agent.lane.steered")]
    LaneSteered {
        /// The sources' ids of the messages that joined, in order (the daemon: the queued runs
        /// they arrived as, which end `cancelled`, "steered into" this run).
        absorbed: Vec<String>,
    },
    /// A resume stopped before a side-effecting call that may already have run.
    #[serde(rename = "agent_run.resume_unsafe")]
    ResumeUnsafe {
        /// The call.
        call_id: String,
        /// Its tool.
        tool: String,
    },
    /// A run was resumed from its latest checkpoint.
    #[serde(rename = "agent_run.resumed")]
    Resumed {
        /// The checkpoint's boundary.
        boundary: crate::checkpoint::Boundary,
        /// Completed calls replayed instead of run again.
        replayed: usize,
    },
    /// The reconciler swept runs whose workers died or whose cancel timed out.
    #[serde(rename = "agent_run.reconcile")]
    Reconcile {
        /// Runs marked timed_out.
        timed_out: usize,
        /// Of those, how many can be resumed.
        resumable: usize,
        /// Runs marked cancelled.
        cancelled: usize,
    },
    /// Memories were recalled for the run's message (see `keel-memory`): every piece with
    /// the scores that chose it, and what did not work.
    #[serde(rename = "agent.memory.retrieved")]
    MemoryRetrieved {
        /// User, pieces (id, text, fused score, full-text / vector / recency rank and score,
        /// pinned) and what degraded.
        detail: serde_json::Value,
    },
    /// Memory learned from a run after it ended (see `keel-memory`): facts extracted,
    /// messages scored and embedded, and what failed. Live only: the run's record is final by
    /// then; what was learned is kept as facts and message scores.
    #[serde(rename = "agent.memory.learned")]
    MemoryLearned {
        /// User, run, facts remembered and superseded, messages scored and embedded, errors.
        detail: serde_json::Value,
    },
    /// The configuration file could not be used; the last good one was.
    #[serde(rename = "agent.config.fallback")]
    ConfigFallback {
        /// The file that failed.
        path: String,
        /// Why.
        error: String,
        /// The file used instead.
        used: String,
    },
    /// The run finished with a final answer.
    #[serde(rename = "agent_run.completed")]
    RunCompleted {
        /// Model calls made.
        iterations: u32,
        /// Tokens used.
        usage: Usage,
    },
    /// A `delegate_task` call started a sub-agent, resumed one a crash interrupted, or found
    /// one finished (`reused`: its stored answer is the answer; it is not run again).
    #[serde(rename = "agent.delegate.started")]
    DelegateStarted {
        /// The parent's tool call.
        call_id: String,
        /// The child's run.
        child_run_id: String,
        /// The child's session, `sub-{depth}-{uuid}`.
        child_session_id: String,
        /// Its goal.
        goal: String,
        /// Its delegation depth (1 for a top-level run's child).
        depth: u32,
        /// `start`, `resume` or `reuse`.
        how: String,
    },
    /// A sub-agent ended (or stopped without an end); its outcome goes to the parent.
    #[serde(rename = "agent.delegate.finished")]
    DelegateFinished {
        /// The parent's tool call.
        call_id: String,
        /// The child's run.
        child_run_id: String,
        /// Where it ended.
        state: AgentState,
        /// Model calls it made.
        iterations: u32,
        /// Tokens it used.
        usage: Usage,
    },
    /// The run stopped at a user's request.
    #[serde(rename = "agent_run.cancelled")]
    RunCancelled {
        /// Model calls made.
        iterations: u32,
    },
    /// The run ended in any other terminal state.
    #[serde(rename = "agent_run.failed")]
    RunFailed {
        /// The terminal state.
        state: AgentState,
        /// Why, for `error`.
        reason: Option<ErrorReason>,
        /// What happened, for a human.
        message: String,
        /// Model calls made.
        iterations: u32,
    },
    // — routing and skills (issue 17) —
    /// The model was chosen by the message's tier (no model was named by the caller).
    #[serde(rename = "agent.route.decided")]
    RouteDecided {
        /// The tier.
        tier: Tier,
        /// The model it maps to.
        model: String,
        /// The rules that put the message in the tier.
        reasons: Vec<String>,
    },
    /// Skills went into the system prompt for this message.
    #[serde(rename = "agent.skills.matched")]
    SkillsMatched {
        /// Each skill injected, with why it matched.
        skills: Vec<MatchedSkill>,
        /// Skills that matched but did not fit the token budget.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        left_out: Vec<String>,
    },
    // — lanes: the double-texting policies (issue 34); told live, not stored —
    /// A message became a run queued behind the lane's running or queued runs.
    #[serde(rename = "agent.lane.queued")]
    LaneQueued {
        /// The conversation's policy.
        policy: String,
        /// Runs ahead of it.
        ahead: usize,
    },
    /// A message was refused (`reject`): the lane was busy. Its `run_id` is empty: no run
    /// was made.
    #[serde(rename = "agent.lane.rejected")]
    LaneRejected {
        /// The run the lane was busy with, when one runs here.
        running: Option<String>,
        /// Runs queued in the lane.
        queued: usize,
    },
    /// The run carries the messages of queued runs folded into it (`collect`).
    #[serde(rename = "agent.lane.collected")]
    LaneCollected {
        /// The runs folded into it, oldest first.
        absorbed: Vec<String>,
        /// The oldest messages left out of its text (over `[serve] collect_cap`).
        left_out: usize,
    },
    /// The run was cancelled and its messages hidden from the history (`rollback`).
    #[serde(rename = "agent.lane.rolled_back")]
    LaneRolledBack {
        /// The run of the message that rolled it back.
        by: String,
    },
    /// The run was asked to stop at its next safe point for a new message (`interrupt`).
    #[serde(rename = "agent.lane.interrupted")]
    LaneInterrupted {
        /// The run of the message that interrupted it.
        by: String,
    },
    // — schedules (issue 34): told live when the run starts; the slot's record is stored —
    /// The run is a schedule's fire for `slot` (and, caught up once, for the missed slots it
    /// `covers`).
    #[serde(rename = "schedule.fired")]
    ScheduleFired {
        /// The schedule.
        schedule_id: String,
        /// The slot the run is keyed by.
        slot: chrono::DateTime<chrono::Utc>,
        /// Missed slots this run stands for too.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        covers: Vec<chrono::DateTime<chrono::Utc>>,
    },
}

#[cfg(test)]
mod tests;
