//! OpenAI Responses request validation over real HTTP: what the real API rejects, the mock
//! rejects with a 400 `invalid_request_error` naming the parameter, without consuming a step.

mod common;

use common::{client, post_responses, responses_request, server};
use keel_mock::Step;
use serde_json::{Value, json};

/// Posts `body` and returns the 400's error object.
async fn rejected(body: &Value) -> Value {
    let server = server(vec![Step::text("never")]).await;
    let response = post_responses(&server, body).await;
    assert_eq!(response.status(), 400, "{body}");
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    error["error"].clone()
}

fn with_input(input: Value) -> Value {
    json!({"model": "gpt-test", "input": input})
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn call(id: &str) -> Value {
    json!({"type": "function_call", "call_id": id, "name": "f", "arguments": "{}"})
}

fn output(id: &str) -> Value {
    json!({"type": "function_call_output", "call_id": id, "output": "ok"})
}

#[tokio::test]
async fn a_body_must_be_json() {
    let server = server(vec![Step::text("kept")]).await;
    let response = client()
        .post(format!("{}/responses", server.base_url()))
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
            .contains("could not parse the JSON body")
    );
    let ok: Value = post_responses(&server, &responses_request(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        ok["output"][0]["content"][0]["text"], "kept",
        "no step consumed"
    );
}

#[tokio::test]
async fn model_is_required() {
    let error = rejected(&json!({"input": "hi"})).await;
    assert_eq!(error["message"], "Missing required parameter: 'model'.");
    assert_eq!(error["param"], "model");
}

#[tokio::test]
async fn input_is_a_string_or_a_non_empty_array() {
    let error = rejected(&json!({"model": "m"})).await;
    assert_eq!(error["param"], "input");
    let error = rejected(&with_input(json!([]))).await;
    assert!(error["message"].as_str().unwrap().contains("empty array"));
    let error = rejected(&with_input(json!(7))).await;
    assert_eq!(
        error["message"],
        "Invalid type for 'input': expected a string or an array, but got a number instead."
    );
}

#[tokio::test]
async fn message_items_have_a_role_and_parts_it_allows() {
    let error = rejected(&with_input(json!([{"role": "robot", "content": "x"}]))).await;
    assert_eq!(error["param"], "input[0].role");

    // Chat-completions habits: a `text` part, or `input_text` from the assistant.
    let text_part = json!({"role": "user", "content": [{"type": "text", "text": "hi"}]});
    let error = rejected(&with_input(json!([text_part]))).await;
    assert_eq!(error["param"], "input[0].content[0].type");
    assert!(error["message"].as_str().unwrap().contains("'input_text'"));
    let echoed = json!({"role": "assistant", "content": [{"type": "input_text", "text": "hi"}]});
    let error = rejected(&with_input(json!([user("hi"), echoed]))).await;
    assert_eq!(
        error["message"],
        "Invalid value: 'input_text'. Supported values are: 'output_text', 'refusal'."
    );
    let no_content = json!({"role": "user"});
    let error = rejected(&with_input(json!([no_content]))).await;
    assert_eq!(error["param"], "input[0].content");
}

#[tokio::test]
async fn function_call_items_are_complete_and_item_types_known() {
    let mut bare = call("call_a");
    bare.as_object_mut().unwrap().remove("call_id");
    let error = rejected(&with_input(json!([user("go"), bare]))).await;
    assert_eq!(
        error["message"],
        "Missing required parameter: 'input[1].call_id'."
    );
    let mut object_arguments = call("call_a");
    object_arguments["arguments"] = json!({});
    let error = rejected(&with_input(json!([
        user("go"),
        object_arguments,
        output("call_a")
    ])))
    .await;
    assert_eq!(error["param"], "input[1].arguments");
    let error = rejected(&with_input(json!([{"type": "tool_result"}]))).await;
    assert_eq!(error["param"], "input[0].type");
}

#[tokio::test]
async fn a_function_call_output_answers_an_earlier_call() {
    let error = rejected(&with_input(json!([user("go"), output("call_x")]))).await;
    assert_eq!(
        error["message"],
        "No tool call found for function call output with call_id call_x."
    );
    let error = rejected(&with_input(json!([
        user("go"),
        output("call_a"),
        call("call_a"),
    ])))
    .await;
    assert!(error["message"].as_str().unwrap().contains("call_a"));
    // When the calls live in the previous response, outputs alone are fine.
    let server = server(vec![Step::text("ok")]).await;
    let mut chained = with_input(json!([output("call_x")]));
    chained["previous_response_id"] = json!("resp_123");
    assert_eq!(post_responses(&server, &chained).await.status(), 200);
}

#[tokio::test]
async fn every_function_call_is_answered_before_the_next_user_message() {
    let error = rejected(&with_input(json!([
        user("go"),
        call("call_a"),
        call("call_b"),
        output("call_a"),
        user("and?"),
    ])))
    .await;
    assert_eq!(
        error["message"],
        "No tool output found for function call call_b."
    );
    let error = rejected(&with_input(json!([user("go"), call("call_a")]))).await;
    assert_eq!(
        error["message"],
        "No tool output found for function call call_a."
    );
}

#[tokio::test]
async fn tools_are_flat_function_definitions() {
    let mut body = responses_request(false);
    // The chat-completions shape nests the function; the Responses API does not.
    body["tools"] = json!([{"type": "function", "function": {"name": "f", "parameters": {}}}]);
    let error = rejected(&body).await;
    assert_eq!(
        error["message"],
        "Missing required parameter: 'tools[0].name'."
    );
    body["tools"] = json!([{"type": "function", "name": "f"}]);
    assert_eq!(rejected(&body).await["param"], "tools[0].parameters");
    body["tools"] = json!([{"type": "gadget"}]);
    assert_eq!(rejected(&body).await["param"], "tools[0].type");
}

#[tokio::test]
async fn tool_choice_has_the_responses_shape() {
    let mut body = responses_request(false);
    body["tools"] = json!([{"type": "function", "name": "f", "parameters": {"type": "object"}}]);
    body["tool_choice"] = json!("any");
    assert!(
        rejected(&body).await["message"]
            .as_str()
            .unwrap()
            .contains("'none', 'auto', and 'required'")
    );
    body["tool_choice"] = json!({"type": "function", "function": {"name": "f"}});
    assert_eq!(
        rejected(&body).await["message"],
        "Missing required parameter: 'tool_choice.name'."
    );
    body["tool_choice"] = json!({"type": "function", "name": "g"});
    assert_eq!(rejected(&body).await["param"], "tool_choice");
    let mut without_tools = responses_request(false);
    without_tools["tool_choice"] = json!("required");
    assert_eq!(rejected(&without_tools).await["param"], "tool_choice");
}

#[tokio::test]
async fn max_output_tokens_is_at_least_sixteen() {
    let mut body = responses_request(false);
    body["max_output_tokens"] = json!(5);
    let error = rejected(&body).await;
    assert_eq!(error["param"], "max_output_tokens");
    assert!(error["message"].as_str().unwrap().contains(">= 16"));
}

#[tokio::test]
async fn a_full_tool_conversation_passes() {
    let server = server(vec![Step::text("done")]).await;
    let body = json!({
        "model": "gpt-test",
        "instructions": "be brief",
        "input": [
            {"role": "developer", "content": "use tools"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Looking."}]},
            call("call_a"),
            call("call_b"),
            output("call_b"),
            output("call_a"),
            user("thanks"),
        ],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": false}],
        "tool_choice": {"type": "function", "name": "f"},
        "max_output_tokens": 100,
        "stream": true,
    });
    let response = post_responses(&server, &body).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
}
