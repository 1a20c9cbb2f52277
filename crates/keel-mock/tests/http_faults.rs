//! Injected faults over real HTTP: error replies, delays, broken and truncated streams.

mod common;

use std::time::Duration;

use common::{chunks, data_events, post, request, server, streamed_text};
use futures::StreamExt;
use keel_core::ProviderErrorKind;
use keel_mock::Step;
use serde_json::{Value, json};

#[tokio::test]
async fn error_steps_answer_with_openai_error_bodies() {
    let server = server(vec![
        Step::error(429).with_header("retry-after", "1"),
        Step::error(401),
        Step::error(404),
        Step::error(400).with_error_kind(ProviderErrorKind::ContextOverflow),
        Step::error(503),
        Step::error(429).with_error_kind(ProviderErrorKind::Billing),
    ])
    .await;

    let limited = post(&server, &request(false)).await;
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "1");
    let body: Value = limited.json().await.unwrap();
    let error = &body["error"];
    assert_eq!(error["code"], "rate_limit_exceeded");
    assert!(error["message"].as_str().unwrap().contains("Rate limit"));
    // Sorted: the order of a JSON object's keys is serde_json's (`preserve_order`, which a
    // dependency may turn on for the whole workspace), not the body's.
    let mut fields: Vec<_> = error.as_object().unwrap().keys().cloned().collect();
    fields.sort();
    assert_eq!(fields, ["code", "message", "param", "type"]);

    let expectations = [
        (401, "invalid_request_error", json!("invalid_api_key")),
        (404, "invalid_request_error", json!("model_not_found")),
        (
            400,
            "invalid_request_error",
            json!("context_length_exceeded"),
        ),
        (503, "server_error", Value::Null),
        (429, "insufficient_quota", json!("insufficient_quota")),
    ];
    for (status, error_type, code) in expectations {
        let response = post(&server, &request(false)).await;
        assert_eq!(response.status(), status);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], error_type, "status {status}");
        assert_eq!(body["error"]["code"], code, "status {status}");
    }
}

#[tokio::test]
async fn model_not_found_names_the_requested_model() {
    let server = server(vec![Step::error(404)]).await;
    let body: Value = post(&server, &request(false)).await.json().await.unwrap();
    assert_eq!(
        body["error"]["message"],
        "The model `gpt-test` does not exist or you do not have access to it."
    );
}

#[tokio::test]
async fn error_bodies_can_be_scripted_verbatim() {
    let server = server(vec![
        Step::error(502).with_error_body(json!("<html>Bad Gateway</html>")),
        Step::error(529)
            .with_error_body(json!({"type": "error", "error": {"type": "overloaded_error"}})),
    ])
    .await;
    let gateway = post(&server, &request(true)).await;
    assert_eq!(gateway.status(), 502);
    assert!(
        gateway.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert_eq!(gateway.text().await.unwrap(), "<html>Bad Gateway</html>");
    let overloaded = post(&server, &request(false)).await;
    assert_eq!(overloaded.status(), 529);
    let body: Value = overloaded.json().await.unwrap();
    assert_eq!(body["error"]["type"], "overloaded_error");
}

#[tokio::test(start_paused = true)]
async fn delays_pass_in_tokio_time() {
    let server = server(vec![
        Step::text("slow").with_delay_ms(30_000),
        Step::text("one two three").with_chunk_delay_ms(10_000),
    ])
    .await;
    let start = tokio::time::Instant::now();
    let body: Value = post(&server, &request(false)).await.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "slow");
    assert!(start.elapsed() >= Duration::from_secs(30));

    let start = tokio::time::Instant::now();
    let text = post(&server, &request(true)).await.text().await.unwrap();
    assert_eq!(streamed_text(&chunks(&text)), "one two three");
    // Opening, 3 words, finish, usage, [DONE]: 7 frames, 6 pauses.
    assert!(start.elapsed() >= Duration::from_secs(60));
}

#[tokio::test]
async fn a_cut_stream_is_a_broken_body() {
    let server = server(vec![Step::text("one two three four").cut_after(3)]).await;
    let response = post(&server, &request(true)).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut received = Vec::new();
    let mut failure = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(bytes) => received.extend_from_slice(&bytes),
            Err(error) => {
                failure = Some(error);
                break;
            }
        }
    }
    assert!(failure.is_some(), "reqwest sees the broken connection");
    let text = String::from_utf8(received).unwrap();
    let events = data_events(&text);
    assert_eq!(events.len(), 3, "{text}");
    assert_eq!(streamed_text(&chunks(&text)), "one two");

    // Reading it whole fails too.
    let server = common::server(vec![Step::text("a b c").cut_after(1)]).await;
    let whole = post(&server, &request(true)).await.text().await;
    assert!(whole.is_err());
}

#[tokio::test]
async fn an_eof_cut_ends_cleanly_without_done_or_finish() {
    let server = server(vec![
        Step::text("one two three").eof_after(2),
        Step::text("short").eof_after(100),
    ])
    .await;
    let text = post(&server, &request(true)).await.text().await.unwrap();
    let events = data_events(&text);
    assert_eq!(events.len(), 2);
    assert!(!text.contains("[DONE]"));
    assert!(!text.contains("finish_reason\":\"stop"));

    // A cut past the answer still stops before the finish chunk.
    let text = post(&server, &request(true)).await.text().await.unwrap();
    let chunks = chunks(&text);
    assert_eq!(streamed_text(&chunks), "short");
    assert!(!text.contains("[DONE]"));
    assert!(
        chunks
            .iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null())
    );
}

#[tokio::test]
async fn a_cut_whole_answer_breaks_mid_body() {
    let server = server(vec![
        Step::text("a whole answer").cut_after(1),
        Step::text("a whole answer").eof_after(1),
    ])
    .await;
    let broken = post(&server, &request(false)).await.text().await;
    assert!(broken.is_err());
    let truncated = post(&server, &request(false)).await.text().await.unwrap();
    assert!(!truncated.is_empty());
    assert!(serde_json::from_str::<Value>(&truncated).is_err());
}
