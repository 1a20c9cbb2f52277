//! The Anthropic adapter held against the real recordings in `fixtures/providers/`: one test
//! per `anthropic-messages` case, run on the recorded bytes.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Recorder;
use common::recordings::{check_error, headers_of, load, recorded};
use futures::executor::block_on;
use keel_core::{ChatResponse, ProviderErrorKind, StopReason, StreamDelta};
use keel_providers::anthropic::{parse_message, parse_stream};
use keel_providers::classify_http_error;
use serde_json::Value;

/// Every `anthropic-messages` recording has a test below; a new recording fails this list.
const ANTHROPIC_CASES: [&str; 11] = [
    "anth_max_tokens",
    "anth_stream_max_tokens",
    "anth_stream_text",
    "anth_stream_thinking",
    "anth_stream_tool_use",
    "anth_text",
    "anth_tool_use",
    "err_anth_401_authentication",
    "err_anth_404_not_found",
    "err_anth_429_rate_limit",
    "err_anth_529_overloaded",
];

fn stop_reason_for(wire: &str) -> StopReason {
    match wire {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        other => panic!("no expectation for stop_reason {other}"),
    }
}

/// Checks what every success case expects: text, tool calls, stop reason, usage, model, and
/// the thinking blocks kept for replay.
fn check_answer(name: &str, response: &ChatResponse, expect: &Value) {
    let message = &response.message;
    assert_eq!(message.content, expect["text"].as_str().unwrap(), "{name}");
    let expected_calls = expect["tool_calls"].as_array().unwrap();
    assert_eq!(
        message.tool_calls.len(),
        expected_calls.len(),
        "{name}: calls"
    );
    for (call, expected) in message.tool_calls.iter().zip(expected_calls) {
        assert_eq!(call.id, expected["id"].as_str().unwrap(), "{name}: call id");
        assert_eq!(call.name, expected["name"].as_str().unwrap(), "{name}");
        let arguments: Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(arguments, expected["input"], "{name}: arguments");
    }
    let stop = stop_reason_for(expect["stop_reason"].as_str().unwrap());
    assert_eq!(response.stop_reason, stop, "{name}");
    // The recordings have no cached tokens, so keel's input equals the API's.
    let usage = &expect["usage"];
    assert_eq!(response.usage.input_tokens, usage["input_tokens"], "{name}");
    assert_eq!(
        response.usage.output_tokens, usage["output_tokens"],
        "{name}"
    );
    assert_eq!(response.usage.cache_read_tokens, 0, "{name}");
    assert_eq!(response.model, expect["model"].as_str().unwrap(), "{name}");

    let expected_thinking = expect["thinking"].as_array().cloned().unwrap_or_default();
    match &message.reasoning {
        None => assert!(expected_thinking.is_empty(), "{name}: thinking lost"),
        Some(reasoning) => {
            assert_eq!(expected_thinking.len(), 1, "{name}: one thinking block");
            let expected = &expected_thinking[0];
            assert_eq!(
                reasoning.text.chars().count() as u64,
                expected["chars"].as_u64().unwrap(),
                "{name}: thinking text"
            );
            let replay = reasoning.replay.as_ref().unwrap().as_array().unwrap();
            assert_eq!(replay.len(), 1, "{name}");
            assert_eq!(replay[0]["type"], "thinking");
            assert_eq!(replay[0]["thinking"], reasoning.text.as_str());
            let signed = replay[0]["signature"]
                .as_str()
                .is_some_and(|s| !s.is_empty());
            assert_eq!(signed, expected["has_signature"].as_bool().unwrap());
        }
    }
}

fn check_whole(name: &str) {
    let case = load(name);
    assert_eq!(case.meta["stream"], false);
    let response = parse_message(&case.body).unwrap();
    check_answer(name, &response, &case.meta["expect"]);
}

