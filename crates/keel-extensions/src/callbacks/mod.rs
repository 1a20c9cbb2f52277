//! Typed callbacks for embedders (seed 004's callback surfaces), built on the kernel's event
//! stream: each `on_*` method of [`AgentCallbacks`] adds an [`EventSink`] to the
//! [`AgentBuilder`] that picks its events and hands their data, typed, to a handler. What the
//! events say is the one source of truth; an embedder who wants everything uses
//! [`AgentBuilder::event_sink`] instead. `use keel_extensions::AgentCallbacks;`
//!
//! | method | fires | with |
//! | --- | --- | --- |
//! | `on_tool_progress` | before each tool call, at each retry, after it | [`ToolProgress`] |
//! | `on_thinking` | a model call begins; the run moves on from it | [`Thinking`] |
//! | `on_reasoning` | a model answer carried reasoning text | [`ModelReasoning`] |
//! | `on_step` | a turn is complete (answer + all its tool results) | [`StepSummary`] |
//! | `on_stream_delta` | each piece of a streamed answer | [`StreamDelta`] |
//! | `on_tool_call_parsed` | each tool call of a complete answer, before it runs | [`ParsedToolCall`] |
//! | `on_status` | the run's status changes (thinking, executing, …) | [`StatusChange`] |
//!
//! **The contract.** Handlers are called inline, on the run's task, in event order, for every
//! run of the agent (runs on different sessions may call them concurrently). Keep them fast:
//! a handler that blocks holds up the loop (and a per-token handler holds up the stream); hand
//! slow work to a channel or a task. A handler that panics does not stop or stall the run: the
//! panic is caught, logged (`tracing`, once per handler at `warn`, then at `debug`), and the
//! run goes on (with `panic = "abort"` nothing can be caught).
//!
//! [`AgentBuilder`]: keel_core::AgentBuilder
//! [`AgentBuilder::event_sink`]: keel_core::AgentBuilder::event_sink
//! [`StreamDelta`]: keel_core::StreamDelta

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};

use keel_core::event::{Event, EventKind, EventSink};
pub use keel_core::event::{ModelReasoning, ParsedToolCall, RunStatus, StatusChange, StepSummary};

mod builder;

pub use builder::AgentCallbacks;

/// The model is, or stopped, thinking: a view of [`StatusChange`] for a "thinking…" indicator.
/// `Started` when a model call begins; `Stopped` when the run moves on from it (the answer
/// arrived, the call failed for good, or the run was cancelled). Retries of the same call are
/// one thinking spell; each new model call is a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Thinking {
    /// A model call began.
    Started {
        /// Its iteration, 1-based.
        iteration: u32,
    },
    /// The call is over.
    Stopped,
}

/// A tool call began, is retried, or ended: a view of `agent.tool.started`,
/// `agent.tool.retry` and `agent.tool.completed`, borrowing from the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolProgress<'a> {
    /// Before the tool runs.
    Started {
        /// Call id.
        call_id: &'a str,
        /// Tool name.
        name: &'a str,
        /// Raw JSON arguments.
        arguments: &'a str,
    },
    /// A transient failure of an idempotent tool; it runs again after `wait_ms`.
    Retrying {
        /// Call id.
        call_id: &'a str,
        /// Tool name.
        name: &'a str,
        /// The retry number, from 1.
        attempt: u32,
        /// The wait before it.
        wait_ms: u64,
        /// What went wrong.
        error: &'a str,
    },
    /// After the tool ran.
    Completed {
        /// Call id.
        call_id: &'a str,
        /// Tool name.
        name: &'a str,
        /// False when the result is an error.
        ok: bool,
        /// The result as the model sees it.
        output: &'a str,
        /// How long the call took.
        duration_ms: u64,
    },
}

impl<'a> ToolProgress<'a> {
    /// The tool progress an event tells, if it tells one.
    pub fn of(kind: &'a EventKind) -> Option<Self> {
        match kind {
            EventKind::ToolStarted {
                call_id,
                name,
                arguments,
            } => Some(ToolProgress::Started {
                call_id,
                name,
                arguments,
            }),
            EventKind::ToolRetry {
                call_id,
                name,
                attempt,
                wait_ms,
                error,
            } => Some(ToolProgress::Retrying {
                call_id,
                name,
                attempt: *attempt,
                wait_ms: *wait_ms,
                error,
            }),
            EventKind::ToolCompleted {
                call_id,
                name,
                ok,
                output,
                duration_ms,
                ..
            } => Some(ToolProgress::Completed {
                call_id,
                name,
                ok: *ok,
                output,
                duration_ms: *duration_ms,
            }),
            _ => None,
        }
    }
}

impl Thinking {
    /// What a status change means for thinking: the spell it ends, then the one it starts
    /// (a new model call right after another ends one and starts the next).
    pub fn of(change: &StatusChange) -> [Option<Thinking>; 2] {
        let stopped = (change.previous == Some(RunStatus::Thinking)).then_some(Thinking::Stopped);
        let started = (change.status == RunStatus::Thinking).then_some(Thinking::Started {
            iteration: change.iteration,
        });
        [stopped, started]
    }
}

/// An event sink that hands what it picks from each event to one handler, catching panics.
pub(crate) struct Callback<F> {
    /// The builder method it came from, for the log.
    name: &'static str,
    /// What it hands events to.
    handler: F,
    /// Whether the handler panicked before (later panics are logged at debug).
    panicked: AtomicBool,
}

impl<F: Fn(&EventKind) + Send + Sync> Callback<F> {
    /// A sink handing every event to `handler`, named `name` in the log.
    pub(crate) fn new(name: &'static str, handler: F) -> Self {
        Callback {
            name,
            handler,
            panicked: AtomicBool::new(false),
        }
    }
}

impl<F: Fn(&EventKind) + Send + Sync> EventSink for Callback<F> {
    fn emit(&self, event: &Event) {
        let called = catch_unwind(AssertUnwindSafe(|| (self.handler)(&event.kind)));
        if let Err(panic) = called {
            let message = panic_message(panic.as_ref());
            let run_id = event.run_id.as_str();
            let event = event.kind.name();
            if self.panicked.swap(true, Ordering::Relaxed) {
                tracing::debug!(
                    callback = self.name,
                    run_id,
                    event,
                    "callback panicked again: {message}"
                );
            } else {
                tracing::warn!(
                    callback = self.name,
                    run_id,
                    event,
                    "callback panicked; the run goes on (later panics of it are logged at debug): {message}"
                );
            }
        }
    }
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests;
