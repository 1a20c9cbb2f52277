//! Request validation over real HTTP: what the real API rejects, the mock rejects with a 400
//! `invalid_request_error` naming the reason, without consuming a script step.

mod common;

use common::{post, post_raw, request, server};
use keel_mock::Step;
use serde_json::{Value, json};

/// Posts `body` and returns the 400 error object.
async fn rejected(body: &Value) -> Value {
    let server = server(vec![Step::text("never")]).await;
    let response = post(&server, body).await;
    assert_eq!(response.status(), 400, "{body}");
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    error["error"].clone()
}

fn with_messages(messages: Value) -> Value {
    json!({"model": "gpt-test", "messages": messages})
}

fn call(id: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}})
}

fn calls(ids: &[&str]) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": ids.iter().map(|id| call(id)).collect::<Vec<_>>()})
}

fn result(id: &str) -> Value {
    json!({"role": "tool", "tool_call_id": id, "content": "ok"})
}

fn user() -> Value {
    json!({"role": "user", "content": "hi"})
}

#[tokio::test]
async fn a_body_that_is_not_json_is_rejected() {
    let server = server(vec![Step::text("kept")]).await;
    let response = post_raw(&server, "{\"model\": ".into()).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("could not parse the JSON body")
    );
    // The step was not consumed.
    let ok: Value = post(&server, &request(false)).await.json().await.unwrap();
    assert_eq!(ok["choices"][0]["message"]["content"], "kept");
}

#[tokio::test]
async fn model_and_messages_are_required() {
    let error = rejected(&json!({"messages": [user()]})).await;
    assert_eq!(error["message"], "you must provide a model parameter");
    assert_eq!(error["param"], "model");

    let error = rejected(&json!({"model": "m"})).await;
    assert_eq!(error["message"], "Missing required parameter: 'messages'.");
    assert_eq!(error["param"], "messages");

    let error = rejected(&json!({"model": "m", "messages": []})).await;
    assert!(error["message"].as_str().unwrap().contains("empty array"));

    let error = rejected(&json!({"model": 4, "messages": [user()]})).await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("expected a string")
    );
}

#[tokio::test]
async fn a_tool_result_must_answer_an_earlier_call() {
    let error = rejected(&with_messages(json!([user(), result("call_x")]))).await;
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("messages[1].tool_call_id 'call_x' answers no tool call"),
        "{message}"
    );
    assert_eq!(error["param"], "messages[1].tool_call_id");

    let error = rejected(&with_messages(json!([
        user(),
        calls(&["a"]),
        result("b"),
        result("a")
    ])))
    .await;
    assert!(error["message"].as_str().unwrap().contains("'b'"));
}

#[tokio::test]
async fn every_call_needs_a_result_before_the_next_turn() {
    let error = rejected(&with_messages(json!([
        user(),
        calls(&["a", "b"]),
        result("a"),
        user()
    ])))
    .await;
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("did not have response messages: b"),
        "{message}"
    );
    assert!(
        message.contains("messages[1] is followed by messages[3] (user)"),
        "{message}"
    );

    let error = rejected(&with_messages(json!([user(), calls(&["a"])]))).await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("ends the conversation")
    );

    let error = rejected(&with_messages(json!([
        user(),
        calls(&["a"]),
        calls(&["b"]),
        result("a"),
        result("b")
    ])))
    .await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("response messages: a")
    );
}

#[tokio::test]
async fn late_and_duplicate_results_are_rejected() {
    let error = rejected(&with_messages(json!([
        user(),
        calls(&["a"]),
        result("a"),
        result("a")
    ])))
    .await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("second tool result")
    );

    let error = rejected(&with_messages(json!([
        user(),
        calls(&["a"]),
        result("a"),
        user(),
        calls(&["b"]),
        result("b"),
        result("a")
    ])))
    .await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("second tool result"), "{message}");
}

#[tokio::test]
async fn valid_tool_conversations_pass() {
    let server = server(vec![Step::text("done")]).await;
    let mut body = with_messages(json!([
        {"role": "system", "content": "be brief"},
        user(),
        calls(&["a", "b"]),
        result("b"),
        {"role": "system", "content": "a note between results"},
        result("a"),
        {"role": "assistant", "content": "checked", "tool_calls": [call("c")]},
        result("c"),
        user(),
    ]));
    body["tools"] =
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    body["tool_choice"] = json!("auto");
    body["max_tokens"] = json!(100);
    let response = post(&server, &body).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
}

#[tokio::test]
async fn tool_call_shapes_are_checked() {
    let mut object_arguments = calls(&["a"]);
    object_arguments["tool_calls"][0]["function"]["arguments"] = json!({"k": 1});
    let error = rejected(&with_messages(json!([
        user(),
        object_arguments,
        result("a")
    ])))
    .await;
    assert_eq!(
        error["message"],
        "Invalid type for 'messages[1].tool_calls[0].function.arguments': expected a string, but got an object instead."
    );

    let empty = json!({"role": "assistant", "content": "x", "tool_calls": []});
    let error = rejected(&with_messages(json!([user(), empty]))).await;
    assert_eq!(error["param"], "messages[1].tool_calls");

    let error = rejected(&with_messages(json!([
        user(),
        calls(&["a", "a"]),
        result("a")
    ])))
    .await;
    assert!(error["message"].as_str().unwrap().contains("appears twice"));

    let bare = json!({"role": "assistant"});
    let error = rejected(&with_messages(json!([user(), bare]))).await;
    assert_eq!(error["param"], "messages[1].content");

    let no_id = json!({"role": "tool", "content": "x"});
    let error = rejected(&with_messages(json!([user(), no_id]))).await;
    assert_eq!(error["param"], "messages[1].tool_call_id");
}

#[tokio::test]
async fn roles_and_options_are_checked() {
    let error = rejected(&with_messages(json!([{"role": "robot", "content": "x"}]))).await;
    assert_eq!(error["param"], "messages[0].role");

    let mut body = request(false);
    body["stream_options"] = json!({"include_usage": true});
    let error = rejected(&body).await;
    assert_eq!(error["param"], "stream_options");

    let mut body = request(false);
    body["tool_choice"] = json!("auto");
    let error = rejected(&body).await;
    assert_eq!(error["param"], "tool_choice");

    let mut body = request(false);
    body["tools"] = json!([{"type": "function", "function": {}}]);
    let error = rejected(&body).await;
    assert_eq!(error["param"], "tools[0].function.name");

    let mut body = request(false);
    body["max_tokens"] = json!(0);
    let error = rejected(&body).await;
    assert_eq!(error["param"], "max_tokens");

    let mut body = request(false);
    body["stream"] = json!("yes");
    let error = rejected(&body).await;
    assert_eq!(error["param"], "stream");
}
