//! The span tree keel-telemetry builds from a run's events: names, parents, attributes, span
//! events, content only when asked for, segments of a paused run linked to its first, and the
//! queue's drop count.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use keel_core::event::RunStatus;
use keel_core::{
    AgentState, ApprovalDecision, Event, EventKind, EventSink, ParsedToolCall, ProviderErrorKind,
    StatusChange, StopReason, StreamDelta, Usage,
};
use opentelemetry::Value;
use opentelemetry::trace::{SpanId, Status};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use keel_telemetry::{BatchOptions, TraceOptions, Traces};

const RUN: &str = "0192f1c4-7a7e-7cc0-9c1b-2a64f2d1e0aa";
const CHILD: &str = "0192f1c4-7a7e-7cc0-9c1b-2a64f2d1e0bb";

#[derive(Clone, Debug, Default)]
struct Collect(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Collect {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        self.0.lock().unwrap().extend(batch);
        async { Ok(()) }
    }
}

fn options(record_content: bool) -> TraceOptions {
    TraceOptions {
        endpoint: None,
        record_content,
        service_name: "keel".into(),
        provider: Some("mock".into()),
    }
}

fn at(second: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + second, 0).unwrap()
}

fn event(run: &str, second: i64, kind: EventKind) -> Event {
    Event {
        ts: at(second),
        run_id: run.into(),
        session_id: if run == RUN {
            "s1".into()
        } else {
            "sub-1-x".into()
        },
        kind,
    }
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

/// A run that retries, falls back, calls `read_file` and `delegate_task` (whose child answers),
/// then answers.
fn tool_run() -> Vec<Event> {
    let request = |second, model: &str| {
        event(
            RUN,
            second,
            EventKind::ModelRequest {
                iteration: 1,
                model: model.into(),
                messages: 2,
                tools: 3,
                stream: true,
            },
        )
    };
    let error = |second, kind, status| {
        event(
            RUN,
            second,
            EventKind::ModelError {
                iteration: 1,
                kind,
                status: Some(status),
                message: "upstream said no to: secret prompt".into(),
            },
        )
    };
    let started = |run: &str, second, model: &str| {
        event(
            run,
            second,
            EventKind::RunStarted {
                provider: "mock".into(),
                model: model.into(),
                context: Default::default(),
            },
        )
    };
    vec![
        started(RUN, 0, "m1"),
        request(1, "m1"),
        error(2, ProviderErrorKind::Server, 500),
        event(
            RUN,
            3,
            EventKind::ProviderRetry {
                iteration: 1,
                model: "mock:m1".into(),
                attempt: 1,
                wait_ms: 5,
                kind: ProviderErrorKind::Server,
            },
        ),
        request(4, "m1"),
        error(5, ProviderErrorKind::ModelNotFound, 404),
        event(
            RUN,
            6,
            EventKind::ProviderFallback {
                iteration: 1,
                from: "mock:m1".into(),
                to: "backup:m2".into(),
                kind: ProviderErrorKind::ModelNotFound,
            },
        ),
        request(7, "m2"),
        event(
            RUN,
            8,
            EventKind::ModelResponse {
                iteration: 1,
                model: "m2-2026".into(),
                stop_reason: StopReason::ToolUse,
                tool_calls: 2,
                usage: usage(10, 5),
                latency_ms: 1000,
            },
        ),
        event(
            RUN,
            8,
            EventKind::ToolCallParsed(ParsedToolCall {
                iteration: 1,
                index: 0,
                call_id: "c1".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"secret.txt"}"#.into(),
            }),
        ),
        event(
            RUN,
            9,
            EventKind::ToolStarted {
                call_id: "c1".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"secret.txt"}"#.into(),
            },
        ),
        event(
            RUN,
            9,
            EventKind::ToolStarted {
                call_id: "c2".into(),
                name: "delegate_task".into(),
                arguments: r#"{"goal":"look"}"#.into(),
            },
        ),
        event(
            RUN,
            10,
            EventKind::ToolCompleted {
                call_id: "c1".into(),
                name: "read_file".into(),
                ok: true,
                output: "the secret".into(),
                truncated: false,
                duration_ms: 1000,
            },
        ),
        event(
            RUN,
            10,
            EventKind::DelegateStarted {
                call_id: "c2".into(),
                child_run_id: CHILD.into(),
                child_session_id: "sub-1-x".into(),
                goal: "look".into(),
                depth: 1,
                how: "start".into(),
            },
        ),
        started(CHILD, 11, "child-model"),
        event(
            CHILD,
            11,
            EventKind::ModelRequest {
                iteration: 1,
                model: "child-model".into(),
                messages: 1,
                tools: 0,
                stream: true,
            },
        ),
        event(
            CHILD,
            12,
            EventKind::StreamDelta {
                delta: StreamDelta::Text {
                    text: "child answer".into(),
                },
            },
        ),
        event(
            CHILD,
            12,
            EventKind::ModelResponse {
                iteration: 1,
                model: "child-model".into(),
                stop_reason: StopReason::EndTurn,
                tool_calls: 0,
                usage: usage(3, 2),
                latency_ms: 1000,
            },
        ),
        event(
            CHILD,
            13,
            EventKind::RunCompleted {
                iterations: 1,
                usage: usage(3, 2),
            },
        ),
        event(
            RUN,
            14,
            EventKind::DelegateFinished {
                call_id: "c2".into(),
                child_run_id: CHILD.into(),
                state: AgentState::Completed,
                iterations: 1,
                usage: usage(3, 2),
            },
        ),
        event(
            RUN,
            14,
            EventKind::ToolCompleted {
                call_id: "c2".into(),
                name: "delegate_task".into(),
                ok: true,
                output: "child answer".into(),
                truncated: false,
                duration_ms: 5000,
            },
        ),
        event(
            RUN,
            15,
            EventKind::ModelRequest {
                iteration: 2,
                model: "m2".into(),
                messages: 5,
                tools: 3,
                stream: true,
            },
        ),
        event(
            RUN,
            16,
            EventKind::ModelResponse {
                iteration: 2,
                model: "m2-2026".into(),
                stop_reason: StopReason::EndTurn,
                tool_calls: 0,
                usage: usage(20, 7),
                latency_ms: 1000,
            },
        ),
        event(
            RUN,
            16,
            EventKind::RunCompleted {
                iterations: 2,
                usage: usage(30, 12),
            },
        ),
    ]
}

