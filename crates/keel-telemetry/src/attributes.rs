//! Attribute names (the OpenTelemetry GenAI semantic conventions, and keel's own under
//! `keel.`), and the span events that keel's decisions become.

use keel_core::{EventKind, StopReason};
use opentelemetry::{Array, KeyValue, StringValue, Value};

/// `gen_ai.operation.name`: `invoke_agent`, `chat` or `execute_tool`.
pub const OPERATION: &str = "gen_ai.operation.name";
/// `gen_ai.provider.name`: the configured provider's name.
pub const PROVIDER: &str = "gen_ai.provider.name";
/// `gen_ai.agent.name`.
pub const AGENT_NAME: &str = "gen_ai.agent.name";
/// `gen_ai.conversation.id`: keel's session id.
pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// `gen_ai.request.model`.
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
/// `gen_ai.response.model`.
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
/// `gen_ai.usage.input_tokens`.
pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// `gen_ai.usage.output_tokens`.
pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// `gen_ai.response.finish_reasons` (a string array).
pub const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// `gen_ai.output.messages` (content: the answer as JSON).
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// `gen_ai.tool.name`.
pub const TOOL_NAME: &str = "gen_ai.tool.name";
/// `gen_ai.tool.call.id`.
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `gen_ai.tool.type`.
pub const TOOL_TYPE: &str = "gen_ai.tool.type";
/// `gen_ai.tool.call.arguments` (content).
pub const TOOL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// `gen_ai.tool.call.result` (content).
pub const TOOL_RESULT: &str = "gen_ai.tool.call.result";
/// `error.type`: the provider error class, `tool_error`, or the run's failure reason.
pub const ERROR_TYPE: &str = "error.type";
/// `http.response.status_code` of a failed model call.
pub const HTTP_STATUS: &str = "http.response.status_code";

/// The conventions' finish reason for keel's stop reason.
pub fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::EndTurn => "stop",
        StopReason::ToolUse => "tool_calls",
        StopReason::MaxTokens => "length",
    }
}

/// `gen_ai.response.finish_reasons` for one answer.
pub(crate) fn finish_reasons(stop: StopReason) -> KeyValue {
    KeyValue::new(
        FINISH_REASONS,
        Value::Array(Array::String(vec![StringValue::from(finish_reason(stop))])),
    )
}

/// Whether `kind` becomes an event on its run's `invoke_agent` span.
pub(crate) fn is_span_event(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::ProviderRetry { .. }
            | EventKind::ProviderFallback { .. }
            | EventKind::CompactionRun { .. }
            | EventKind::RecoveryFired { .. }
            | EventKind::LoopDetected { .. }
            | EventKind::GuardrailEscalated { .. }
            | EventKind::ApprovalRequested { .. }
            | EventKind::ApprovalDecided { .. }
            | EventKind::HumanAsked { .. }
            | EventKind::HumanAnswered { .. }
            | EventKind::MaxTokensRecovery { .. }
            | EventKind::SoftLimit { .. }
            | EventKind::IterationsExtended { .. }
            | EventKind::BudgetNear { .. }
            | EventKind::ResumeUnsafe { .. }
            | EventKind::Resumed { .. }
            | EventKind::LaneSteered { .. }
            | EventKind::MemoryFlushed { .. }
    )
}

