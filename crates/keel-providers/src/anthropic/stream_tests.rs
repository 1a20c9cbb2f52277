use keel_core::{ProviderErrorKind, StopReason};
use serde_json::json;

use super::*;
use crate::stream_test_support::{finished_count, read_through};

fn run(body: &str) -> (Result<ChatResponse, ProviderError>, Vec<StreamDelta>) {
    read_through::<MessageAccumulator>(body)
}

fn event(data: Value) -> String {
    let name = data["type"].as_str().unwrap().to_string();
    format!("event: {name}\ndata: {data}\n\n")
}

fn start() -> String {
    event(json!({"type": "message_start", "message": {
        "id": "msg_1", "model": "claude-test", "content": [],
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 1},
    }}))
}

fn block_start(index: usize, block: Value) -> String {
    event(json!({"type": "content_block_start", "index": index, "content_block": block}))
}

fn block_delta(index: usize, delta: Value) -> String {
    event(json!({"type": "content_block_delta", "index": index, "delta": delta}))
}

fn stop(reason: &str) -> String {
    event(
        json!({"type": "message_delta", "delta": {"stop_reason": reason},
        "usage": {"output_tokens": 7}}),
    ) + &event(json!({"type": "message_stop"}))
}

#[test]
fn redacted_thinking_and_signatures_are_kept_for_replay() {
    let body = [
        start(),
        block_start(0, json!({"type": "redacted_thinking", "data": "opaque"})),
        block_start(
            1,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        block_delta(1, json!({"type": "thinking_delta", "thinking": "hm"})),
        block_delta(1, json!({"type": "signature_delta", "signature": "sig"})),
        block_start(2, json!({"type": "text", "text": ""})),
        block_delta(2, json!({"type": "text_delta", "text": "ok"})),
        stop("end_turn"),
    ]
    .concat();
    let (result, deltas) = run(&body);
    let response = result.unwrap();
    let reasoning = response.message.reasoning.unwrap();
    assert_eq!(reasoning.text, "hm");
    assert_eq!(
        reasoning.replay,
        Some(json!([
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "thinking", "thinking": "hm", "signature": "sig"},
        ]))
    );
    assert_eq!(
        deltas[..2],
        [
            StreamDelta::Reasoning { text: "hm".into() },
            StreamDelta::Text { text: "ok".into() },
        ]
    );
    assert_eq!(
        response.usage.input_tokens, 100,
        "cached tokens count as input"
    );
    assert_eq!(response.usage.cache_read_tokens, 90);
    assert_eq!(response.usage.output_tokens, 7);
}

#[test]
fn a_thinking_block_without_its_signature_is_not_replayed() {
    let body = [
        start(),
        block_start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        block_delta(0, json!({"type": "thinking_delta", "thinking": "cut"})),
        stop("max_tokens"),
    ]
    .concat();
    let response = run(&body).0.unwrap();
    let reasoning = response.message.reasoning.unwrap();
    assert_eq!(reasoning.text, "cut");
    assert_eq!(reasoning.replay, None);
    assert_eq!(response.stop_reason, StopReason::MaxTokens);
}

#[test]
fn a_tool_call_without_fragments_keeps_its_start_input() {
    let body = [
        start(),
        block_start(
            0,
            json!({"type": "tool_use", "id": "t1", "name": "ls", "input": {"path": "."}}),
        ),
        block_start(
            1,
            json!({"type": "tool_use", "id": "t2", "name": "pwd", "input": {}}),
        ),
        stop("tool_use"),
    ]
    .concat();
    let (result, deltas) = run(&body);
    let calls = result.unwrap().message.tool_calls;
    assert_eq!(calls[0].arguments, r#"{"path":"."}"#);
    assert_eq!(calls[1].arguments, "{}");
    assert_eq!(
        deltas[1],
        StreamDelta::ToolCallStarted {
            index: 1,
            id: "t2".into(),
            name: "pwd".into(),
        }
    );
}

#[test]
fn a_delta_without_a_block_start_still_counts() {
    let body = [
        start(),
        block_delta(0, json!({"type": "text_delta", "text": "hi"})),
        stop("end_turn"),
    ]
    .concat();
    assert_eq!(run(&body).0.unwrap().message.content, "hi");
}

#[test]
fn unknown_events_and_deltas_are_skipped() {
    let body = [
        start(),
        event(json!({"type": "something_new", "x": 1})),
        block_start(0, json!({"type": "text", "text": ""})),
        block_delta(0, json!({"type": "citations_delta", "citation": {}})),
        block_delta(0, json!({"type": "text_delta", "text": "ok"})),
        stop("end_turn"),
    ]
    .concat();
    let (result, deltas) = run(&body);
    assert_eq!(result.unwrap().message.content, "ok");
    assert_eq!(finished_count(&deltas), 1);
}

#[test]
fn an_error_event_ends_the_stream_classified() {
    let body = [
        start(),
        block_start(0, json!({"type": "text", "text": ""})),
        block_delta(0, json!({"type": "text_delta", "text": "par"})),
        event(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
    ]
    .concat();
    let (result, deltas) = run(&body);
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Overloaded);
    assert_eq!(error.message, "the stream reported an error: Overloaded");
    assert_eq!(error.status, None);
    assert_eq!(
        deltas.last(),
        Some(&StreamDelta::Finished { stop_reason: None })
    );
    assert_eq!(finished_count(&deltas), 1);
}

#[test]
fn a_stream_that_closes_before_message_stop_is_cut_short_and_discarded() {
    // Cut mid-arguments: nothing of it may be executed.
    let body = [
        start(),
        block_start(
            0,
            json!({"type": "tool_use", "id": "t1", "name": "ls", "input": {}}),
        ),
        block_delta(
            0,
            json!({"type": "input_json_delta", "partial_json": "{\"pa"}),
        ),
    ]
    .concat();
    let (result, deltas) = run(&body);
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Network);
    assert!(error.message.contains("before message_stop"), "{error}");
    assert_eq!(
        deltas.last(),
        Some(&StreamDelta::Finished { stop_reason: None })
    );
    assert_eq!(finished_count(&deltas), 1);

    // Even with its stop reason, a stream without message_stop is not trusted.
    let body = [
        start(),
        event(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})),
    ]
    .concat();
    let (result, _) = run(&body);
    assert_eq!(result.unwrap_err().kind, ProviderErrorKind::Network);

    // message_stop without a stop reason ends the stream: the reason is inferred, with a warning.
    let body = [
        start(),
        block_start(
            0,
            json!({"type": "tool_use", "id": "t1", "name": "ls", "input": {}}),
        ),
        block_delta(0, json!({"type": "input_json_delta", "partial_json": "{}"})),
        event(json!({"type": "message_stop"})),
    ]
    .concat();
    let (result, deltas) = run(&body);
    assert_eq!(result.unwrap().stop_reason, StopReason::ToolUse);
    let n = deltas.len();
    assert_eq!(
        deltas[n - 2],
        StreamDelta::Warning {
            message: "the stream ended without a stop reason; assuming tool_use".into()
        }
    );
}

#[test]
fn empty_and_unreadable_streams_are_malformed() {
    let (result, deltas) = run("");
    assert_eq!(
        result.unwrap_err().kind,
        ProviderErrorKind::MalformedResponse
    );
    assert_eq!(deltas, [StreamDelta::Finished { stop_reason: None }]);

    let (result, deltas) = run(&(start() + "event: content_block_start\ndata: {oops\n\n"));
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::MalformedResponse);
    assert!(error.message.contains("{oops"), "{error}");
    assert_eq!(finished_count(&deltas), 1);
}
