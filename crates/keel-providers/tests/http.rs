//! The adapter over real HTTP against a small axum server started by each test on
//! 127.0.0.1:0. Nothing here sleeps: every reply is written at once.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use common::Recorder;
use common::server::{BreakOnText, MockServer, Reply, closed_address, serve_stalling};
use keel_core::{
    ChatRequest, ChatResponse, InternalReason, Message, NoDeltas, Provider, ProviderError,
    ProviderErrorKind, StopReason, StreamDelta, ToolCall, ToolChoice, ToolSpec,
};
use keel_providers::{OpenAiChat, OpenAiConfig};
use serde_json::{Value, json};
use tokio::sync::Notify;

use common::fixture;

async fn serve(reply: Reply) -> MockServer {
    common::server::serve("/v1/chat/completions", "/v1", vec![reply]).await
}

fn adapter(base_url: &str, api_key: Option<&str>) -> OpenAiChat {
    let mut config = OpenAiConfig::new(base_url);
    config.api_key = api_key.map(str::to_string);
    config.request_timeout = Duration::from_secs(30);
    OpenAiChat::new(config).unwrap()
}

fn simple_request(stream: bool) -> ChatRequest {
    common::simple_request("test-model", stream)
}

async fn stream_call(reply: Reply) -> (Result<ChatResponse, ProviderError>, Recorder) {
    let server = serve(reply).await;
    common::call(&adapter(&server.base_url, None), &simple_request(true)).await
}

fn data(json: Value) -> Bytes {
    Bytes::from(format!("data: {json}\n\n"))
}

fn text_chunk(text: &str) -> Bytes {
    data(json!({"model": "m", "choices": [{"index": 0, "delta": {"content": text}}]}))
}

#[tokio::test]
async fn whole_answer_with_the_key_as_bearer_token() {
    let server = serve(Reply::json(fixture("oai_chat_text.json"))).await;
    // A trailing slash on the base URL is ignored.
    let chat = adapter(&format!("{}/", server.base_url), Some("sk-test"));
    let response = chat.chat(&simple_request(false), &NoDeltas).await.unwrap();
    assert_eq!(response.message.content, "\\(4200 + 42 = 4242\\).");
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.model, "gpt-4o-2024-08-06");
    assert_eq!(response.usage.input_tokens, 16);
    assert_eq!(chat.name(), "openai");
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer sk-test"));
    assert!(seen[0].body.get("stream").is_none());
}

#[tokio::test]
async fn no_key_means_no_authorization_header() {
    let server = serve(Reply::json(fixture("oai_chat_text.json"))).await;
    adapter(&server.base_url, None)
        .chat(&simple_request(false), &NoDeltas)
        .await
        .unwrap();
    assert_eq!(server.seen.lock().unwrap()[0].authorization, None);
}

#[tokio::test]
async fn the_request_body_carries_tools_choice_and_tool_results() {
    let server = serve(Reply::json(fixture("oai_chat_tool_call.json"))).await;
    let call = ToolCall {
        id: "call_1".into(),
        name: "get_weather".into(),
        arguments: r#"{"city":"Oslo"}"#.into(),
    };
    let mut pinned = Message::user("What is the weather in Oslo?");
    pinned.meta.pinned = true;
    pinned.meta.importance = Some(0.9);
    let request = ChatRequest {
        model: "gpt-test".into(),
        messages: vec![
            Message::system("Be brief."),
            pinned,
            Message::assistant_with_calls("", vec![call]),
            Message::tool_result("call_1", "12 °C, rain"),
            Message::internal_user("Continue.", InternalReason::LoopNudge),
        ]
        .into_iter()
        .map(std::sync::Arc::new)
        .collect(),
        tools: vec![ToolSpec::new(
            "get_weather",
            "Current weather for a city",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        )
        .idempotent()]
        .into(),
        tool_choice: ToolChoice::Tool("get_weather".into()),
        max_tokens: Some(100),
        temperature: None,
        stream: false,
    };
    let response = adapter(&server.base_url, None)
        .chat(&request, &NoDeltas)
        .await
        .unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    let body = server.seen.lock().unwrap()[0].body.clone();
    assert_eq!(
        body,
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is the weather in Oslo?"},
                {"role": "assistant", "content": null, "tool_calls": [{
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"},
                }]},
                {"role": "tool", "tool_call_id": "call_1", "content": "12 °C, rain"},
                {"role": "user", "content": "Continue."},
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "max_tokens": 100,
        })
    );
}

