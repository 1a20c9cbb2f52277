//! The Anthropic adapter over real HTTP against a small axum server started by each test on
//! 127.0.0.1:0. Nothing here sleeps: every reply is written at once.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use common::Recorder;
use common::server::{BreakOnText, MockServer, Reply, closed_address, serve_stalling};
use keel_core::{
    ChatRequest, ChatResponse, InternalReason, Message, NoDeltas, Provider, ProviderError,
    ProviderErrorKind, Reasoning, StopReason, StreamDelta, ToolCall, ToolChoice, ToolSpec,
};
use keel_providers::anthropic::{Anthropic, AnthropicConfig};
use serde_json::{Value, json};
use tokio::sync::Notify;

use common::fixture;

/// A server of the Messages API at the bare host (`http://127.0.0.1:port`), as
/// `ANTHROPIC_BASE_URL` is usually set; it sends its event streams as
/// `text/event-stream; charset=utf-8`, as Anthropic's does.
async fn serve(mut reply: Reply) -> MockServer {
    if reply.content_type == "text/event-stream" {
        reply.content_type = "text/event-stream; charset=utf-8";
    }
    common::server::serve("/v1/messages", "", vec![reply]).await
}

fn adapter(base_url: &str, api_key: Option<&str>) -> Anthropic {
    let mut config = AnthropicConfig::new(base_url);
    config.api_key = api_key.map(str::to_string);
    config.request_timeout = Duration::from_secs(30);
    Anthropic::new(config).unwrap()
}

fn simple_request(stream: bool) -> ChatRequest {
    common::simple_request("claude-test", stream)
}

async fn stream_call(reply: Reply) -> (Result<ChatResponse, ProviderError>, Recorder) {
    let server = serve(reply).await;
    common::call(&adapter(&server.base_url, None), &simple_request(true)).await
}

async fn whole_call(reply: Reply) -> ProviderError {
    let server = serve(reply).await;
    adapter(&server.base_url, None)
        .chat(&simple_request(false), &NoDeltas)
        .await
        .unwrap_err()
}

fn event(data: Value) -> Bytes {
    let name = data["type"].as_str().unwrap().to_string();
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// The opening of a streamed text answer: message_start, a text block and its first delta.
fn text_opening(text: &str) -> Vec<Bytes> {
    vec![
        event(json!({"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [], "stop_reason": null, "usage": {"input_tokens": 12, "output_tokens": 1},
        }})),
        event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}})),
        text_delta(text),
    ]
}

fn text_delta(text: &str) -> Bytes {
    event(json!({"type": "content_block_delta", "index": 0,
        "delta": {"type": "text_delta", "text": text}}))
}

#[tokio::test]
async fn whole_answer_with_the_key_and_version_headers() {
    let server = serve(Reply::json(fixture("anth_text.json"))).await;
    let anthropic = adapter(&server.base_url, Some("sk-ant-test"));
    let response = anthropic
        .chat(&simple_request(false), &NoDeltas)
        .await
        .unwrap();
    assert_eq!(response.message.content, "4200 + 42 = 4242");
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.model, "claude-sonnet-4-20250514");
    assert_eq!(response.usage.input_tokens, 17);
    assert_eq!(response.usage.output_tokens, 15);
    assert_eq!(anthropic.name(), "anthropic");
    let seen = server.only_request();
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(seen.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(seen.header("authorization"), None);
    assert!(seen.body.get("stream").is_none());
}

#[tokio::test]
async fn a_base_url_ending_in_v1_is_not_doubled_and_no_key_sends_no_header() {
    let server = serve(Reply::json(fixture("anth_text.json"))).await;
    adapter(&format!("{}/v1/", server.base_url), None)
        .chat(&simple_request(false), &NoDeltas)
        .await
        .unwrap();
    let seen = server.only_request();
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(seen.header("x-api-key"), None);
}

