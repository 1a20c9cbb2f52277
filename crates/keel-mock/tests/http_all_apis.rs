//! What every wire API shares over real HTTP: one script cursor and one request log across
//! endpoints, mid-stream error events in each API's own shape, cut streams (abort and eof) and
//! cut whole answers, and delays in tokio time.

mod common;

use std::time::Duration;

use common::{
    chunks, collapsed, data_events, messages_request, named_events, names, post, post_to, request,
    responses_request, server,
};
use futures::StreamExt;
use keel_core::ProviderErrorKind;
use keel_mock::{MockServer, Step, StreamError};
use serde_json::{Value, json};

/// The three APIs: path under `/v1` and a minimal request.
const APIS: [&str; 3] = ["chat/completions", "messages", "responses"];

fn request_for(api: &str, stream: bool) -> Value {
    match api {
        "messages" => messages_request(stream),
        "responses" => responses_request(stream),
        _ => request(stream),
    }
}

/// Reads a streamed body to its end: the bytes received, and whether the connection broke.
async fn read_stream(server: &MockServer, api: &str, body: &Value) -> (String, bool) {
    let response = post_to(server, api, body).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut received = Vec::new();
    let mut broken = false;
    while let Some(item) = stream.next().await {
        match item {
            Ok(bytes) => received.extend_from_slice(&bytes),
            Err(_) => {
                broken = true;
                break;
            }
        }
    }
    (String::from_utf8(received).unwrap(), broken)
}

/// The number of SSE events in a body.
fn event_count(body: &str) -> usize {
    body.split("\n\n").filter(|e| !e.trim().is_empty()).count()
}

#[tokio::test]
async fn one_cursor_and_one_log_serve_every_api() {
    let server = server(vec![
        Step::text("first"),
        Step::text("second"),
        Step::text("third"),
    ])
    .await;
    let chat: Value = post(&server, &request(false)).await.json().await.unwrap();
    let messages: Value = post_to(&server, "messages", &messages_request(false))
        .await
        .json()
        .await
        .unwrap();
    let responses: Value = post_to(&server, "responses", &responses_request(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(chat["choices"][0]["message"]["content"], "first");
    assert_eq!(messages["content"][0]["text"], "second");
    assert_eq!(responses["output"][0]["content"][0]["text"], "third");

    let recorded = server.requests();
    assert_eq!(
        recorded,
        [
            request(false),
            messages_request(false),
            responses_request(false)
        ]
    );
    let listed: Value = common::get(format!("{}/_mock/requests", server.base_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed, Value::Array(recorded));
}

#[tokio::test]
async fn anthropic_streams_break_off_with_an_error_event() {
    let server = server(vec![
        Step::text("one two three four").fail_stream_after(3, ProviderErrorKind::Overloaded),
        Step::text("short").with_stream_error(
            StreamError::new(100, ProviderErrorKind::Server).with_message("boom"),
        ),
    ])
    .await;
    let (text, broken) = read_stream(&server, "messages", &messages_request(true)).await;
    assert!(!broken, "the stream ends cleanly after the error event");
    let events = named_events(&text);
    assert_eq!(
        names(&events),
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "error"
        ]
    );
    assert_eq!(
        events[3].1,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );

    // Past the end of the answer, the error still comes before the stop reason.
    let (text, _) = read_stream(&server, "messages", &messages_request(true)).await;
    let events = named_events(&text);
    let names = names(&events);
    assert_eq!(names.last(), Some(&"error"));
    assert!(!names.contains(&"message_delta") && !names.contains(&"message_stop"));
    assert_eq!(events.last().unwrap().1["error"]["type"], "api_error");
    assert_eq!(events.last().unwrap().1["error"]["message"], "boom");
}

#[tokio::test]
async fn responses_streams_fail_with_response_failed_or_a_bare_error() {
    let server = server(vec![
        Step::text("one two three").fail_stream_after(4, ProviderErrorKind::Server),
        Step::text("one two three").with_stream_error(
            StreamError::new(3, ProviderErrorKind::RateLimit).as_bare_error_event(),
        ),
    ])
    .await;
    let (text, broken) = read_stream(&server, "responses", &responses_request(true)).await;
    assert!(!broken);
    let events = named_events(&text);
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.failed",
        ]
    );
    let failed = &events[4].1;
    assert_eq!(failed["sequence_number"], 4, "numbering continues");
    let response = &failed["response"];
    assert_eq!(response["status"], "failed");
    assert_eq!(response["id"], events[0].1["response"]["id"]);
    assert_eq!(response["error"]["code"], "server_error");
    assert!(!response["error"]["message"].as_str().unwrap().is_empty());

    let (text, _) = read_stream(&server, "responses", &responses_request(true)).await;
    let events = named_events(&text);
    assert_eq!(events.len(), 4);
    let (name, error) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(error["type"], "error");
    assert_eq!(error["sequence_number"], 3);
    assert_eq!(error["code"], "rate_limit_exceeded");
    assert_eq!(error["param"], Value::Null);
    assert!(error["message"].as_str().unwrap().contains("Rate limit"));
}

