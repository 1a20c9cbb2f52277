//! Each event's stable dotted name, and which events are stored.

use super::EventKind;

impl EventKind {
    /// The event's stable dotted name.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::RunStarted { .. } => "agent_run.started",
            EventKind::ToolsOffered { .. } => "agent.tools.offered",
            EventKind::ModelRequest { .. } => "agent.model.request",
            EventKind::ModelResponse { .. } => "agent.model.response",
            EventKind::ModelError { .. } => "agent.model.error",
            EventKind::StreamDelta { .. } => "agent.stream.delta",
            EventKind::StatusChanged(_) => "agent.status",
            EventKind::ModelReasoning(_) => "agent.model.reasoning",
            EventKind::ToolCallParsed(_) => "agent.tool_call.parsed",
            EventKind::StepCompleted(_) => "agent.step.completed",
            EventKind::ToolStarted { .. } => "agent.tool.started",
            EventKind::ToolCompleted { .. } => "agent.tool.completed",
            EventKind::ToolHook { .. } => "agent.tool.hook",
            EventKind::ProviderRetry { .. } => "agent.provider.retry",
            EventKind::ProviderFallback { .. } => "agent.provider.fallback",
            EventKind::ToolRetry { .. } => "agent.tool.retry",
            EventKind::LoopDetected { .. } => "agent.loop.detected",
            EventKind::GuardrailEscalated { .. } => "agent.guardrail.escalated",
            EventKind::MaxTokensRecovery { .. } => "agent.max_tokens.recovery",
            EventKind::IterationsExtended { .. } => "agent.iterations.extended",
            EventKind::BudgetNear { .. } => "agent.budget.near",
            EventKind::SoftLimit { .. } => "agent.exhaustion.soft_limit",
            EventKind::ConfigFallback { .. } => "agent.config.fallback",
            EventKind::MemoryRetrieved { .. } => "agent.memory.retrieved",
            EventKind::MemoryLearned { .. } => "agent.memory.learned",
            EventKind::CompactionRun { .. } => "agent.compaction.run",
            EventKind::MemoryFlushed { .. } => "agent.memory.flushed",
            EventKind::Checkpoint { .. } => "agent.checkpoint",
            EventKind::HumanAsked { .. } => "agent.human.asked",
            EventKind::HumanAnswered { .. } => "agent.human.answered",
            EventKind::ApprovalRequested { .. } => "agent.approval.requested",
            EventKind::ApprovalDecided { .. } => "agent.approval.decided",
            EventKind::LaneSteered { .. } => "agent.lane.steered",
            EventKind::ResumeUnsafe { .. } => "agent_run.resume_unsafe",
            EventKind::Resumed { .. } => "agent_run.resumed",
            EventKind::Reconcile { .. } => "agent_run.reconcile",
            EventKind::RecoveryFired { .. } => "agent.recovery.fired",
            EventKind::RunCompleted { .. } => "agent_run.completed",
            EventKind::DelegateStarted { .. } => "agent.delegate.started",
            EventKind::DelegateFinished { .. } => "agent.delegate.finished",
            EventKind::RunCancelled { .. } => "agent_run.cancelled",
            EventKind::RunFailed { .. } => "agent_run.failed",
            EventKind::RouteDecided { .. } => "agent.route.decided",
            EventKind::SkillsMatched { .. } => "agent.skills.matched",
            EventKind::LaneQueued { .. } => "agent.lane.queued",
            EventKind::LaneRejected { .. } => "agent.lane.rejected",
            EventKind::LaneCollected { .. } => "agent.lane.collected",
            EventKind::LaneRolledBack { .. } => "agent.lane.rolled_back",
            EventKind::LaneInterrupted { .. } => "agent.lane.interrupted",
            EventKind::ScheduleFired { .. } => "schedule.fired",
        }
    }
}

impl EventKind {
    /// Whether the event is stored with its run (and counts in SSE event ids). Stream deltas
    /// and the live progress events are not: what they carry is stored on the messages, or is
    /// news only while the run goes. The lane's decisions are told by the engine outside any
    /// commit: live only (their outcome is in the runs' records); so is a schedule's fire (its
    /// slot's record is stored).
    pub fn is_durable(&self) -> bool {
        !matches!(
            self,
            EventKind::StreamDelta { .. }
                | EventKind::StatusChanged(_)
                | EventKind::ModelReasoning(_)
                | EventKind::ToolCallParsed(_)
                | EventKind::MemoryLearned { .. }
                | EventKind::LaneQueued { .. }
                | EventKind::LaneRejected { .. }
                | EventKind::LaneCollected { .. }
                | EventKind::LaneRolledBack { .. }
                | EventKind::LaneInterrupted { .. }
                | EventKind::ScheduleFired { .. }
        )
    }
}
