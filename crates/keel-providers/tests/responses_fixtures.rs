//! The Responses adapter held against the real recordings in `fixtures/providers/` (a copy of
//! `../shared/fixtures/providers/`): one test per `openai-responses` case, run on the recorded
//! bytes.

mod common;

use std::collections::BTreeMap;

use common::Recorder;
use common::recordings::{headers_of, load, recorded};
use futures::executor::block_on;
use keel_core::{ChatResponse, ProviderErrorKind, StopReason, StreamDelta};
use keel_providers::classify_http_error;
use keel_providers::openai_responses::{parse_response, parse_stream};
use serde_json::Value;

/// Every `openai-responses` recording has a test below; a new recording fails this list.
const OPENAI_RESPONSES_CASES: [&str; 6] = [
    "err_resp_400_model_not_found",
    "resp_function_calls",
    "resp_stream_function_calls",
    "resp_stream_incomplete",
    "resp_stream_text",
    "resp_text",
];

/// The stop reason a case expects, from its status, incomplete reason and calls.
fn expected_stop_reason(expect: &Value) -> StopReason {
    let has_calls = !expect["tool_calls"].as_array().unwrap().is_empty();
    match (
        expect["status"].as_str().unwrap(),
        expect["incomplete_details"]["reason"].as_str(),
    ) {
        ("incomplete", Some("max_output_tokens")) => StopReason::MaxTokens,
        ("completed", _) if has_calls => StopReason::ToolUse,
        ("completed", _) => StopReason::EndTurn,
        other => panic!("no expectation for {other:?}"),
    }
}

/// Checks what every success case expects: text, tool calls, stop reason, usage, model.
fn check_answer(name: &str, response: &ChatResponse, expect: &Value) {
    let message = &response.message;
    assert_eq!(
        message.content,
        expect["text"].as_str().unwrap_or_default(),
        "{name}: text"
    );
    let expected_calls = expect["tool_calls"].as_array().unwrap();
    assert_eq!(
        message.tool_calls.len(),
        expected_calls.len(),
        "{name}: calls"
    );
    for (call, expected) in message.tool_calls.iter().zip(expected_calls) {
        assert_eq!(call.id, expected["call_id"].as_str().unwrap(), "{name}: id");
        assert_eq!(call.name, expected["name"].as_str().unwrap(), "{name}");
        let arguments: Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(arguments, expected["arguments"], "{name}: arguments");
    }
    assert_eq!(response.stop_reason, expected_stop_reason(expect), "{name}");
    let usage = &expect["usage"];
    assert_eq!(response.usage.input_tokens, usage["input_tokens"], "{name}");
    assert_eq!(
        response.usage.output_tokens, usage["output_tokens"],
        "{name}"
    );
    assert_eq!(response.usage.total(), usage["total_tokens"], "{name}");
    assert_eq!(response.usage.cache_read_tokens, 0, "{name}");
    assert_eq!(response.model, expect["model"].as_str().unwrap(), "{name}");
    // No reasoning items in these recordings (gpt-4o): nothing to keep.
    assert_eq!(message.reasoning, None, "{name}");
}

fn check_whole(name: &str) {
    let case = load(name);
    assert_eq!(case.meta["stream"], false);
    let response = parse_response(&case.body).unwrap();
    check_answer(name, &response, &case.meta["expect"]);
}

fn count(deltas: &[StreamDelta], wanted: fn(&StreamDelta) -> bool) -> u64 {
    deltas.iter().filter(|delta| wanted(delta)).count() as u64
}

/// Streams are fed whole and split at several sizes (one byte at a time included).
fn check_stream(name: &str) {
    let case = load(name);
    assert_eq!(case.meta["stream"], true);
    let expect = &case.meta["expect"];
    for piece in [case.body.len(), 1, 7, 100] {
        let sink = Recorder::default();
        let pieces: Vec<Result<Vec<u8>, std::io::Error>> =
            case.body.chunks(piece).map(|c| Ok(c.to_vec())).collect();
        let response = block_on(parse_stream(futures::stream::iter(pieces), &sink)).unwrap();
        check_answer(name, &response, expect);

        assert_eq!(sink.finished(), [Some(response.stop_reason)], "{name}");
        assert_eq!(sink.warnings(), Vec::<String>::new(), "{name}");
        assert_eq!(sink.text(), response.message.content, "{name}");
        let deltas = sink.deltas();
        // One delta per recorded delta event: the final items repeat nothing.
        let events = &expect["event_counts"];
        let text_events = events["response.output_text.delta"].as_u64().unwrap_or(0);
        let argument_events = events["response.function_call_arguments.delta"]
            .as_u64()
            .unwrap_or(0);
        assert_eq!(
            count(&deltas, |d| matches!(d, StreamDelta::Text { .. })),
            text_events,
            "{name}: text deltas"
        );
        assert_eq!(
            count(&deltas, |d| matches!(
                d,
                StreamDelta::ToolCallArguments { .. }
            )),
            argument_events,
            "{name}: argument deltas"
        );

        let mut started = Vec::new();
        let mut fragments: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for delta in deltas {
            match delta {
                StreamDelta::ToolCallStarted { index, id, name } => started.push((index, id, name)),
                StreamDelta::ToolCallArguments { index, fragment } => {
                    fragments.entry(index).or_default().push(fragment)
                }
                _ => {}
            }
        }
        let calls = &response.message.tool_calls;
        assert_eq!(started.len(), calls.len(), "{name}: one start per call");
        for (index, call) in calls.iter().enumerate() {
            assert_eq!(started[index], (index, call.id.clone(), call.name.clone()));
            assert_eq!(fragments[&index].concat(), call.arguments, "{name}");
        }
        assert_eq!(
            fragments.len() as u64,
            expect["function_call_argument_delta_items"]
                .as_u64()
                .unwrap(),
            "{name}"
        );
    }
}

#[test]
fn every_openai_responses_recording_has_a_test() {
    let recorded = recorded("openai-responses");
    assert_eq!(recorded, OPENAI_RESPONSES_CASES);
}

#[test]
fn resp_text() {
    check_whole("resp_text");
}

#[test]
fn resp_function_calls() {
    check_whole("resp_function_calls");
}

#[test]
fn resp_stream_text() {
    check_stream("resp_stream_text");
}

#[test]
fn resp_stream_function_calls() {
    check_stream("resp_stream_function_calls");
}

#[test]
fn resp_stream_incomplete() {
    check_stream("resp_stream_incomplete");
}

#[test]
fn err_resp_400_model_not_found() {
    let name = "err_resp_400_model_not_found";
    let case = load(name);
    let expect = &case.meta["expect"];
    let status = case.meta["status"].as_u64().unwrap() as u16;
    assert_eq!(expect["http_status"], status);
    let error = classify_http_error(status, &headers_of(&case.meta), &case.body);
    assert_eq!(error.kind, ProviderErrorKind::ModelNotFound);
    assert_eq!(error.status, Some(400));
    assert_eq!(error.message, expect["message"].as_str().unwrap());
    assert_eq!(error.retry_after, None);
}
