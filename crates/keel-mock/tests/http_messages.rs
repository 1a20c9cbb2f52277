//! Anthropic Messages over real HTTP: whole `message` bodies and named-event SSE streams, in
//! the shape of the recordings in `fixtures/providers/anth_*`, and Anthropic error bodies.

mod common;

use std::collections::BTreeSet;

use common::{messages_request, named_events, names, post_messages, server};
use keel_core::ProviderErrorKind;
use keel_mock::{FinishReason, Step};
use serde_json::{Value, json};

fn keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

/// The text of every `text_delta` of a stream, joined.
fn streamed_text(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter(|(_, data)| data["delta"]["type"] == "text_delta")
        .map(|(_, data)| data["delta"]["text"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn whole_text_answer_is_an_anthropic_message() {
    let server = server(vec![Step::text("4200 + 42 = 4242")]).await;
    let response = post_messages(&server, &messages_request(false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.unwrap();
    let expected = [
        "model",
        "id",
        "type",
        "role",
        "content",
        "stop_reason",
        "stop_sequence",
        "usage",
    ];
    assert_eq!(keys(&body), expected.into_iter().collect());
    assert!(body["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(body["model"], "claude-test");
    assert_eq!(
        body["content"],
        json!([{"type": "text", "text": "4200 + 42 = 4242"}])
    );
    assert_eq!(body["stop_reason"], "end_turn");
    assert_eq!(body["stop_sequence"], Value::Null);
    let usage = &body["usage"];
    assert_eq!(usage["output_tokens"], 4, "16 characters / 4");
    assert!(usage["input_tokens"].as_u64().unwrap() >= 1);
    assert_eq!(usage["cache_creation_input_tokens"], 0);
    assert_eq!(usage["cache_read_input_tokens"], 0);
}

#[tokio::test]
async fn whole_tool_use_blocks_carry_parsed_input() {
    let server = server(vec![
        Step::text("I'll look both up.")
            .with_tool_call("secret", json!({"password": "mellon"}))
            .with_tool_call("secret", json!("{\"password\": oops")),
    ])
    .await;
    let body: Value = post_messages(&server, &messages_request(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["stop_reason"], "tool_use");
    let content = body["content"].as_array().unwrap();
    let types: Vec<_> = content
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["text", "tool_use", "tool_use"]);
    assert_eq!(
        content[1],
        json!({"type": "tool_use", "id": "toolu_0_0", "name": "secret",
               "input": {"password": "mellon"}})
    );
    // Arguments that are not JSON cannot be an object: they come as a string.
    assert_eq!(content[2]["id"], "toolu_0_1");
    assert_eq!(content[2]["input"], "{\"password\": oops");
}

#[tokio::test]
async fn reasoning_is_a_signed_thinking_block_first() {
    let server = server(vec![
        Step::text("3").with_reasoning("count the primes"),
        Step::text("3").with_reasoning("count the primes"),
    ])
    .await;
    let body: Value = post_messages(&server, &messages_request(false))
        .await
        .json()
        .await
        .unwrap();
    let thinking = &body["content"][0];
    assert_eq!(thinking["type"], "thinking");
    assert_eq!(thinking["thinking"], "count the primes");
    assert!(!thinking["signature"].as_str().unwrap().is_empty());
    assert_eq!(body["content"][1]["type"], "text");

    let text = post_messages(&server, &messages_request(true))
        .await
        .text()
        .await
        .unwrap();
    let events = named_events(&text);
    let start = &events[1].1;
    assert_eq!(
        start["content_block"],
        json!({"type": "thinking", "thinking": "", "signature": ""})
    );
    let deltas: Vec<&Value> = events
        .iter()
        .filter(|(_, d)| d["index"] == 0 && d["type"] == "content_block_delta")
        .map(|(_, d)| &d["delta"])
        .collect();
    let thinking: String = deltas
        .iter()
        .filter(|d| d["type"] == "thinking_delta")
        .map(|d| d["thinking"].as_str().unwrap())
        .collect();
    assert_eq!(thinking, "count the primes");
    let last = deltas.last().unwrap();
    assert_eq!(
        last["type"], "signature_delta",
        "the signature closes the block"
    );
    assert!(!last["signature"].as_str().unwrap().is_empty());
    assert_eq!(streamed_text(&events), "3");
}

#[tokio::test]
async fn streamed_text_follows_the_anthropic_event_order() {
    let server = server(vec![Step::text("The answer is 42.")]).await;
    let response = post_messages(&server, &messages_request(true)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    let text = response.text().await.unwrap();
    let events = named_events(&text);
    assert_eq!(
        names(&events),
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    for (name, data) in &events {
        assert_eq!(&data["type"], name, "each event's data names its type");
    }
    let message = &events[0].1["message"];
    assert_eq!(message["content"], json!([]));
    assert_eq!(message["stop_reason"], Value::Null);
    assert_eq!(message["model"], "claude-test");
    assert_eq!(
        events[1].1["content_block"],
        json!({"type": "text", "text": ""})
    );
    assert_eq!(streamed_text(&events), "The answer is 42.");
    let delta = &events[8].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["delta"]["stop_sequence"], Value::Null);
    assert_eq!(delta["usage"]["output_tokens"], 4);
}

#[tokio::test]
async fn streamed_tool_use_sends_partial_json_in_fragments() {
    let server = server(vec![
        Step::text("Looking.")
            .with_tool_call("secret", json!({"password": "mellon"}))
            .with_tool_call("secret", json!({"password": "radiance"})),
    ])
    .await;
    let text = post_messages(&server, &messages_request(true))
        .await
        .text()
        .await
        .unwrap();
    let events = named_events(&text);
    let starts: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(starts.len(), 3);
    assert_eq!(
        starts[1]["content_block"],
        json!({"type": "tool_use", "id": "toolu_0_0", "name": "secret", "input": {}})
    );
    assert_eq!(starts[2]["index"], 2);
    for (index, expected) in [
        (1, json!({"password": "mellon"})),
        (2, json!({"password": "radiance"})),
    ] {
        let fragments: Vec<&str> = events
            .iter()
            .filter(|(_, d)| d["index"] == index && d["delta"]["type"] == "input_json_delta")
            .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap())
            .collect();
        assert_eq!(fragments[0], "", "the first fragment is empty, as recorded");
        assert!(
            fragments.len() > 2,
            "the arguments come in several fragments"
        );
        let input: Value = serde_json::from_str(&fragments.concat()).unwrap();
        assert_eq!(input, expected);
    }
    let stops = events
        .iter()
        .filter(|(n, _)| n == "content_block_stop")
        .count();
    assert_eq!(stops, 3);
    let delta = events.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(delta.1["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn max_tokens_is_the_stop_reason_in_both_modes() {
    let step = Step::text("Alabama Alaska Arizona").with_finish_reason(FinishReason::Length);
    let server = server(vec![step.clone(), step]).await;
    let body: Value = post_messages(&server, &messages_request(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["stop_reason"], "max_tokens");
    let text = post_messages(&server, &messages_request(true))
        .await
        .text()
        .await
        .unwrap();
    let events = named_events(&text);
    let delta = events.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(delta.1["delta"]["stop_reason"], "max_tokens");
}

#[tokio::test]
async fn usage_reports_the_uncached_prompt_and_cache_reads() {
    let mut step = Step::text("hi").with_usage(100, 20);
    step.usage.as_mut().unwrap().cache_read_tokens = Some(30);
    let server = server(vec![step.clone(), step]).await;
    let body: Value = post_messages(&server, &messages_request(false))
        .await
        .json()
        .await
        .unwrap();
    let usage = &body["usage"];
    assert_eq!(
        usage["input_tokens"], 70,
        "Anthropic counts cached tokens apart"
    );
    assert_eq!(usage["cache_read_input_tokens"], 30);
    assert_eq!(usage["output_tokens"], 20);

    let text = post_messages(&server, &messages_request(true))
        .await
        .text()
        .await
        .unwrap();
    let events = named_events(&text);
    assert_eq!(events[0].1["message"]["usage"]["input_tokens"], 70);
    let delta = events.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(delta.1["usage"]["output_tokens"], 20);
    assert_eq!(delta.1["usage"]["cache_read_input_tokens"], 30);
}

#[tokio::test]
async fn every_error_status_gets_the_anthropic_error_body() {
    let cases = [
        (
            Step::error(401),
            401,
            "authentication_error",
            "invalid x-api-key",
        ),
        (Step::error(403), 403, "permission_error", "permission"),
        (
            Step::error(404),
            404,
            "not_found_error",
            "model: claude-test",
        ),
        (Step::error(429), 429, "rate_limit_error", "rate limit"),
        (Step::error(529), 529, "overloaded_error", "Overloaded"),
        (Step::error(500), 500, "api_error", "Internal server error"),
        (Step::error(503), 503, "api_error", "Internal server error"),
        (
            Step::error(400),
            400,
            "invalid_request_error",
            "Invalid request",
        ),
        (Step::error(413), 413, "request_too_large", ""),
        (
            Step::error(402),
            402,
            "billing_error",
            "credit balance is too low",
        ),
        (
            Step::error(400).with_error_kind(ProviderErrorKind::ContextOverflow),
            400,
            "invalid_request_error",
            "prompt is too long: ",
        ),
        (
            Step::error(400).with_error_kind(ProviderErrorKind::Billing),
            400,
            "invalid_request_error",
            "Your credit balance is too low",
        ),
    ];
    let steps = cases.iter().map(|(step, ..)| step.clone()).collect();
    let server = server(steps).await;
    for (i, (_, status, error_type, message)) in cases.iter().enumerate() {
        // Error steps answer the same in both modes: the stream never starts.
        let response = post_messages(&server, &messages_request(i % 2 == 1)).await;
        assert_eq!(response.status(), *status, "case {i}");
        assert_eq!(response.headers()["content-type"], "application/json");
        let body: Value = response.json().await.unwrap();
        assert_eq!(keys(&body), ["error", "request_id", "type"].into());
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], *error_type, "case {i}");
        let text = body["error"]["message"].as_str().unwrap();
        assert!(text.contains(message), "case {i}: {text}");
        assert!(body["request_id"].as_str().unwrap().starts_with("req_"));
    }
}

#[tokio::test]
async fn context_overflow_names_tokens_and_maximum() {
    let server = server(vec![
        Step::error(400).with_error_kind(ProviderErrorKind::ContextOverflow),
    ])
    .await;
    let body: Value = post_messages(&server, &messages_request(false))
        .await
        .json()
        .await
        .unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    let rest = message.strip_prefix("prompt is too long: ").unwrap();
    let (tokens, maximum) = rest.split_once(" tokens > ").unwrap();
    assert_eq!(maximum, "200000 maximum");
    assert!(tokens.parse::<u64>().unwrap() > 200_000, "{message}");
}

#[tokio::test]
async fn rate_limits_keep_their_headers_and_exhaustion_is_an_api_error() {
    let server = server(vec![
        Step::error(429)
            .with_header("retry-after", "7")
            .with_header("x-should-retry", "true"),
    ])
    .await;
    let limited = post_messages(&server, &messages_request(false)).await;
    assert_eq!(limited.headers()["retry-after"], "7");
    assert_eq!(limited.headers()["x-should-retry"], "true");

    let exhausted = post_messages(&server, &messages_request(false)).await;
    assert_eq!(exhausted.status(), 500);
    let body: Value = exhausted.json().await.unwrap();
    assert_eq!(body["error"]["type"], "api_error");
    assert_eq!(
        body["error"]["message"],
        "keel-mock: script exhausted after 1 responses"
    );
}
