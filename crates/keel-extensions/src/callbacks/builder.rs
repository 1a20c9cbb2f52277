//! The `on_*` methods of [`AgentBuilder`], as the extension trait [`AgentCallbacks`]: each adds
//! one typed callback (see the module docs of [`crate::callbacks`] for when each fires and the
//! contract handlers keep). Calling a method twice adds a second handler; both are called.

use std::sync::Arc;

use keel_core::event::EventKind;
use keel_core::{AgentBuilder, StreamDelta};

use super::{
    Callback, ModelReasoning, ParsedToolCall, StatusChange, StepSummary, Thinking, ToolProgress,
};

/// The typed callbacks' builder methods. `use keel_extensions::AgentCallbacks;`
pub trait AgentCallbacks: Sized {
    /// Calls `handler` before each tool call runs, when a failed idempotent call is retried,
    /// and after each call ends (agent tools the loop answers itself, like
    /// `request_more_iterations`, do not run as tools and are not reported).
    fn on_tool_progress(self, handler: impl Fn(&ToolProgress<'_>) + Send + Sync + 'static) -> Self;

    /// Calls `handler` when a model call begins (`Started`) and when the run moves on from it
    /// (`Stopped`): for a "thinking…" indicator.
    fn on_thinking(self, handler: impl Fn(&Thinking) + Send + Sync + 'static) -> Self;

    /// Calls `handler` with the reasoning text of each model answer that has some, whole, once
    /// the answer is complete (streamed reasoning also reaches [`Self::on_stream_delta`] piece
    /// by piece).
    fn on_reasoning(self, handler: impl Fn(&ModelReasoning) + Send + Sync + 'static) -> Self;

    /// Calls `handler` after each complete agent turn: the model answered and every tool call
    /// it asked for has its result.
    fn on_step(self, handler: impl Fn(&StepSummary) + Send + Sync + 'static) -> Self;

    /// Calls `handler` with each piece of a streamed answer as it arrives: text, reasoning,
    /// tool-call starts and argument fragments, warnings, and the one `Finished` per stream.
    /// Nothing is streamed with [`AgentBuilder::stream`] off. Called per token: keep it cheap.
    fn on_stream_delta(self, handler: impl Fn(&StreamDelta) + Send + Sync + 'static) -> Self;

    /// Calls `handler` with each tool call of a model answer, whole, as soon as the answer is
    /// complete — before approvals, hooks and the tool itself see it.
    fn on_tool_call_parsed(self, handler: impl Fn(&ParsedToolCall) + Send + Sync + 'static)
    -> Self;

    /// Calls `handler` when the run's status changes: thinking, executing, compacting,
    /// waiting for approval or for the human, finished.
    fn on_status(self, handler: impl Fn(&StatusChange) + Send + Sync + 'static) -> Self;
}

impl AgentCallbacks for AgentBuilder {
    fn on_tool_progress(self, handler: impl Fn(&ToolProgress<'_>) + Send + Sync + 'static) -> Self {
        callback(self, "on_tool_progress", move |kind| {
            if let Some(progress) = ToolProgress::of(kind) {
                handler(&progress);
            }
        })
    }

    fn on_thinking(self, handler: impl Fn(&Thinking) + Send + Sync + 'static) -> Self {
        callback(self, "on_thinking", move |kind| {
            if let EventKind::StatusChanged(change) = kind {
                Thinking::of(change).iter().flatten().for_each(&handler);
            }
        })
    }

    fn on_reasoning(self, handler: impl Fn(&ModelReasoning) + Send + Sync + 'static) -> Self {
        callback(self, "on_reasoning", move |kind| {
            if let EventKind::ModelReasoning(reasoning) = kind {
                handler(reasoning);
            }
        })
    }

    fn on_step(self, handler: impl Fn(&StepSummary) + Send + Sync + 'static) -> Self {
        callback(self, "on_step", move |kind| {
            if let EventKind::StepCompleted(step) = kind {
                handler(step);
            }
        })
    }

    fn on_stream_delta(self, handler: impl Fn(&StreamDelta) + Send + Sync + 'static) -> Self {
        callback(self, "on_stream_delta", move |kind| {
            if let EventKind::StreamDelta { delta } = kind {
                handler(delta);
            }
        })
    }

    fn on_tool_call_parsed(
        self,
        handler: impl Fn(&ParsedToolCall) + Send + Sync + 'static,
    ) -> Self {
        callback(self, "on_tool_call_parsed", move |kind| {
            if let EventKind::ToolCallParsed(call) = kind {
                handler(call);
            }
        })
    }

    fn on_status(self, handler: impl Fn(&StatusChange) + Send + Sync + 'static) -> Self {
        callback(self, "on_status", move |kind| {
            if let EventKind::StatusChanged(change) = kind {
                handler(change);
            }
        })
    }
}

/// `builder` with one more event sink: `handler`, its panics caught and logged as `name`'s.
fn callback(
    builder: AgentBuilder,
    name: &'static str,
    handler: impl Fn(&EventKind) + Send + Sync + 'static,
) -> AgentBuilder {
    builder.event_sink(Arc::new(Callback::new(name, handler)))
}
