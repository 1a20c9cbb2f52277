//! Anthropic Messages request validation over real HTTP: what the real API rejects, the mock
//! rejects with a 400 `invalid_request_error` in Anthropic's envelope, without consuming a step.

mod common;

use common::{client, messages_request, post_messages, server};
use keel_mock::Step;
use serde_json::{Value, json};

/// Posts `body` and returns the 400's error message.
async fn rejected(body: &Value) -> String {
    let server = server(vec![Step::text("never")]).await;
    let response = post_messages(&server, body).await;
    assert_eq!(response.status(), 400, "{body}");
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(error["request_id"].as_str().unwrap().starts_with("req_"));
    error["error"]["message"].as_str().unwrap().to_string()
}

fn with_messages(messages: Value) -> Value {
    json!({"model": "claude-test", "max_tokens": 100, "messages": messages})
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

fn tool_use(ids: &[&str]) -> Value {
    let blocks: Vec<Value> = ids
        .iter()
        .map(|id| json!({"type": "tool_use", "id": id, "name": "f", "input": {}}))
        .collect();
    json!({"role": "assistant", "content": blocks})
}

fn tool_results(ids: &[&str]) -> Value {
    let blocks: Vec<Value> = ids
        .iter()
        .map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": "ok"}))
        .collect();
    json!({"role": "user", "content": blocks})
}

#[tokio::test]
async fn the_anthropic_version_header_is_required() {
    let server = server(vec![Step::text("kept")]).await;
    let response = client()
        .post(format!("{}/messages", server.base_url()))
        .header("x-api-key", "sk-ant-test")
        .json(&messages_request(false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(
        body["error"]["message"],
        "anthropic-version: header is required"
    );
    // The body was still recorded, and the step is still there for a request with the header.
    assert_eq!(server.requests(), [messages_request(false)]);
    let ok: Value = post_messages(&server, &messages_request(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ok["content"][0]["text"], "kept");
}

#[tokio::test]
async fn a_body_must_be_a_json_object() {
    let server = server(vec![Step::text("never")]).await;
    let response = client()
        .post(format!("{}/messages", server.base_url()))
        .header("anthropic-version", common::ANTHROPIC_VERSION)
        .body("{\"model\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("parsing the body")
    );
    let message = rejected(&json!([1, 2])).await;
    assert!(message.contains("valid dictionary"), "{message}");
}

#[tokio::test]
async fn model_is_required() {
    let mut body = messages_request(false);
    body.as_object_mut().unwrap().remove("model");
    assert_eq!(rejected(&body).await, "model: Field required");
    body["model"] = json!("");
    assert!(rejected(&body).await.contains("at least 1 character"));
}

#[tokio::test]
async fn max_tokens_is_required_and_at_least_one() {
    let mut body = messages_request(false);
    body.as_object_mut().unwrap().remove("max_tokens");
    assert_eq!(rejected(&body).await, "max_tokens: Field required");
    body["max_tokens"] = json!(0);
    assert_eq!(
        rejected(&body).await,
        "max_tokens: Input should be greater than or equal to 1"
    );
    body["max_tokens"] = json!("many");
    assert_eq!(
        rejected(&body).await,
        "max_tokens: Input should be a valid integer"
    );
}

#[tokio::test]
async fn messages_must_not_be_empty() {
    assert_eq!(
        rejected(&with_messages(json!([]))).await,
        "messages: at least one message is required"
    );
    let mut body = messages_request(false);
    body.as_object_mut().unwrap().remove("messages");
    assert_eq!(rejected(&body).await, "messages: Field required");
}

#[tokio::test]
async fn roles_are_user_or_assistant_and_system_goes_top_level() {
    let system = json!({"role": "system", "content": "be brief"});
    let message = rejected(&with_messages(json!([system, user("hi")]))).await;
    assert!(
        message.contains("top-level `system` parameter"),
        "{message}"
    );

    let tool = json!({"role": "tool", "content": "x"});
    let message = rejected(&with_messages(json!([user("hi"), tool]))).await;
    assert_eq!(
        message,
        "messages.1.role: Input should be 'user' or 'assistant'"
    );
}

#[tokio::test]
async fn the_first_message_comes_from_the_user() {
    let message = rejected(&with_messages(json!([assistant("hello"), user("hi")]))).await;
    assert_eq!(
        message,
        "messages: first message must use the \"user\" role"
    );
}

#[tokio::test]
async fn roles_alternate_strictly() {
    let message = rejected(&with_messages(json!([user("a"), user("b")]))).await;
    assert!(
        message.contains("roles must alternate between \"user\" and \"assistant\""),
        "{message}"
    );
    assert!(message.contains("multiple \"user\" roles"), "{message}");
    let message = rejected(&with_messages(json!([
        user("a"),
        assistant("b"),
        assistant("c")
    ])))
    .await;
    assert!(
        message.contains("multiple \"assistant\" roles"),
        "{message}"
    );
}

#[tokio::test]
async fn text_must_not_be_empty() {
    let empty_block = json!({"role": "user", "content": [{"type": "text", "text": ""}]});
    assert_eq!(
        rejected(&with_messages(json!([empty_block]))).await,
        "messages: text content blocks must be non-empty"
    );
    let blank_block = json!({"role": "user", "content": [{"type": "text", "text": "  "}]});
    assert!(
        rejected(&with_messages(json!([blank_block])))
            .await
            .contains("non-whitespace")
    );
    let message = rejected(&with_messages(json!([user("")]))).await;
    assert!(message.starts_with("messages.0: all messages must have non-empty content"));
    // Only a final assistant turn may be empty (a prefill), and it may not end in whitespace.
    let server = server(vec![Step::text("ok")]).await;
    let prefill = with_messages(json!([user("hi"), assistant("")]));
    assert_eq!(post_messages(&server, &prefill).await.status(), 200);
    let message = rejected(&with_messages(json!([user("hi"), assistant("Sure, ")]))).await;
    assert!(message.contains("trailing whitespace"), "{message}");
}

#[tokio::test]
async fn a_tool_result_answers_a_tool_use_of_the_turn_just_before() {
    let message = rejected(&with_messages(json!([
        user("go"),
        tool_use(&["toolu_a"]),
        tool_results(&["toolu_b"]),
    ])))
    .await;
    assert!(
        message.starts_with(
            "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_b."
        ),
        "{message}"
    );
    // A result for a use two turns back does not count either.
    let message = rejected(&with_messages(json!([
        user("go"),
        tool_use(&["toolu_a"]),
        tool_results(&["toolu_a"]),
        assistant("done"),
        tool_results(&["toolu_a"]),
    ])))
    .await;
    assert!(message.contains("unexpected `tool_use_id`"), "{message}");
    assert!(message.starts_with("messages.4.content.0"), "{message}");
}

#[tokio::test]
async fn every_tool_use_is_answered_in_the_next_user_turn() {
    let message = rejected(&with_messages(json!([
        user("go"),
        tool_use(&["toolu_a", "toolu_b"]),
        tool_results(&["toolu_a"]),
    ])))
    .await;
    assert!(
        message.starts_with(
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_b."
        ),
        "{message}"
    );
    let message = rejected(&with_messages(json!([user("go"), tool_use(&["toolu_a"])]))).await;
    assert!(message.contains("toolu_a"), "{message}");
    let message = rejected(&with_messages(json!([
        user("go"),
        tool_use(&["toolu_a"]),
        user("never mind"),
    ])))
    .await;
    assert!(
        message.starts_with("messages.1: `tool_use` ids"),
        "{message}"
    );
}

#[tokio::test]
async fn tools_need_a_name_and_an_input_schema() {
    let mut body = messages_request(false);
    body["tools"] = json!([{"name": "f"}]);
    assert_eq!(
        rejected(&body).await,
        "tools.0.input_schema: Field required"
    );
    body["tools"] = json!([{"input_schema": {"type": "object"}}]);
    assert_eq!(rejected(&body).await, "tools.0.name: Field required");
    body["tools"] = json!([{"name": "read file", "input_schema": {"type": "object"}}]);
    assert!(rejected(&body).await.contains("should match pattern"));
    // The chat-completions shape is not an Anthropic tool.
    body["tools"] = json!([{"type": "function", "function": {"name": "f"}}]);
    assert!(rejected(&body).await.starts_with("tools.0.name"));
}

#[tokio::test]
async fn tool_choice_has_the_anthropic_shape() {
    let mut body = messages_request(false);
    body["tools"] = json!([{"name": "f", "input_schema": {"type": "object"}}]);
    body["tool_choice"] = json!("auto");
    assert!(
        rejected(&body)
            .await
            .starts_with("tool_choice: Input should be a valid dictionary")
    );
    body["tool_choice"] = json!({"type": "required"});
    assert!(
        rejected(&body)
            .await
            .contains("'auto', 'any', 'tool', 'none'")
    );
    body["tool_choice"] = json!({"type": "tool"});
    assert_eq!(
        rejected(&body).await,
        "tool_choice.tool.name: Field required"
    );
    body["tool_choice"] = json!({"type": "tool", "name": "g"});
    assert!(rejected(&body).await.contains("Tool 'g' not found"));
}

#[tokio::test]
async fn at_most_four_cache_control_breakpoints() {
    let cached =
        |text: &str| json!({"type": "text", "text": text, "cache_control": {"type": "ephemeral"}});
    let mut body = with_messages(json!([
        {"role": "user", "content": [cached("a"), cached("b"), cached("c")]},
    ]));
    body["system"] = json!([cached("system one"), cached("system two")]);
    assert_eq!(
        rejected(&body).await,
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    );
}

#[tokio::test]
async fn thinking_blocks_only_in_assistant_turns() {
    let thinking = json!({"type": "thinking", "thinking": "hmm", "signature": "sig"});
    let body = with_messages(json!([{"role": "user", "content": [thinking]}]));
    assert_eq!(
        rejected(&body).await,
        "messages.0.content.0: `thinking` blocks may only appear in `assistant` messages"
    );
}

#[tokio::test]
async fn a_full_tool_conversation_passes() {
    let server = server(vec![Step::text("done")]).await;
    let mut body = with_messages(json!([
        {"role": "user", "content": [
            {"type": "text", "text": "look up both", "cache_control": {"type": "ephemeral"}}
        ]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "two lookups", "signature": "c2ln"},
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_a", "name": "lookup", "input": {"q": "a"}},
            {"type": "tool_use", "id": "toolu_b", "name": "lookup", "input": {"q": "b"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": [{"type": "text", "text": "B"}]},
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A", "is_error": false},
        ]},
    ]));
    body["system"] = json!("be brief");
    body["tools"] = json!([{"name": "lookup", "description": "look up",
                            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]);
    body["tool_choice"] = json!({"type": "any", "disable_parallel_tool_use": false});
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    body["max_tokens"] = json!(2048);
    body["stream"] = json!(true);
    let response = post_messages(&server, &body).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
}

#[tokio::test]
async fn the_thinking_budget_fits_inside_max_tokens() {
    let mut body = messages_request(false);
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 512});
    assert!(
        rejected(&body)
            .await
            .contains("greater than or equal to 1024")
    );
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
    assert_eq!(
        rejected(&body).await,
        "`max_tokens` must be greater than `thinking.budget_tokens`"
    );
}