#[tokio::test]
async fn streamed_answer_arrives_as_deltas_and_whole() {
    let sse = fixture("oai_chat_stream_parallel_tool_calls.sse");
    let pieces = sse.chunks(50).map(Bytes::copy_from_slice).collect();
    let server = serve(Reply::sse(pieces)).await;
    let sink = Recorder::default();
    let response = adapter(&server.base_url, None)
        .chat(&simple_request(true), &sink)
        .await
        .unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    let arguments: Vec<_> = response
        .message
        .tool_calls
        .iter()
        .map(|call| call.arguments.as_str())
        .collect();
    assert_eq!(
        arguments,
        [r#"{"password": "mellon"}"#, r#"{"password": "radiance"}"#]
    );
    assert_eq!(response.usage.output_tokens, 53);
    assert_eq!(sink.finished(), [Some(StopReason::ToolUse)]);
    let started = sink
        .deltas()
        .iter()
        .filter(|delta| matches!(delta, StreamDelta::ToolCallStarted { .. }))
        .count();
    assert_eq!(started, 2);
    let body = server.seen.lock().unwrap()[0].body.clone();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn a_stream_that_breaks_mid_way_is_a_network_error_with_one_finished() {
    // The connection drops once the client has the first text, so the break is mid-stream.
    let notify = Arc::new(Notify::new());
    let mut reply = Reply::sse(vec![text_chunk("Hel"), text_chunk("lo")]);
    reply.break_after = Some(notify.clone());
    let server = serve(reply).await;
    let sink = BreakOnText(Recorder::default(), notify);
    let result = adapter(&server.base_url, None)
        .chat(&simple_request(true), &sink)
        .await;
    let sink = sink.0;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Network, "{error}");
    assert!(error.message.contains("broke mid-way"), "{error}");
    assert!(error.message.contains(&server.base_url), "{error}");
    assert!(
        sink.text().starts_with("Hel"),
        "text arrived before the break"
    );
    assert_eq!(sink.finished(), [None]);
    assert_eq!(
        sink.deltas().last(),
        Some(&StreamDelta::Finished { stop_reason: None })
    );
}

#[tokio::test]
async fn a_stream_that_closes_cleanly_before_its_finish_reason_is_a_network_error() {
    let (result, sink) = stream_call(Reply::sse(vec![text_chunk("one"), text_chunk(" two")])).await;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Network, "{error}");
    assert!(
        error.message.contains("[DONE] or a finish reason"),
        "{error}"
    );
    assert_eq!(sink.finished(), [None]);

    // A batch cut mid-arguments: never an answer to execute.
    let call = data(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c1", "type": "function", "function": {"name": "write_file", "arguments": "{\"pa"}}
    ]}}]}));
    let (result, sink) = stream_call(Reply::sse(vec![call])).await;
    assert_eq!(result.unwrap_err().kind, ProviderErrorKind::Network);
    assert_eq!(sink.finished(), [None]);
}

#[tokio::test]
async fn a_chunk_that_is_not_json_is_malformed_with_one_finished() {
    let reply = Reply::sse(vec![text_chunk("Hi"), Bytes::from("data: {not json\n\n")]);
    let (result, sink) = stream_call(reply).await;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::MalformedResponse);
    assert!(error.message.contains("{not json"), "{error}");
    assert_eq!(sink.finished(), [None]);
}

