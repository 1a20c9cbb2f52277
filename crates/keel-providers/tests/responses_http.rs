//! The Responses adapter over real HTTP against a small axum server started by each test on
//! 127.0.0.1:0. Nothing here sleeps: every reply is written at once.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use common::Recorder;
use common::server::{BreakOnText, MockServer, Reply, closed_address};
use keel_core::{
    ChatRequest, ChatResponse, InternalReason, Message, NoDeltas, Provider, ProviderError,
    ProviderErrorKind, Reasoning, StopReason, StreamDelta, ToolCall, ToolChoice, ToolSpec,
};
use keel_providers::OpenAiConfig;
use keel_providers::openai_responses::OpenAiResponses;
use serde_json::{Value, json};
use tokio::sync::Notify;

use common::fixture;

async fn serve(replies: Vec<Reply>) -> MockServer {
    common::server::serve("/v1/responses", "/v1", replies).await
}

fn adapter(base_url: &str, api_key: Option<&str>) -> OpenAiResponses {
    let mut config = OpenAiConfig::new(base_url);
    config.api_key = api_key.map(str::to_string);
    config.request_timeout = Duration::from_secs(30);
    OpenAiResponses::new(config).unwrap()
}

fn simple_request(stream: bool) -> ChatRequest {
    common::simple_request("test-model", stream)
}

async fn stream_call(replies: Vec<Reply>) -> (Result<ChatResponse, ProviderError>, Recorder) {
    let server = serve(replies).await;
    common::call(&adapter(&server.base_url, None), &simple_request(true)).await
}

fn event(json: Value) -> Bytes {
    Bytes::from(format!(
        "event: {}\ndata: {json}\n\n",
        json["type"].as_str().unwrap()
    ))
}

fn created() -> Bytes {
    event(json!({"type": "response.created", "response": {
        "status": "in_progress", "model": "gpt-test", "output": []}}))
}

fn text_delta(text: &str) -> Bytes {
    event(json!({"type": "response.output_text.delta", "output_index": 0, "delta": text}))
}

#[tokio::test]
async fn whole_answer_with_the_key_as_bearer_token() {
    let server = serve(vec![Reply::json(fixture("resp_text.json"))]).await;
    // A trailing slash on the base URL is ignored.
    let responses = adapter(&format!("{}/", server.base_url), Some("sk-test"));
    let response = responses
        .chat(&simple_request(false), &NoDeltas)
        .await
        .unwrap();
    assert_eq!(response.message.content, "4200 + 42 equals 4242.");
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.model, "gpt-4o-2024-08-06");
    assert_eq!(response.usage.input_tokens, 16);
    assert_eq!(responses.name(), "openai-responses");
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer sk-test"));
    assert!(seen[0].body.get("stream").is_none());
}

#[tokio::test]
async fn no_key_means_no_authorization_header() {
    let server = serve(vec![Reply::json(fixture("resp_text.json"))]).await;
    adapter(&server.base_url, None)
        .chat(&simple_request(false), &NoDeltas)
        .await
        .unwrap();
    assert_eq!(server.seen()[0].authorization, None);
}

#[tokio::test]
async fn the_request_body_carries_instructions_items_tools_and_reasoning() {
    let server = serve(vec![Reply::json(fixture("resp_function_calls.json"))]).await;
    let reasoning_item = json!({"id": "rs_1", "type": "reasoning", "encrypted_content": "gAAA",
        "summary": [{"type": "summary_text", "text": "Need the weather."}]});
    let mut asked = Message::assistant_with_calls(
        "",
        vec![ToolCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: r#"{"city":"Oslo"}"#.into(),
        }],
    );
    asked.reasoning = Some(Reasoning {
        text: "Need the weather.".into(),
        replay: Some(json!([reasoning_item])),
    });
    let request = ChatRequest {
        model: "o4-mini".into(),
        messages: vec![
            Message::system("Be brief."),
            Message::user("What is the weather in Oslo?"),
            asked,
            Message::tool_result("call_1", "12 °C, rain"),
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
    assert_eq!(
        server.seen()[0].body,
        json!({
            "model": "o4-mini",
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [
                    {"type": "input_text", "text": "What is the weather in Oslo?"}]},
                reasoning_item,
                {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                 "arguments": "{\"city\":\"Oslo\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "12 °C, rain"},
                {"role": "user", "content": [{"type": "input_text", "text": "Continue."}]},
            ],
            "tools": [{"type": "function", "name": "get_weather",
                       "description": "Current weather for a city",
                       "parameters": {"type": "object",
                                      "properties": {"city": {"type": "string"}}},
                       "strict": false}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "max_output_tokens": 100,
            "store": false,
            "include": ["reasoning.encrypted_content"],
        })
    );
}

#[tokio::test]
async fn streamed_answer_arrives_as_deltas_and_whole() {
    let sse = fixture("resp_stream_function_calls.sse");
    let pieces = sse.chunks(50).map(Bytes::copy_from_slice).collect();
    let server = serve(vec![Reply::sse(pieces)]).await;
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
        [r#"{"password":"mellon"}"#, r#"{"password":"radiance"}"#]
    );
    assert_eq!(response.usage.output_tokens, 54);
    assert_eq!(sink.finished(), [Some(StopReason::ToolUse)]);
    let started = sink
        .deltas()
        .iter()
        .filter(|delta| matches!(delta, StreamDelta::ToolCallStarted { .. }))
        .count();
    assert_eq!(started, 2);
    let seen = &server.seen()[0];
    assert_eq!(seen.body["stream"], true);
    assert_eq!(seen.accept.as_deref(), Some("text/event-stream"));
}

#[tokio::test]
async fn a_stream_that_breaks_mid_way_is_a_network_error_with_one_finished() {
    // The connection drops once the client has the first text, so the break is mid-stream.
    let notify = Arc::new(Notify::new());
    let mut reply = Reply::sse(vec![created(), text_delta("Hel"), text_delta("lo")]);
    reply.break_after = Some(notify.clone());
    let server = serve(vec![reply]).await;
    let sink = BreakOnText(Recorder::default(), notify);
    let result = adapter(&server.base_url, None)
        .chat(&simple_request(true), &sink)
        .await;
    let sink = sink.0;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Network, "{error}");
    assert!(error.message.contains("broke mid-way"), "{error}");
    assert!(error.message.contains(&server.base_url), "{error}");
    assert!(sink.text().starts_with("Hel"), "text came before the break");
    assert_eq!(sink.finished(), [None]);
    assert_eq!(
        sink.deltas().last(),
        Some(&StreamDelta::Finished { stop_reason: None })
    );
}

