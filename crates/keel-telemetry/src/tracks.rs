//! From a stream of events to spans: each run's open `invoke_agent` span, its model call in
//! flight (`chat {model}`) and its tool calls in flight (`execute_tool {name}`), ended at the
//! events that end them, with the events' own timestamps.
//!
//! A run's `invoke_agent` span is a *segment*: it opens at `agent_run.started` and ends at the
//! run's terminal event, or where the run stops to wait for a person (an approval, a question,
//! a `resume_unsafe` halt) — a run that waits a week does not hold a span open for a week. The
//! run's next events (`agent_run.resumed`, the answer, the decision; in this process or
//! another) open a new segment in the same trace, linked to the first segment.

use std::collections::HashMap;
use std::time::SystemTime;

use keel_core::event::RunStatus;
use keel_core::{Event, EventKind, StreamDelta};
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, TraceFlags, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData};

use crate::attributes as attr;
use crate::content::Answer;
use crate::ids::{first_span_id_of, trace_id_of};
use crate::span::OpenSpan;

/// The most runs followed at once; a new run past it is not traced (a daemon whose runs never
/// end must not grow without bound).
const MAX_OPEN_RUNS: usize = 4096;

/// What turns events into spans; see the module's documentation.
pub(crate) struct Tracks {
    agent: String,
    provider: Option<String>,
    pub(crate) record_content: bool,
    scope: InstrumentationScope,
    ids: RandomIdGenerator,
    runs: HashMap<String, RunTrack>,
    /// Where a child run's spans hang: its parent's `execute_tool` span, by child run id.
    parents: HashMap<String, Parent>,
}

#[derive(Clone)]
struct Parent {
    context: SpanContext,
    depth: u32,
}

/// One run's open segment.
struct RunTrack {
    root: OpenSpan,
    provider: Option<String>,
    chat: Option<Chat>,
    tools: HashMap<String, OpenSpan>,
    input_tokens: u64,
    output_tokens: u64,
}

/// A model call: open until it answers or fails; an answered one stays until the events that
/// describe its answer (reasoning, parsed tool calls) have arrived, then ends at its answer's
/// time.
struct Chat {
    span: OpenSpan,
    answered_at: Option<SystemTime>,
    answer: Answer,
}

impl Tracks {
    /// Spans named for `agent`; `provider` is the configured provider, used for a run
    /// continued here that does not say its own.
    pub(crate) fn new(agent: String, provider: Option<String>, record_content: bool) -> Self {
        Tracks {
            agent,
            provider,
            record_content,
            scope: InstrumentationScope::builder("keel")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            ids: RandomIdGenerator::default(),
            runs: HashMap::new(),
            parents: HashMap::new(),
        }
    }