async fn spans_of(events: &[Event], record_content: bool) -> Vec<SpanData> {
    let collect = Collect::default();
    let traces = Traces::with_exporter(
        &options(record_content),
        collect.clone(),
        "memory".into(),
        BatchOptions::default(),
    );
    let sink = traces.sink();
    for event in events {
        sink.emit(event);
    }
    let report = traces.shutdown(Duration::from_secs(5)).await;
    assert_eq!((report.dropped, report.failed), (0, 0), "{report:?}");
    let spans = collect.0.lock().unwrap().clone();
    assert_eq!(report.exported, spans.len() as u64);
    spans
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "{name}: {:?}", names(spans));
    found[0]
}

fn names(spans: &[SpanData]) -> Vec<String> {
    spans.iter().map(|s| s.name.to_string()).collect()
}

fn attr(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

fn text(span: &SpanData, key: &str) -> String {
    attr(span, key)
        .map(|v| v.as_str().into_owned())
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_tool_run_with_a_retry_a_fallback_and_a_child_is_one_tree() {
    let spans = spans_of(&tool_run(), false).await;
    let roots = named(&spans, "invoke_agent keel");
    assert_eq!(roots.len(), 2, "{:?}", names(&spans));
    let root = roots
        .iter()
        .find(|s| text(s, "keel.run.id") == RUN)
        .unwrap();
    assert_eq!(root.parent_span_id, SpanId::INVALID);
    assert_eq!(
        root.span_context.trace_id().to_string(),
        RUN.replace('-', "")
    );
    assert_eq!(root.start_time, std::time::SystemTime::from(at(0)));
    assert_eq!(root.end_time, std::time::SystemTime::from(at(16)));
    assert_eq!(text(root, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(text(root, "gen_ai.conversation.id"), "s1");
    assert_eq!(text(root, "keel.run.state"), "completed");
    assert_eq!(
        attr(root, "gen_ai.usage.input_tokens"),
        Some(Value::I64(30))
    );
    assert_eq!(
        attr(root, "gen_ai.usage.output_tokens"),
        Some(Value::I64(12))
    );
    let root_id = root.span_context.span_id();

    // Three calls in iteration 1 (failed, failed, answered) and one in iteration 2.
    let m1 = named(&spans, "chat m1");
    assert_eq!(m1.len(), 2);
    assert!(m1.iter().all(|s| s.parent_span_id == root_id));
    assert!(m1.iter().all(|s| matches!(s.status, Status::Error { .. })));
    let errors: Vec<String> = m1.iter().map(|s| text(s, "error.type")).collect();
    assert!(errors.contains(&"server".to_string()) && errors.contains(&"model_not_found".into()));
    assert_eq!(text(m1[0], "gen_ai.provider.name"), "mock");
    let m2 = named(&spans, "chat m2");
    assert_eq!(m2.len(), 2);
    let first = m2
        .iter()
        .find(|s| attr(s, "keel.iteration") == Some(Value::I64(1)))
        .unwrap();
    assert_eq!(first.parent_span_id, root_id);
    assert_eq!(
        text(first, "gen_ai.provider.name"),
        "backup",
        "the fallback's provider"
    );
    assert_eq!(text(first, "gen_ai.request.model"), "m2");
    assert_eq!(text(first, "gen_ai.response.model"), "m2-2026");
    assert_eq!(
        attr(first, "gen_ai.usage.input_tokens"),
        Some(Value::I64(10))
    );
    assert_eq!(
        attr(first, "gen_ai.usage.output_tokens"),
        Some(Value::I64(5))
    );
    assert_eq!(
        attr(first, "gen_ai.response.finish_reasons").map(|v| v.to_string()),
        Some("[\"tool_calls\"]".to_string())
    );
    assert_eq!(first.end_time, std::time::SystemTime::from(at(8)));

    let read = one(&spans, "execute_tool read_file");
    assert_eq!(read.parent_span_id, root_id);
    assert_eq!(text(read, "gen_ai.tool.name"), "read_file");
    assert_eq!(text(read, "gen_ai.tool.call.id"), "c1");
    let delegate = one(&spans, "execute_tool delegate_task");
    assert_eq!(delegate.parent_span_id, root_id);

    // The child hangs under its parent's delegate_task call, in the parent's trace.
    let child = roots
        .iter()
        .find(|s| text(s, "keel.run.id") == CHILD)
        .unwrap();
    assert_eq!(child.parent_span_id, delegate.span_context.span_id());
    assert_eq!(child.span_context.trace_id(), root.span_context.trace_id());
    assert_eq!(attr(child, "keel.delegate.depth"), Some(Value::I64(1)));
    let child_chat = one(&spans, "chat child-model");
    assert_eq!(child_chat.parent_span_id, child.span_context.span_id());

    // Retries and fallbacks are events of the run's span, at their own times.
    let events: Vec<&str> = root.events.iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(events, ["agent.provider.retry", "agent.provider.fallback"]);
    assert_eq!(
        root.events.events[0].timestamp,
        std::time::SystemTime::from(at(3))
    );
    let delegate_events: Vec<&str> = delegate.events.iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(
        delegate_events,
        ["agent.delegate.started", "agent.delegate.finished"]
    );
}

/// Every attribute value and event attribute of every span, as text.
fn everything(spans: &[SpanData]) -> String {
    let mut all = String::new();
    for span in spans {
        if let Status::Error { description } = &span.status {
            all.push_str(description);
        }
        for kv in &span.attributes {
            all.push_str(&format!("{}={} ", kv.key, kv.value));
        }
        for event in span.events.iter() {
            for kv in &event.attributes {
                all.push_str(&format!("{}={} ", kv.key, kv.value));
            }
        }
    }
    all
}

#[tokio::test(start_paused = true)]
async fn content_is_recorded_only_when_asked_for() {
    let without = everything(&spans_of(&tool_run(), false).await);
    for secret in [
        "secret",
        "child answer",
        "gen_ai.tool.call.arguments",
        "gen_ai.output.messages",
    ] {
        assert!(!without.contains(secret), "{secret} in {without}");
    }
    let spans = spans_of(&tool_run(), true).await;
    let read = one(&spans, "execute_tool read_file");
    assert_eq!(
        text(read, "gen_ai.tool.call.arguments"),
        r#"{"path":"secret.txt"}"#
    );
    assert_eq!(text(read, "gen_ai.tool.call.result"), "the secret");
    let child_chat = one(&spans, "chat child-model");
    let output: serde_json::Value =
        serde_json::from_str(&text(child_chat, "gen_ai.output.messages")).unwrap();
    assert_eq!(output[0]["parts"][0]["content"], "child answer");
    let m2 = named(&spans, "chat m2");
    let first = m2
        .iter()
        .find(|s| attr(s, "keel.iteration") == Some(Value::I64(1)))
        .unwrap();
    let output: serde_json::Value =
        serde_json::from_str(&text(first, "gen_ai.output.messages")).unwrap();
    assert_eq!(output[0]["parts"][0]["name"], "read_file");
}

#[tokio::test(start_paused = true)]
async fn a_run_waiting_for_approval_ends_its_span_and_continues_in_a_linked_one() {
    let events = vec![
        event(
            RUN,
            0,
            EventKind::RunStarted {
                provider: "mock".into(),
                model: "m1".into(),
                context: Default::default(),
            },
        ),
        event(
            RUN,
            1,
            EventKind::ApprovalRequested {
                call_id: "c1".into(),
                tool: "shell".into(),
                reason: "runs rm".into(),
            },
        ),
        event(
            RUN,
            1,
            EventKind::StatusChanged(StatusChange {
                status: RunStatus::WaitingForApproval,
                previous: None,
                iteration: 1,
                state: AgentState::WaitingOnHuman,
            }),
        ),
        event(
            RUN,
            100,
            EventKind::ApprovalDecided {
                call_id: "c1".into(),
                decision: ApprovalDecision::ApproveOnce,
            },
        ),
        event(
            RUN,
            101,
            EventKind::RunCompleted {
                iterations: 1,
                usage: Usage::default(),
            },
        ),
    ];
    let spans = spans_of(&events, false).await;
    let roots = named(&spans, "invoke_agent keel");
    assert_eq!(roots.len(), 2);
    let (first, second) = (roots[0], roots[1]);
    assert_eq!(text(first, "keel.run.state"), "waiting_on_human");
    assert_eq!(text(first, "keel.run.waiting"), "waiting_for_approval");
    assert_eq!(first.end_time, std::time::SystemTime::from(at(1)));
    assert_eq!(first.events.events[0].name, "agent.approval.requested");
    assert_eq!(
        second.span_context.trace_id(),
        first.span_context.trace_id()
    );
    assert_eq!(second.parent_span_id, SpanId::INVALID);
    assert_eq!(text(second, "keel.run.continued"), "approval_decided");
    assert_eq!(second.links.links.len(), 1);
    assert_eq!(second.links.links[0].span_context, first.span_context);
    assert_eq!(second.start_time, std::time::SystemTime::from(at(100)));
    assert_eq!(text(second, "keel.run.state"), "completed");
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_drops_and_counts_and_shutdown_ends_what_is_open() {
    let collect = Collect::default();
    let batch = BatchOptions {
        queue: 2,
        batch: 2,
        delay: Duration::from_secs(1),
    };
    let traces = Traces::with_exporter(&options(false), collect.clone(), "memory".into(), batch);
    let sink = traces.sink();
    // No await between: the exporter cannot take any before the queue is full.
    for events in [tool_run(), tool_run(), tool_run()] {
        for event in &events {
            sink.emit(event);
        }
    }
    // An open run at shutdown is ended, marked unfinished (and dropped here: the queue is full).
    sink.emit(&event(
        "open-run",
        0,
        EventKind::RunStarted {
            provider: "mock".into(),
            model: "m1".into(),
            context: Default::default(),
        },
    ));
    let report = traces.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.exported, 2, "{report:?}");
    assert!(report.dropped > 10, "{report:?}");
    assert_eq!(collect.0.lock().unwrap().len(), 2);
}

#[test]
fn without_an_endpoint_nothing_starts() {
    // No runtime here: starting anything would panic.
    assert!(Traces::start(&options(true)).unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_the_spans_still_open_marked_unfinished() {
    let events = &tool_run()[..2];
    let spans = spans_of(events, false).await;
    assert_eq!(names(&spans).len(), 2, "{:?}", names(&spans));
    for span in &spans {
        assert_eq!(attr(span, "keel.span.unfinished"), Some(Value::Bool(true)));
    }
    let chat = one(&spans, "chat m1");
    let root = one(&spans, "invoke_agent keel");
    assert_eq!(chat.parent_span_id, root.span_context.span_id());
}

#[tokio::test(start_paused = true)]
async fn a_resumed_run_opens_a_segment_linked_to_its_first_span() {
    let first = spans_of(&tool_run()[..1], false).await;
    let events = vec![
        event(
            RUN,
            50,
            EventKind::Resumed {
                boundary: keel_core::Boundary::ToolResult,
                replayed: 2,
            },
        ),
        event(
            RUN,
            51,
            EventKind::RunCompleted {
                iterations: 3,
                usage: Usage::default(),
            },
        ),
    ];
    let spans = spans_of(&events, false).await;
    let resumed = one(&spans, "invoke_agent keel");
    assert_eq!(
        resumed.span_context.trace_id(),
        first[0].span_context.trace_id()
    );
    assert_ne!(
        resumed.span_context.span_id(),
        first[0].span_context.span_id()
    );
    assert_eq!(
        resumed.links.links[0].span_context.span_id(),
        first[0].span_context.span_id()
    );
    assert_eq!(text(resumed, "keel.run.continued"), "resumed");
    assert_eq!(
        text(resumed, "gen_ai.provider.name"),
        "mock",
        "the configured provider"
    );
    assert_eq!(resumed.events.events[0].name, "agent_run.resumed");
    assert_eq!(text(resumed, "keel.run.state"), "completed");
}