#[tokio::test]
async fn a_stream_that_closes_cleanly_before_response_completed_is_a_network_error() {
    let reply = Reply::sse(vec![created(), text_delta("Hel"), text_delta("lo")]);
    let (result, sink) = stream_call(vec![reply]).await;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Network, "{error}");
    assert!(error.message.contains("response.completed"), "{error}");
    assert_eq!(sink.finished(), [None]);

    let call = event(
        json!({"type": "response.output_item.done", "output_index": 0, "item":
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"}}),
    );
    let (result, sink) = stream_call(vec![Reply::sse(vec![created(), call])]).await;
    assert_eq!(result.unwrap_err().kind, ProviderErrorKind::Network);
    assert_eq!(sink.finished(), [None]);
}

#[tokio::test]
async fn a_failed_response_event_is_a_classified_error_with_one_finished() {
    let failed = event(json!({"type": "response.failed", "response": {
        "status": "failed", "model": "gpt-test", "output": [],
        "error": {"code": "server_error", "message": "The model had an error."}}}));
    let (result, sink) =
        stream_call(vec![Reply::sse(vec![created(), text_delta("Hi"), failed])]).await;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert_eq!(
        error.message,
        "the response failed: The model had an error."
    );
    assert_eq!(error.status, None);
    assert_eq!(sink.text(), "Hi");
    assert_eq!(sink.finished(), [None]);
}

#[tokio::test]
async fn an_error_event_mid_stream_is_a_classified_error_with_one_finished() {
    let error_event = event(json!({"type": "error", "code": "rate_limit_exceeded",
        "message": "Rate limit reached.", "param": null, "sequence_number": 3}));
    // Anything after the error is not read.
    let reply = Reply::sse(vec![
        created(),
        text_delta("Hi"),
        error_event,
        text_delta("!"),
    ]);
    let (result, sink) = stream_call(vec![reply]).await;
    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::RateLimit);
    assert_eq!(
        error.message,
        "the stream reported an error: Rate limit reached."
    );
    assert_eq!(sink.text(), "Hi");
    assert_eq!(sink.finished(), [None]);
}

#[tokio::test]
async fn an_unknown_model_is_model_not_found_and_asked_once() {
    let body = String::from_utf8(fixture("err_resp_400_model_not_found.json")).unwrap();
    let server = serve(vec![Reply::error(400, &body)]).await;
    let sink = Recorder::default();
    let error = adapter(&server.base_url, None)
        .chat(&simple_request(true), &sink)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::ModelNotFound);
    assert_eq!(error.status, Some(400));
    assert_eq!(sink.deltas(), [StreamDelta::Finished { stop_reason: None }]);
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn a_model_without_encrypted_reasoning_is_asked_again_without_it_and_remembered() {
    let refusal = r#"{"error": {"message": "Encrypted content is not supported with this model.",
        "type": "invalid_request_error", "param": "include", "code": null}}"#;
    let server = serve(vec![
        Reply::error(400, refusal),
        Reply::json(fixture("resp_text.json")),
    ])
    .await;
    let responses = adapter(&server.base_url, None);
    for _ in 0..2 {
        let response = responses
            .chat(&simple_request(false), &NoDeltas)
            .await
            .unwrap();
        assert_eq!(response.message.content, "4200 + 42 equals 4242.");
    }
    let included: Vec<bool> = server
        .seen()
        .iter()
        .map(|seen| seen.body.get("include").is_some())
        .collect();
    assert_eq!(included, [true, false, false]);
    assert!(server.seen().iter().all(|seen| seen.body["store"] == false));
}

#[tokio::test]
async fn a_server_that_ignores_stream_still_yields_deltas() {
    let (result, sink) = stream_call(vec![Reply::json(fixture("resp_function_calls.json"))]).await;
    let response = result.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(sink.finished(), [Some(StopReason::ToolUse)]);
    assert!(sink.deltas().contains(&StreamDelta::ToolCallStarted {
        index: 1,
        id: "call_Dd4wvykCr6NttXKxRK0BFH96".into(),
        name: "secret_retrieval_tool".into(),
    }));
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
    assert_eq!(
        error.message,
        format!("cannot reach {base_url}: connection refused")
    );
    assert_eq!(sink.finished(), [None]);
}