    /// Takes one event; spans it ends are pushed on `out`.
    pub(crate) fn on_event(&mut self, event: &Event, out: &mut Vec<SpanData>) {
        let at: SystemTime = event.ts.into();
        let describes_answer = matches!(
            event.kind,
            EventKind::ModelReasoning(_)
                | EventKind::ToolCallParsed(_)
                | EventKind::StreamDelta { .. }
        );
        if !describes_answer && let Some(track) = self.runs.get_mut(&event.run_id) {
            track.end_answered_chat(&self.scope, self.record_content, out);
        }
        match &event.kind {
            EventKind::RunStarted {
                provider, model, ..
            } if !self.runs.contains_key(&event.run_id) => {
                self.open(event, at, Some(provider.clone()), Some(model), None);
            }
            EventKind::Resumed { .. } => self.continue_run(event, at, "resumed"),
            EventKind::HumanAnswered { .. } => self.continue_run(event, at, "answered"),
            EventKind::ApprovalDecided { .. } => self.continue_run(event, at, "approval_decided"),
            _ => {}
        }
        let Some(track) = self.runs.get_mut(&event.run_id) else {
            return;
        };
        let content = self.record_content;
        match &event.kind {
            EventKind::ModelRequest {
                iteration,
                model,
                messages,
                tools,
                ..
            } => {
                if let Some(chat) = track.chat.take() {
                    out.push(unfinished(chat.span, at, &self.scope));
                }
                let id = self.ids.new_span_id();
                let mut span = track.child(id, format!("chat {model}"), SpanKind::Client, at);
                span.set(KeyValue::new(attr::OPERATION, "chat"));
                if let Some(provider) = &track.provider {
                    span.set(KeyValue::new(attr::PROVIDER, provider.clone()));
                }
                span.set(KeyValue::new(attr::REQUEST_MODEL, model.clone()));
                span.set(KeyValue::new("keel.iteration", i64::from(*iteration)));
                span.set(KeyValue::new("keel.request.messages", *messages as i64));
                span.set(KeyValue::new("keel.request.tools", *tools as i64));
                track.chat = Some(Chat {
                    span,
                    answered_at: None,
                    answer: Answer::default(),
                });
            }
            EventKind::ModelResponse {
                model,
                stop_reason,
                usage,
                ..
            } => {
                track.input_tokens += usage.input_tokens;
                track.output_tokens += usage.output_tokens;
                if let Some(chat) = &mut track.chat {
                    let span = &mut chat.span;
                    span.set(KeyValue::new(attr::RESPONSE_MODEL, model.clone()));
                    span.set(KeyValue::new(attr::INPUT_TOKENS, usage.input_tokens as i64));
                    span.set(KeyValue::new(
                        attr::OUTPUT_TOKENS,
                        usage.output_tokens as i64,
                    ));
                    span.set(attr::finish_reasons(*stop_reason));
                    chat.answer.finish_reason = Some(*stop_reason);
                    chat.answered_at = Some(at);
                }
            }
            EventKind::ModelError {
                kind,
                status,
                message,
                ..
            } => {
                if let Some(mut chat) = track.chat.take() {
                    chat.span
                        .set(KeyValue::new(attr::ERROR_TYPE, kind.as_str()));
                    if let Some(status) = status {
                        chat.span
                            .set(KeyValue::new(attr::HTTP_STATUS, i64::from(*status)));
                    }
                    chat.span.fail(if content {
                        message.clone()
                    } else {
                        kind.as_str().to_string()
                    });
                    out.push(chat.span.end(at, &self.scope));
                }
            }
            EventKind::StreamDelta {
                delta: StreamDelta::Text { text },
            } if content => {
                if let Some(chat) = &mut track.chat {
                    chat.answer.push_text(text);
                }
            }
            EventKind::ModelReasoning(reasoning) if content => {
                if let Some(chat) = &mut track.chat {
                    chat.answer.reasoning(&reasoning.text);
                }
            }
            EventKind::ToolCallParsed(call) if content => {
                if let Some(chat) = &mut track.chat {
                    chat.answer.tool_call(call);
                }
            }
            EventKind::ToolStarted {
                call_id,
                name,
                arguments,
            } => {
                let id = self.ids.new_span_id();
                let mut span =
                    track.child(id, format!("execute_tool {name}"), SpanKind::Internal, at);
                span.set(KeyValue::new(attr::OPERATION, "execute_tool"));
                span.set(KeyValue::new(attr::TOOL_NAME, name.clone()));
                span.set(KeyValue::new(attr::TOOL_CALL_ID, call_id.clone()));
                span.set(KeyValue::new(attr::TOOL_TYPE, "function"));
                if content {
                    span.set(KeyValue::new(attr::TOOL_ARGUMENTS, arguments.clone()));
                }
                if let Some(old) = track.tools.insert(call_id.clone(), span) {
                    out.push(unfinished(old, at, &self.scope));
                }
            }
            EventKind::ToolCompleted {
                call_id,
                ok,
                output,
                truncated,
                ..
            } => {
                if let Some(mut span) = track.tools.remove(call_id) {
                    if !ok {
                        span.set(KeyValue::new(attr::ERROR_TYPE, "tool_error"));
                        span.fail("tool_error");
                    }
                    if *truncated {
                        span.set(KeyValue::new("keel.tool.result_truncated", true));
                    }
                    if content {
                        span.set(KeyValue::new(attr::TOOL_RESULT, output.clone()));
                    }
                    out.push(span.end(at, &self.scope));
                }
            }
            EventKind::DelegateStarted {
                call_id,
                child_run_id,
                depth,
                how,
                goal,
                ..
            } => {
                let (context, span) = match track.tools.get_mut(call_id) {
                    Some(span) => (span.context().clone(), span),
                    None => (track.root.context().clone(), &mut track.root),
                };
                let mut attributes = vec![
                    KeyValue::new("keel.delegate.child_run_id", child_run_id.clone()),
                    KeyValue::new("keel.delegate.how", how.clone()),
                    KeyValue::new("keel.delegate.depth", i64::from(*depth)),
                ];
                if content {
                    attributes.push(KeyValue::new("keel.delegate.goal", goal.clone()));
                }
                span.event("agent.delegate.started", at, attributes);
                if self.parents.len() < MAX_OPEN_RUNS {
                    self.parents.insert(
                        child_run_id.clone(),
                        Parent {
                            context,
                            depth: *depth,
                        },
                    );
                }
            }
            EventKind::DelegateFinished {
                call_id,
                child_run_id,
                state,
                iterations,
                ..
            } => {
                self.parents.remove(child_run_id);
                let span = match track.tools.get_mut(call_id) {
                    Some(span) => span,
                    None => &mut track.root,
                };
                span.event(
                    "agent.delegate.finished",
                    at,
                    vec![
                        KeyValue::new("keel.delegate.child_run_id", child_run_id.clone()),
                        KeyValue::new("keel.run.state", state.as_str()),
                        KeyValue::new("keel.run.iterations", i64::from(*iterations)),
                    ],
                );
            }
            EventKind::ToolRetry { call_id, .. } | EventKind::ToolHook { call_id, .. } => {
                let (name, attributes) = attr::span_event(&event.kind, content);
                match track.tools.get_mut(call_id) {
                    Some(span) => span.event(name, at, attributes),
                    None => track.root.event(name, at, attributes),
                }
            }
            EventKind::ProviderFallback { to, .. } => {
                track.provider = to.split_once(':').map(|(provider, _)| provider.to_string());
                let (name, attributes) = attr::span_event(&event.kind, content);
                track.root.event(name, at, attributes);
            }
            EventKind::RunCompleted { iterations, .. } => {
                self.end(event, at, "completed", None, *iterations, out);
            }
            EventKind::RunCancelled { iterations } => {
                self.end(event, at, "cancelled", None, *iterations, out);
            }
            EventKind::RunFailed {
                state,
                reason,
                message,
                iterations,
            } => {
                let error = reason.map_or(state.as_str(), |reason| reason.as_str());
                let description = if content {
                    message.clone()
                } else {
                    error.to_string()
                };
                let failure = Some((error, description));
                self.end(event, at, state.as_str(), failure, *iterations, out);
            }
            EventKind::ResumeUnsafe { .. } => {
                let (name, attributes) = attr::span_event(&event.kind, content);
                track.root.event(name, at, attributes);
                track
                    .root
                    .set(KeyValue::new("keel.run.reason", "resume_unsafe"));
                self.end(event, at, "waiting_on_human", None, 0, out);
            }
            EventKind::StatusChanged(change)
                if matches!(
                    change.status,
                    RunStatus::WaitingForApproval | RunStatus::WaitingForHuman
                ) =>
            {
                track
                    .root
                    .set(KeyValue::new("keel.run.waiting", change.status.as_str()));
                self.end(event, at, "waiting_on_human", None, change.iteration, out);
            }
            kind => {
                if attr::is_span_event(kind) {
                    let (name, attributes) = attr::span_event(kind, content);
                    track.root.event(name, at, attributes);
                }
            }
        }
    }