/// The span event for `kind`: its stable event name, and its attributes (text a person or
/// the model wrote only when `content`).
pub(crate) fn span_event(kind: &EventKind, content: bool) -> (&'static str, Vec<KeyValue>) {
    let int = |key: &'static str, value: u64| KeyValue::new(key, value as i64);
    let text = |key: &'static str, value: &str| KeyValue::new(key, value.to_string());
    let mut attributes = Vec::new();
    match kind {
        EventKind::ProviderRetry {
            model,
            attempt,
            wait_ms,
            kind,
            ..
        } => {
            attributes.push(text("keel.model", model));
            attributes.push(int("keel.attempt", u64::from(*attempt)));
            attributes.push(int("keel.wait_ms", *wait_ms));
            attributes.push(text(ERROR_TYPE, kind.as_str()));
        }
        EventKind::ProviderFallback { from, to, kind, .. } => {
            attributes.push(text("keel.fallback.from", from));
            attributes.push(text("keel.fallback.to", to));
            attributes.push(text(ERROR_TYPE, kind.as_str()));
        }
        EventKind::CompactionRun {
            strategy,
            before_tokens,
            after_tokens,
            before_messages,
            after_messages,
            summary_failed,
            ..
        } => {
            attributes.push(text("keel.compaction.strategy", strategy));
            attributes.push(int("keel.tokens.before", *before_tokens));
            attributes.push(int("keel.tokens.after", *after_tokens));
            attributes.push(int("keel.messages.before", *before_messages as u64));
            attributes.push(int("keel.messages.after", *after_messages as u64));
            attributes.push(KeyValue::new(
                "keel.compaction.summary_failed",
                *summary_failed,
            ));
        }
        EventKind::RecoveryFired {
            tier,
            reason,
            before_tokens,
            after_tokens,
            ..
        } => {
            attributes.push(text("keel.recovery.tier", tier));
            attributes.push(text("keel.recovery.reason", reason));
            attributes.push(int("keel.tokens.before", *before_tokens));
            attributes.push(int("keel.tokens.after", *after_tokens));
        }
        EventKind::LoopDetected { tier, tool, level } => {
            attributes.push(text("keel.loop.tier", tier));
            if let Some(tool) = tool {
                attributes.push(text(TOOL_NAME, tool));
            }
            attributes.push(int("keel.loop.level", u64::from(*level)));
        }
        EventKind::GuardrailEscalated {
            level,
            action,
            message,
        } => {
            attributes.push(int("keel.guardrail.level", u64::from(*level)));
            attributes.push(text("keel.guardrail.action", action));
            if content {
                attributes.push(text("keel.guardrail.message", message));
            }
        }
        EventKind::ApprovalRequested {
            call_id,
            tool,
            reason,
        } => {
            attributes.push(text(TOOL_CALL_ID, call_id));
            attributes.push(text(TOOL_NAME, tool));
            if content {
                attributes.push(text("keel.approval.reason", reason));
            }
        }
        EventKind::ApprovalDecided { call_id, decision } => {
            attributes.push(text(TOOL_CALL_ID, call_id));
            attributes.push(text("keel.approval.decision", decision.as_str()));
        }
        EventKind::HumanAsked { question, choices } => {
            attributes.push(int("keel.question.choices", choices.len() as u64));
            if content {
                attributes.push(text("keel.question", question));
            }
        }
        EventKind::HumanAnswered { answer } if content => {
            attributes.push(text("keel.answer", answer));
        }
        EventKind::MaxTokensRecovery { attempt, limit } => {
            attributes.push(int("keel.attempt", u64::from(*attempt)));
            attributes.push(int("keel.limit", u64::from(*limit)));
        }
        EventKind::SoftLimit { iterations } => {
            attributes.push(int("keel.run.iterations", u64::from(*iterations)));
        }
        EventKind::IterationsExtended { granted, limit, .. } => {
            attributes.push(KeyValue::new("keel.granted", *granted));
            attributes.push(int("keel.limit", u64::from(*limit)));
        }
        EventKind::BudgetNear { tokens, cost, .. } => {
            attributes.push(int("keel.tokens", *tokens));
            attributes.push(KeyValue::new("keel.cost_usd", *cost));
        }
        EventKind::ResumeUnsafe { call_id, tool } => {
            attributes.push(text(TOOL_CALL_ID, call_id));
            attributes.push(text(TOOL_NAME, tool));
        }
        EventKind::Resumed { boundary, replayed } => {
            attributes.push(text("keel.checkpoint.boundary", boundary.as_str()));
            attributes.push(int("keel.replayed", *replayed as u64));
        }
        EventKind::LaneSteered { absorbed } => {
            attributes.push(int("keel.lane.absorbed", absorbed.len() as u64));
        }
        EventKind::MemoryFlushed { saved } => {
            attributes.push(int("keel.memory.saved", *saved as u64));
        }
        EventKind::ToolRetry {
            attempt,
            wait_ms,
            error,
            ..
        } => {
            attributes.push(int("keel.attempt", u64::from(*attempt)));
            attributes.push(int("keel.wait_ms", *wait_ms));
            if content {
                attributes.push(text("keel.error", error));
            }
        }
        EventKind::ToolHook {
            index,
            stage,
            outcome,
            duration_ms,
            ..
        } => {
            attributes.push(int("keel.hook.index", *index as u64));
            attributes.push(text("keel.hook.stage", stage.as_str()));
            attributes.push(text("keel.hook.outcome", hook_outcome(*outcome)));
            attributes.push(int("keel.duration_ms", *duration_ms));
        }
        _ => {}
    }
    (kind.name(), attributes)
}

fn hook_outcome(outcome: keel_core::HookOutcome) -> &'static str {
    match outcome {
        keel_core::HookOutcome::Allow => "allow",
        keel_core::HookOutcome::Deny => "deny",
        keel_core::HookOutcome::Rewrite => "rewrite",
        keel_core::HookOutcome::Annotate => "annotate",
        keel_core::HookOutcome::Error => "error",
    }
}
