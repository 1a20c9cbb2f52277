//! The adapter held against the real recordings in `fixtures/providers/` (a copy of `../shared/fixtures/providers/`): one test per
//! `openai-chat` case, run on the recorded bytes.

mod common;

use std::collections::BTreeMap;

use common::Recorder;
use common::recordings::{check_error, load, recorded};
use futures::executor::block_on;
use keel_core::{ChatResponse, ProviderErrorKind, StopReason, StreamDelta};
use keel_providers::openai_chat::{parse_completion, parse_stream};
use serde_json::Value;

/// Every `openai-chat` recording has a test below; a new recording fails this list.
const OPENAI_CHAT_CASES: [&str; 11] = [
    "err_oai_400_context_length_exceeded",
    "err_oai_401_invalid_api_key",
    "err_oai_404_model_not_found",
    "err_oai_429_rate_limit",
    "oai_chat_parallel_tool_calls",
    "oai_chat_stream_length",
    "oai_chat_stream_parallel_tool_calls",
    "oai_chat_stream_text",
    "oai_chat_stream_tool_call",
    "oai_chat_text",
    "oai_chat_tool_call",
];

fn stop_reason_for(finish_reason: &str) -> StopReason {
    match finish_reason {
        "stop" => StopReason::EndTurn,
        "tool_calls" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        other => panic!("no expectation for finish_reason {other}"),
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
        assert_eq!(call.id, expected["id"].as_str().unwrap(), "{name}: call id");
        assert_eq!(call.name, expected["name"].as_str().unwrap(), "{name}");
        let arguments: Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(arguments, expected["arguments"], "{name}: arguments");
    }
    let finish_reason = expect["finish_reason"].as_str().unwrap();
    assert_eq!(
        response.stop_reason,
        stop_reason_for(finish_reason),
        "{name}"
    );
    let usage = &expect["usage"];
    assert_eq!(
        response.usage.input_tokens, usage["prompt_tokens"],
        "{name}"
    );
    assert_eq!(
        response.usage.output_tokens, usage["completion_tokens"],
        "{name}"
    );
    assert_eq!(response.usage.total(), usage["total_tokens"], "{name}");
    match expect["model"].as_str() {
        Some(model) => assert_eq!(response.model, model, "{name}: model"),
        None => assert!(!response.model.is_empty(), "{name}: model"),
    }
}

fn check_whole(name: &str) {
    let case = load(name);
    assert_eq!(case.meta["stream"], false);
    let response = parse_completion(&case.body).unwrap();
    check_answer(name, &response, &case.meta["expect"]);
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
        let mut started = Vec::new();
        let mut fragments: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for delta in sink.deltas() {
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
        for (index, expected) in expect["tool_calls"].as_array().unwrap().iter().enumerate() {
            assert_eq!(expected["index"], index);
            assert_eq!(
                started[index],
                (index, calls[index].id.clone(), calls[index].name.clone())
            );
            let received = &fragments[&index];
            assert_eq!(received.concat(), calls[index].arguments, "{name}");
            if let Some(count) = expected["argument_fragments"].as_u64() {
                assert_eq!(received.len() as u64, count, "{name}: argument fragments");
            }
        }
    }
}

#[test]
fn every_openai_chat_recording_has_a_test() {
    let recorded = recorded("openai-chat");
    assert_eq!(recorded, OPENAI_CHAT_CASES);
}

#[test]
fn oai_chat_text() {
    check_whole("oai_chat_text");
}

#[test]
fn oai_chat_tool_call() {
    check_whole("oai_chat_tool_call");
}

#[test]
fn oai_chat_parallel_tool_calls() {
    check_whole("oai_chat_parallel_tool_calls");
}

#[test]
fn oai_chat_stream_text() {
    check_stream("oai_chat_stream_text");
}

#[test]
fn oai_chat_stream_length() {
    check_stream("oai_chat_stream_length");
}

#[test]
fn oai_chat_stream_tool_call() {
    check_stream("oai_chat_stream_tool_call");
}

#[test]
fn oai_chat_stream_parallel_tool_calls() {
    check_stream("oai_chat_stream_parallel_tool_calls");
}

#[test]
fn err_oai_400_context_length_exceeded() {
    check_error(
        "err_oai_400_context_length_exceeded",
        ProviderErrorKind::ContextOverflow,
    );
}

#[test]
fn err_oai_401_invalid_api_key() {
    check_error("err_oai_401_invalid_api_key", ProviderErrorKind::Auth);
}

#[test]
fn err_oai_404_model_not_found() {
    check_error(
        "err_oai_404_model_not_found",
        ProviderErrorKind::ModelNotFound,
    );
}

#[test]
fn err_oai_429_rate_limit() {
    check_error("err_oai_429_rate_limit", ProviderErrorKind::RateLimit);
}

/// The classifier is shared by the adapters still to come: it already reads their recorded
/// errors.
#[test]
fn shared_classifier_reads_the_other_apis_recorded_errors() {
    check_error(
        "err_resp_400_model_not_found",
        ProviderErrorKind::ModelNotFound,
    );
    check_error("err_anth_401_authentication", ProviderErrorKind::Auth);
    check_error("err_anth_404_not_found", ProviderErrorKind::ModelNotFound);
    check_error("err_anth_429_rate_limit", ProviderErrorKind::RateLimit);
    check_error("err_anth_529_overloaded", ProviderErrorKind::Overloaded);
}