    /// Ends every open span at `at`, marked unfinished (the process is stopping).
    pub(crate) fn end_all(&mut self, at: SystemTime, out: &mut Vec<SpanData>) {
        let content = self.record_content;
        for (_, mut track) in self.runs.drain() {
            track.end_answered_chat(&self.scope, content, out);
            track.close_children(at, &self.scope, out);
            out.push(unfinished(track.root, at, &self.scope));
        }
        self.parents.clear();
    }

    /// Opens a segment of `event`'s run: its first (`continues` is `None`), or a later one.
    fn open(
        &mut self,
        event: &Event,
        at: SystemTime,
        provider: Option<String>,
        model: Option<&str>,
        continues: Option<&'static str>,
    ) {
        if self.runs.len() >= MAX_OPEN_RUNS {
            return;
        }
        let run_id = &event.run_id;
        let parent = self.parents.get(run_id).cloned();
        let trace = parent
            .as_ref()
            .map_or_else(|| trace_id_of(run_id), |p| p.context.trace_id());
        let id = match continues {
            None => first_span_id_of(run_id),
            Some(_) => self.ids.new_span_id(),
        };
        let parent_id = parent
            .as_ref()
            .map_or(SpanId::INVALID, |p| p.context.span_id());
        let name = format!("invoke_agent {}", self.agent);
        let mut root = OpenSpan::new(trace, id, parent_id, name, SpanKind::Internal, at);
        root.set(KeyValue::new(attr::OPERATION, "invoke_agent"));
        root.set(KeyValue::new(attr::AGENT_NAME, self.agent.clone()));
        root.set(KeyValue::new(
            attr::CONVERSATION_ID,
            event.session_id.clone(),
        ));
        root.set(KeyValue::new("keel.run.id", run_id.clone()));
        let provider = provider.or_else(|| self.provider.clone());
        if let Some(provider) = &provider {
            root.set(KeyValue::new(attr::PROVIDER, provider.clone()));
        }
        if let Some(model) = model {
            root.set(KeyValue::new(attr::REQUEST_MODEL, model.to_string()));
        }
        if let Some(parent) = &parent {
            root.set(KeyValue::new(
                "keel.delegate.depth",
                i64::from(parent.depth),
            ));
        }
        if let Some(how) = continues {
            root.set(KeyValue::new("keel.run.continued", how));
            let first = SpanContext::new(
                trace,
                first_span_id_of(run_id),
                TraceFlags::SAMPLED,
                false,
                TraceState::NONE,
            );
            root.link(first, vec![KeyValue::new("keel.link", "continues")]);
        }
        self.runs.insert(
            run_id.clone(),
            RunTrack {
                root,
                provider,
                chat: None,
                tools: HashMap::new(),
                input_tokens: 0,
                output_tokens: 0,
            },
        );
    }

