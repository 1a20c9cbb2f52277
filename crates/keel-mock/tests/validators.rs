//! The public request validators as pure functions: they accept what the mock server accepts
//! and reject what it rejects, with the same message its 400 answer carries.

mod common;

use common::{messages_request, post, post_messages, post_responses, request, responses_request};
use keel_mock::{Step, validate};
use serde_json::{Value, json};

#[test]
fn chat_completions_requests() {
    assert_eq!(validate::chat_completions(&request(false)), Ok(()));
    assert_eq!(validate::chat_completions(&request(true)), Ok(()));
    let orphan = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call_x", "content": "ok"},
    ]});
    let problem = validate::chat_completions(&orphan).unwrap_err();
    assert!(problem.contains("answers no tool call"), "{problem}");
    assert_eq!(
        validate::chat_completions(&json!({"messages": []})),
        Err("you must provide a model parameter".to_string())
    );
}

#[test]
fn messages_requests() {
    assert_eq!(validate::messages(&messages_request(false)), Ok(()));
    let unanswered = json!({"model": "c", "max_tokens": 10, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
        {"role": "user", "content": "well?"},
    ]});
    let problem = validate::messages(&unanswered).unwrap_err();
    assert!(
        problem.contains("`tool_use` ids were found without `tool_result`"),
        "{problem}"
    );
    assert_eq!(
        validate::messages(&json!({"model": "c", "messages": []})),
        Err("max_tokens: Field required".to_string())
    );
}

#[test]
fn responses_requests() {
    assert_eq!(validate::responses(&responses_request(false)), Ok(()));
    let unanswered = json!({"model": "m", "input": [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
    ]});
    assert_eq!(
        validate::responses(&unanswered),
        Err("No tool output found for function call call_1.".to_string())
    );
    assert!(validate::responses(&json!("hi")).is_err());
}

#[test]
fn a_request_valid_for_one_api_is_not_for_another() {
    assert!(
        validate::messages(&request(false)).is_err(),
        "no max_tokens"
    );
    assert!(validate::responses(&request(false)).is_err(), "no input");
    assert!(validate::chat_completions(&responses_request(false)).is_err());
}

#[tokio::test]
async fn the_validators_and_the_server_give_the_same_message() {
    let server = common::server(vec![Step::text("never")]).await;
    let chat = json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]});
    let messages = json!({"model": "c", "max_tokens": 10, "messages": [
        {"role": "assistant", "content": "x"}
    ]});
    let responses = json!({"model": "m", "input": [
        {"type": "function_call_output", "call_id": "call_9", "output": "x"}
    ]});

    let body: Value = post(&server, &chat).await.json().await.unwrap();
    assert_eq!(
        Err(body["error"]["message"].as_str().unwrap().to_string()),
        validate::chat_completions(&chat)
    );
    let body: Value = post_messages(&server, &messages)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        Err(body["error"]["message"].as_str().unwrap().to_string()),
        validate::messages(&messages)
    );
    let body: Value = post_responses(&server, &responses)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        Err(body["error"]["message"].as_str().unwrap().to_string()),
        validate::responses(&responses)
    );
}