#[tokio::test]
async fn chat_streams_fail_with_an_error_chunk() {
    let server = server(vec![
        Step::text("one two three").fail_stream_after(2, ProviderErrorKind::Server),
    ])
    .await;
    let (text, broken) = read_stream(&server, "chat/completions", &request(true)).await;
    assert!(!broken);
    let events = data_events(&text);
    assert_eq!(events.len(), 3);
    assert!(!text.contains("[DONE]"));
    let chunks = chunks(&text);
    assert_eq!(chunks[1]["choices"][0]["delta"]["content"], "one");
    let error = &chunks[2]["error"];
    assert_eq!(error["type"], "server_error");
    assert_eq!(error["code"], Value::Null);
    assert!(chunks[2].get("choices").is_none());
}

#[tokio::test]
async fn a_stream_error_step_fails_a_whole_answer_with_the_http_error() {
    let step = Step::text("never").fail_stream_after(1, ProviderErrorKind::Overloaded);
    let server = server(vec![step.clone(), step.clone(), step]).await;
    let expected = [
        ("chat/completions", 503, "/error/type", "server_error"),
        ("messages", 529, "/error/type", "overloaded_error"),
        ("responses", 503, "/error/type", "server_error"),
    ];
    for (api, status, pointer, error_type) in expected {
        let response = post_to(&server, api, &request_for(api, false)).await;
        assert_eq!(response.status(), status, "{api}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body.pointer(pointer).unwrap(), error_type, "{api}");
    }
}

#[tokio::test]
async fn error_steps_answer_every_api_in_both_modes() {
    let steps = (0..6)
        .map(|_| Step::error(429).with_header("retry-after", "2"))
        .collect();
    let server = server(steps).await;
    for api in APIS {
        for stream in [false, true] {
            let response = post_to(&server, api, &request_for(api, stream)).await;
            assert_eq!(response.status(), 429, "{api} stream={stream}");
            assert_eq!(response.headers()["retry-after"], "2");
            let body: Value = response.json().await.unwrap();
            assert!(body["error"]["message"].is_string(), "{api}: {body}");
        }
    }
}

#[tokio::test]
async fn an_aborted_cut_breaks_every_api_stream() {
    let steps = (0..3)
        .map(|_| Step::text("one two three four").cut_after(3))
        .collect();
    let server = server(steps).await;
    for api in APIS {
        let (text, broken) = read_stream(&server, api, &request_for(api, true)).await;
        assert!(broken, "{api}: the client sees the broken connection");
        assert_eq!(event_count(&text), 3, "{api}: {text}");
    }
}

#[tokio::test]
async fn an_eof_cut_ends_every_api_stream_without_its_terminal_events() {
    let steps = (0..3).map(|_| Step::text("short").eof_after(100)).collect();
    let server = server(steps).await;
    for api in APIS {
        let (text, broken) = read_stream(&server, api, &request_for(api, true)).await;
        assert!(!broken, "{api}");
        assert!(event_count(&text) >= 2, "{api}");
        for terminal in [
            "[DONE]",
            "finish_reason\":\"stop",
            "message_delta",
            "message_stop",
            "response.completed",
        ] {
            assert!(!text.contains(terminal), "{api}: {terminal} in {text}");
        }
    }
    // The Anthropic stream stops before its stop reason, the Responses one before its end.
    let server = common::server(vec![
        Step::text("a b").eof_after(100),
        Step::text("a b").eof_after(100),
    ])
    .await;
    let (text, _) = read_stream(&server, "messages", &messages_request(true)).await;
    assert_eq!(
        collapsed(names(&named_events(&text))).last(),
        Some(&"content_block_stop")
    );
    let (text, _) = read_stream(&server, "responses", &responses_request(true)).await;
    assert_eq!(
        names(&named_events(&text)).last(),
        Some(&"response.output_item.done")
    );
}

#[tokio::test]
async fn a_cut_whole_answer_breaks_on_every_api() {
    let steps = (0..3)
        .flat_map(|_| {
            [
                Step::text("a whole answer").cut_after(1),
                Step::text("a whole answer").eof_after(1),
            ]
        })
        .collect();
    let server = server(steps).await;
    for api in APIS {
        let broken = post_to(&server, api, &request_for(api, false))
            .await
            .text()
            .await;
        assert!(broken.is_err(), "{api}");
        let truncated = post_to(&server, api, &request_for(api, false))
            .await
            .text()
            .await
            .unwrap();
        assert!(!truncated.is_empty(), "{api}");
        assert!(serde_json::from_str::<Value>(&truncated).is_err(), "{api}");
    }
}

#[tokio::test(start_paused = true)]
async fn delays_pass_in_tokio_time_on_every_api() {
    let steps = (0..3)
        .map(|_| {
            Step::text("a b")
                .with_delay_ms(20_000)
                .with_chunk_delay_ms(1_000)
        })
        .collect();
    let server = server(steps).await;
    for api in APIS {
        let start = tokio::time::Instant::now();
        let (text, _) = read_stream(&server, api, &request_for(api, true)).await;
        let pauses = event_count(&text) as u64 - 1;
        assert!(
            start.elapsed() >= Duration::from_secs(20 + pauses),
            "{api}: {:?}",
            start.elapsed()
        );
    }
}