    /// A run that stopped (here or elsewhere) goes on: a new segment, unless one is open.
    fn continue_run(&mut self, event: &Event, at: SystemTime, how: &'static str) {
        if !self.runs.contains_key(&event.run_id) {
            self.open(event, at, None, None, Some(how));
        }
    }

    /// Ends `event`'s run's segment in `state` (`failure`: its error type and description).
    fn end(
        &mut self,
        event: &Event,
        at: SystemTime,
        state: &'static str,
        failure: Option<(&'static str, String)>,
        iterations: u32,
        out: &mut Vec<SpanData>,
    ) {
        let Some(mut track) = self.runs.remove(&event.run_id) else {
            return;
        };
        track.end_answered_chat(&self.scope, self.record_content, out);
        track.close_children(at, &self.scope, out);
        let root = &mut track.root;
        root.set(KeyValue::new("keel.run.state", state));
        if iterations > 0 {
            root.set(KeyValue::new("keel.run.iterations", i64::from(iterations)));
        }
        root.set(KeyValue::new(attr::INPUT_TOKENS, track.input_tokens as i64));
        root.set(KeyValue::new(
            attr::OUTPUT_TOKENS,
            track.output_tokens as i64,
        ));
        if let Some((error, description)) = failure {
            root.set(KeyValue::new(attr::ERROR_TYPE, error));
            root.fail(description);
        }
        out.push(track.root.end(at, &self.scope));
    }
}

impl RunTrack {
    /// A span under this segment's `invoke_agent` span.
    fn child(&self, id: SpanId, name: String, kind: SpanKind, at: SystemTime) -> OpenSpan {
        let root = self.root.context();
        OpenSpan::new(root.trace_id(), id, root.span_id(), name, kind, at)
    }

    /// Ends the model call whose answer is complete, at its answer's time.
    fn end_answered_chat(
        &mut self,
        scope: &InstrumentationScope,
        content: bool,
        out: &mut Vec<SpanData>,
    ) {
        if self.chat.as_ref().is_some_and(|c| c.answered_at.is_some())
            && let Some(mut chat) = self.chat.take()
        {
            if content && let Some(messages) = chat.answer.output_messages() {
                chat.span
                    .set(KeyValue::new(attr::OUTPUT_MESSAGES, messages));
            }
            let at = chat.answered_at.unwrap_or(SystemTime::UNIX_EPOCH);
            out.push(chat.span.end(at, scope));
        }
    }

    /// Ends the model call and tool calls still open, marked unfinished.
    fn close_children(
        &mut self,
        at: SystemTime,
        scope: &InstrumentationScope,
        out: &mut Vec<SpanData>,
    ) {
        if let Some(chat) = self.chat.take() {
            out.push(unfinished(chat.span, at, scope));
        }
        for (_, span) in self.tools.drain() {
            out.push(unfinished(span, at, scope));
        }
    }
}

/// A span ended without the event that ends it (the run stopped, or the process did).
fn unfinished(mut span: OpenSpan, at: SystemTime, scope: &InstrumentationScope) -> SpanData {
    span.set(KeyValue::new("keel.span.unfinished", true));
    span.end(at, scope)
}