#[tokio::test]
async fn the_request_body_is_the_messages_wire_format() {
    let server = serve(Reply::json(fixture("anth_tool_use.json"))).await;
    let call = ToolCall {
        id: "toolu_1".into(),
        name: "get_weather".into(),
        arguments: r#"{"city":"Oslo"}"#.into(),
    };
    let mut answer = Message::assistant_with_calls("Checking.", vec![call]);
    answer.reasoning = Some(Reasoning {
        text: "The user wants weather.".into(),
        replay: Some(json!([
            {"type": "thinking", "thinking": "The user wants weather.", "signature": "c2ln"},
        ])),
    });
    let mut pinned = Message::user("What is the weather in Oslo?");
    pinned.meta.pinned = true;
    let request = ChatRequest {
        model: "claude-test".into(),
        messages: vec![
            Message::system("Be brief."),
            pinned,
            answer,
            Message::tool_result("toolu_1", "12 °C, rain"),
            Message::internal_user("Continue.", InternalReason::LoopNudge),
        ]
        .into_iter()
        .map(std::sync::Arc::new)
        .collect(),
        tools: vec![ToolSpec::new(
            "get_weather",
            "Current weather for a city",
            json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        )]
        .into(),
        tool_choice: ToolChoice::Required,
        max_tokens: Some(100),
        temperature: None,
        stream: false,
    };
    let response = adapter(&server.base_url, None)
        .chat(&request, &NoDeltas)
        .await
        .unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.message.tool_calls.len(), 2);
    let cache = json!({"type": "ephemeral"});
    assert_eq!(
        server.only_request().body,
        json!({
            "model": "claude-test",
            "max_tokens": 100,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": cache}],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "What is the weather in Oslo?", "cache_control": cache},
                ]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "The user wants weather.", "signature": "c2ln"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12 °C, rain"},
                    {"type": "text", "text": "Continue.", "cache_control": cache},
                ]},
            ],
            "tools": [{
                "name": "get_weather",
                "description": "Current weather for a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                "cache_control": cache,
            }],
            "tool_choice": {"type": "any"},
        })
    );
}

#[tokio::test]
async fn prompt_caching_can_be_turned_off() {
    let server = serve(Reply::json(fixture("anth_text.json"))).await;
    let mut config = AnthropicConfig::new(&server.base_url);
    config.prompt_caching = false;
    config.default_max_tokens = 1234;
    let mut request = simple_request(false);
    request.messages.insert(0, Message::system("sys").into());
    Anthropic::new(config)
        .unwrap()
        .chat(&request, &NoDeltas)
        .await
        .unwrap();
    let body = server.only_request().body;
    assert_eq!(body["max_tokens"], 1234);
    assert!(!body.to_string().contains("cache_control"), "{body}");
}

#[tokio::test]
async fn streamed_answer_arrives_as_deltas_and_whole() {
    let sse = fixture("anth_stream_tool_use.sse");
    let pieces = sse.chunks(50).map(Bytes::copy_from_slice).collect();
    let server = serve(Reply::sse(pieces)).await;
    let sink = Recorder::default();
    let response = adapter(&server.base_url, Some("k"))
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
    assert_eq!(
        sink.text(),
        "I'll retrieve the secrets for both passwords you provided."
    );
    assert_eq!(response.usage.output_tokens, 109);
    assert_eq!(sink.finished(), [Some(StopReason::ToolUse)]);
    let seen = server.only_request();
    assert_eq!(seen.body["stream"], true);
    assert_eq!(seen.header("accept"), Some("text/event-stream"));
}

#[tokio::test]
async fn a_mid_stream_overloaded_error_is_classified_with_one_finished() {
    let mut chunks = text_opening("Hel");
    chunks.push(Bytes::from(
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\
         \"message\":\"Overloaded\"},\"request_id\":\"req_1\"}\n\n",
    ));
    let (result, sink) = stream_call(Reply::sse(chunks)).await;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Overloaded);
    assert_eq!(error.message, "the stream reported an error: Overloaded");
    assert_eq!(sink.text(), "Hel");
    assert_eq!(sink.finished(), [None]);
    assert_eq!(
        sink.deltas().last(),
        Some(&StreamDelta::Finished { stop_reason: None })
    );
}

#[tokio::test]
async fn a_stream_that_breaks_mid_way_is_a_network_error_with_one_finished() {
    // The connection drops once the client has the first text, so the break is mid-stream.
    let notify = Arc::new(Notify::new());
    let mut reply = Reply::sse(text_opening("Hel"));
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
    assert_eq!(sink.text(), "Hel");
    assert_eq!(sink.finished(), [None]);
}

