use chrono::{DateTime, Duration, Utc};
use keel_core::{Event, EventKind, EventSink, StopReason, Usage};

use super::Metrics;
use super::scrape::escape;

fn at(start: DateTime<Utc>, micros: i64) -> DateTime<Utc> {
    start + Duration::microseconds(micros)
}

fn event(ts: DateTime<Utc>, run: &str, kind: EventKind) -> Event {
    Event {
        ts,
        run_id: run.into(),
        session_id: "s".into(),
        kind,
    }
}

fn request(model: &str) -> EventKind {
    EventKind::ModelRequest {
        iteration: 1,
        model: model.into(),
        messages: 1,
        tools: 0,
        stream: false,
    }
}

fn response() -> EventKind {
    EventKind::ModelResponse {
        iteration: 1,
        model: "served-name".into(),
        stop_reason: StopReason::ToolUse,
        tool_calls: 1,
        usage: Usage::default(),
        latency_ms: 1500,
    }
}

fn tool(started: bool) -> EventKind {
    if started {
        EventKind::ToolStarted {
            call_id: "c".into(),
            name: "read_file".into(),
            arguments: "{}".into(),
        }
    } else {
        EventKind::ToolCompleted {
            call_id: "c".into(),
            name: "read_file".into(),
            ok: false,
            output: String::new(),
            truncated: false,
            duration_ms: 250,
        }
    }
}

fn line<'a>(text: &'a str, series: &str) -> &'a str {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no `{series}` in:\n{text}"))
}

#[test]
fn the_loop_overhead_is_the_gap_between_calls_less_the_tools() {
    let metrics = Metrics::new();
    let t = Utc::now();
    for (micros, kind) in [
        (0, request("m")),
        (1_500_000, response()),
        (1_500_100, tool(true)),
        (1_750_100, tool(false)),
        (1_750_300, request("m")),
        (2_000_000, response()),
        (
            2_000_050,
            EventKind::RunCompleted {
                iterations: 2,
                usage: Usage::default(),
            },
        ),
    ] {
        metrics.emit(&event(at(t, micros), "r", kind));
    }
    let text = metrics.render_recorded();
    // 100 + 200 µs around the tool, then 50 µs to the end.
    assert_eq!(line(&text, "keel_loop_overhead_seconds_count"), "2");
    assert_eq!(line(&text, "keel_loop_overhead_seconds_sum"), "0.00035");
    // Calls are labelled with the model asked for, not the name the provider answered with.
    assert_eq!(
        line(&text, r#"keel_model_calls_total{model="m",error="none"}"#),
        "2"
    );
    assert_eq!(
        line(&text, r#"keel_model_latency_seconds_sum{model="m"}"#),
        "3"
    );
    assert_eq!(
        line(
            &text,
            r#"keel_tool_calls_total{tool="read_file",outcome="error"}"#
        ),
        "1"
    );
    assert_eq!(metrics.runs_followed(), 0);
}

#[test]
fn a_gap_with_a_compaction_or_a_person_in_it_is_not_the_loops() {
    let metrics = Metrics::new();
    let t = Utc::now();
    let compaction = EventKind::CompactionRun {
        strategy: "compact".into(),
        before_tokens: 10,
        after_tokens: 5,
        before_messages: 4,
        after_messages: 2,
        pinned: 0,
        summary_failed: false,
    };
    for (micros, kind) in [
        (0, request("m")),
        (10, response()),
        (5_000_000, compaction),
        (5_000_010, request("m")),
        (5_000_020, response()),
        (
            5_000_030,
            EventKind::ApprovalRequested {
                call_id: "c".into(),
                tool: "shell".into(),
                reason: "asks".into(),
            },
        ),
    ] {
        metrics.emit(&event(at(t, micros), "r", kind));
    }
    assert_eq!(
        metrics.runs_followed(),
        0,
        "a run waiting for a person is let go"
    );
    let text = metrics.render_recorded();
    assert_eq!(line(&text, "keel_loop_overhead_seconds_count"), "0");
}

#[test]
fn an_error_is_counted_on_the_model_its_call_asked_for() {
    let metrics = Metrics::new();
    let t = Utc::now();
    metrics.emit(&event(t, "a", request("big")));
    metrics.emit(&event(t, "b", request("small")));
    metrics.emit(&event(
        t,
        "a",
        EventKind::ModelError {
            iteration: 1,
            kind: keel_core::ProviderErrorKind::RateLimit,
            status: Some(429),
            message: "slow down".into(),
        },
    ));
    let text = metrics.render_recorded();
    assert_eq!(
        line(
            &text,
            r#"keel_model_calls_total{model="big",error="rate_limit"}"#
        ),
        "1"
    );
    metrics.forget_run("a");
    metrics.forget_run("b");
    assert_eq!(metrics.runs_followed(), 0);
}

#[test]
fn label_values_and_help_are_escaped() {
    assert_eq!(escape("plain", true), "plain");
    assert_eq!(escape("a\"b\\c\nd", true), "a\\\"b\\\\c\\nd");
    assert_eq!(escape("say \"hi\"\n", false), "say \"hi\"\\n");
}