#[tokio::test]
async fn a_server_that_ignores_stream_still_yields_deltas() {
    let (result, sink) = stream_call(Reply::json(fixture("oai_chat_tool_call.json"))).await;
    let response = result.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(sink.finished(), [Some(StopReason::ToolUse)]);
    assert!(sink.deltas().contains(&StreamDelta::ToolCallStarted {
        index: 0,
        id: "call_TTY8UFNo7rNCaOBUNtlRSvMG".into(),
        name: "lookup_population".into(),
    }));
}

#[tokio::test]
async fn an_html_502_page_is_reduced_to_its_title() {
    let page = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n\
                <center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n\
                </body>\r\n</html>\r\n";
    let server = serve(Reply::status(502, "text/html", page)).await;
    let error = adapter(&server.base_url, None)
        .chat(&simple_request(false), &NoDeltas)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert_eq!(error.status, Some(502));
    assert_eq!(error.message, "502 Bad Gateway");
}

#[tokio::test]
async fn an_empty_503_says_so() {
    let server = serve(Reply::status(503, "text/plain", "")).await;
    let error = adapter(&server.base_url, None)
        .chat(&simple_request(false), &NoDeltas)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert_eq!(error.status, Some(503));
    assert_eq!(error.message, "HTTP 503 with an empty body");
}

#[tokio::test]
async fn a_failed_streamed_call_still_finishes_once() {
    let mut reply = Reply::status(
        429,
        "application/json",
        r#"{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}"#,
    );
    reply.headers = vec![("retry-after", "3")];
    let (result, sink) = stream_call(reply).await;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::RateLimit);
    assert_eq!(error.retry_after, Some(Duration::from_secs(3)));
    assert_eq!(error.message, "slow down");
    assert_eq!(sink.deltas(), [StreamDelta::Finished { stop_reason: None }]);
}

#[tokio::test]
async fn connection_refused_names_the_base_url() {
    let addr = closed_address();
    let base_url = format!("http://{addr}/v1");
    let sink = Recorder::default();
    let error = adapter(&base_url, None)
        .chat(&simple_request(true), &sink)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Network);
    assert_eq!(error.status, None);
    assert_eq!(
        error.message,
        format!("cannot reach {base_url}: connection refused")
    );
    assert_eq!(sink.finished(), [None]);
}

/// A server that never answers (`None`), or sends one piece of a stream and then stalls.
async fn serve_silence(first_piece: Option<Bytes>) -> String {
    serve_stalling(
        "/v1/chat/completions",
        "/v1",
        first_piece.map(|piece| vec![piece]),
    )
    .await
}

// Tokio's clock is paused: the timeouts fire as soon as everything waits, not after 30 s.

#[tokio::test(start_paused = true)]
async fn a_server_that_never_answers_times_out() {
    let base_url = serve_silence(None).await;
    let error = adapter(&base_url, None)
        .chat(&simple_request(false), &NoDeltas)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{error}");
    assert!(error.message.contains(&base_url), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_stalled_stream_times_out_with_one_finished() {
    let base_url = serve_silence(Some(text_chunk("Hel"))).await;
    let sink = Recorder::default();
    let error = adapter(&base_url, None)
        .chat(&simple_request(true), &sink)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{error}");
    assert_eq!(sink.finished(), [None]);
}

#[tokio::test]
async fn a_streamed_html_200_says_the_server_answered_html() {
    let page = "<!DOCTYPE html><html><head><title>Sign in to the proxy</title></head></html>";
    let (result, sink) = stream_call(Reply::status(200, "text/html; charset=utf-8", page)).await;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::MalformedResponse, "{error}");
    assert!(error.message.contains("HTML page"), "{error}");
    assert!(error.message.contains("Sign in to the proxy"), "{error}");
    assert_eq!(sink.finished(), [None]);
}