#[tokio::test]
async fn a_stream_that_closes_cleanly_before_message_stop_is_a_network_error() {
    let mut chunks = text_opening("Hel");
    chunks.push(text_delta("lo"));
    let (result, sink) = stream_call(Reply::sse(chunks)).await;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Network, "{error}");
    assert!(error.message.contains("message_stop"), "{error}");
    assert_eq!(sink.finished(), [None]);
}

#[tokio::test]
async fn a_server_that_ignores_stream_still_yields_deltas() {
    let (result, sink) = stream_call(Reply::json(fixture("anth_tool_use.json"))).await;
    let response = result.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(sink.finished(), [Some(StopReason::ToolUse)]);
    assert_eq!(
        sink.text(),
        "I'll retrieve the secrets for both passwords you provided."
    );
    assert!(sink.deltas().contains(&StreamDelta::ToolCallStarted {
        index: 1,
        id: "toolu_01VPuQJ1LonDBYXrr8pqPkqQ".into(),
        name: "secret_retrieval_tool".into(),
    }));
}

#[tokio::test]
async fn a_529_overloaded_with_x_should_retry_is_overloaded() {
    let mut reply = Reply::status(
        529,
        "application/json",
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    );
    reply.headers = vec![("x-should-retry", "true")];
    let (result, sink) = stream_call(reply).await;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Overloaded);
    assert_eq!(error.status, Some(529));
    assert_eq!(error.message, "Overloaded");
    assert_eq!(error.retry_after, None);
    assert_eq!(sink.deltas(), [StreamDelta::Finished { stop_reason: None }]);
}

#[tokio::test]
async fn a_429_carries_its_retry_after() {
    let mut reply = Reply::status(
        429,
        "application/json",
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
    );
    reply.headers = vec![("retry-after", "7"), ("x-should-retry", "true")];
    let error = whole_call(reply).await;
    assert_eq!(error.kind, ProviderErrorKind::RateLimit);
    assert_eq!(error.retry_after, Some(Duration::from_secs(7)));
    assert_eq!(error.message, "slow down");
}

#[tokio::test]
async fn a_prompt_too_long_is_a_context_overflow() {
    let error = whole_call(Reply::status(
        400,
        "application/json",
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"},"request_id":"req_1"}"#,
    ))
    .await;
    assert_eq!(error.kind, ProviderErrorKind::ContextOverflow);
    assert_eq!(error.status, Some(400));
}

#[tokio::test]
async fn an_html_error_page_is_reduced_to_its_title() {
    let page = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n\
                <center><h1>502 Bad Gateway</h1></center>\r\n</body>\r\n</html>\r\n";
    let error = whole_call(Reply::status(502, "text/html", page)).await;
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert_eq!(error.status, Some(502));
    assert_eq!(error.message, "502 Bad Gateway");
}

#[tokio::test]
async fn an_empty_error_body_says_so() {
    let error = whole_call(Reply::status(503, "text/plain", "")).await;
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert_eq!(error.status, Some(503));
    assert_eq!(error.message, "HTTP 503 with an empty body");
}

#[tokio::test]
async fn a_200_that_is_not_a_message_is_malformed() {
    let error = whole_call(Reply::json(r#"{"type":"message","model":"m"}"#)).await;
    assert_eq!(error.kind, ProviderErrorKind::MalformedResponse);
    assert!(error.message.contains("`content`"), "{error}");
}

#[tokio::test]
async fn connection_refused_names_the_base_url() {
    let addr = closed_address();
    let base_url = format!("http://{addr}");
    let sink = Recorder::default();
    let error = adapter(&base_url, None)
        .chat(&simple_request(true), &sink)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Network);
    assert_eq!(
        error.message,
        format!("cannot reach {base_url}: connection refused")
    );
    assert_eq!(sink.finished(), [None]);
}

/// A server that sends the opening of a stream and then stalls.
async fn serve_stall() -> String {
    serve_stalling("/v1/messages", "", Some(text_opening("Hel"))).await
}

// Tokio's clock is paused: the read timeout fires as soon as everything waits, not after 30 s.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_times_out_with_one_finished() {
    let base_url = serve_stall().await;
    let sink = Recorder::default();
    let error = adapter(&base_url, None)
        .chat(&simple_request(true), &sink)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{error}");
    assert_eq!(sink.text(), "Hel");
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