/// Streams are fed whole and split at several sizes (one byte at a time included).
fn check_stream(name: &str) {
    let case = load(name);
    assert_eq!(case.meta["stream"], true);
    let expect = &case.meta["expect"];
    assert_eq!(expect["terminated_with_message_stop"], true);
    for piece in [case.body.len(), 1, 7, 100] {
        let sink = Recorder::default();
        let pieces: Vec<Result<Vec<u8>, std::io::Error>> =
            case.body.chunks(piece).map(|c| Ok(c.to_vec())).collect();
        let response = block_on(parse_stream(futures::stream::iter(pieces), &sink)).unwrap();
        check_answer(name, &response, expect);

        assert_eq!(sink.finished(), [Some(response.stop_reason)], "{name}");
        assert_eq!(sink.warnings(), Vec::<String>::new(), "{name}");
        assert_eq!(sink.text(), response.message.content, "{name}");
        let mut reasoning = String::new();
        let mut started = Vec::new();
        let mut fragments: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for delta in sink.deltas() {
            match delta {
                StreamDelta::Reasoning { text } => reasoning.push_str(&text),
                StreamDelta::ToolCallStarted { index, id, name } => started.push((index, id, name)),
                StreamDelta::ToolCallArguments { index, fragment } => {
                    fragments.entry(index).or_default().push(fragment)
                }
                _ => {}
            }
        }
        let reasoning_text = response.message.reasoning.as_ref().map(|r| r.text.clone());
        assert_eq!(reasoning, reasoning_text.unwrap_or_default(), "{name}");
        let calls = &response.message.tool_calls;
        assert_eq!(started.len(), calls.len(), "{name}: one start per call");
        for (index, expected) in expect["tool_calls"].as_array().unwrap().iter().enumerate() {
            assert_eq!(
                started[index],
                (index, calls[index].id.clone(), calls[index].name.clone())
            );
            let received = &fragments[&index];
            assert_eq!(received.concat(), calls[index].arguments, "{name}");
            assert_eq!(received[0], "", "{name}: the first fragment is empty");
            let count = expected["partial_json_fragments"].as_u64().unwrap();
            assert_eq!(received.len() as u64, count, "{name}: argument fragments");
        }
    }
}

#[test]
fn every_anthropic_recording_has_a_test() {
    let recorded = recorded("anthropic-messages");
    assert_eq!(recorded, ANTHROPIC_CASES);
}

#[test]
fn anth_text() {
    check_whole("anth_text");
}

#[test]
fn anth_tool_use() {
    check_whole("anth_tool_use");
}

#[test]
fn anth_max_tokens() {
    check_whole("anth_max_tokens");
}

#[test]
fn anth_stream_text() {
    check_stream("anth_stream_text");
}

#[test]
fn anth_stream_tool_use() {
    check_stream("anth_stream_tool_use");
}

#[test]
fn anth_stream_max_tokens() {
    check_stream("anth_stream_max_tokens");
}

#[test]
fn anth_stream_thinking() {
    check_stream("anth_stream_thinking");
}

#[test]
fn err_anth_401_authentication() {
    check_error("err_anth_401_authentication", ProviderErrorKind::Auth);
}

#[test]
fn err_anth_404_not_found() {
    check_error("err_anth_404_not_found", ProviderErrorKind::ModelNotFound);
}

#[test]
fn err_anth_429_rate_limit() {
    check_error("err_anth_429_rate_limit", ProviderErrorKind::RateLimit);
}

#[test]
fn err_anth_529_overloaded() {
    check_error("err_anth_529_overloaded", ProviderErrorKind::Overloaded);
}

/// The 2024 rate-limit answer also carries `anthropic-ratelimit-*` headers: without
/// `retry-after`, they alone give the same wait (the requests limit is exhausted and resets
/// 7 s after the answer's `date`).
#[test]
fn err_anth_429_rate_limit_without_retry_after_uses_the_reset_headers() {
    let case = load("err_anth_429_rate_limit");
    let mut headers = headers_of(&case.meta);
    headers.remove("retry-after");
    let error = classify_http_error(429, &headers, &case.body);
    assert_eq!(error.retry_after, Some(Duration::from_secs(7)));
}
