//! Scripted answers over real HTTP: whole bodies and SSE streams in OpenAI's shape.

mod common;

use std::collections::BTreeSet;

use common::{chunks, data_events, post, request, server, streamed_text};
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

#[tokio::test]
async fn whole_text_answer_is_a_chat_completion() {
    let server = server(vec![Step::text("Hello there")]).await;
    let response = post(&server, &request(false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let body: Value = response.json().await.unwrap();
    // The top-level keys of the recorded oai_chat_text.json.
    let expected = [
        "id",
        "object",
        "created",
        "model",
        "choices",
        "usage",
        "service_tier",
        "system_fingerprint",
    ];
    assert_eq!(keys(&body), expected.into_iter().collect());
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "gpt-test");
    let choice = &body["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(choice["logprobs"], Value::Null);
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], "Hello there");
    assert_eq!(choice["message"]["refusal"], Value::Null);
    let usage = &body["usage"];
    let total =
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap();
    assert_eq!(usage["total_tokens"].as_u64(), Some(total));
    assert_eq!(usage["completion_tokens"], 2, "11 chars / 4");
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
}

#[tokio::test]
async fn whole_tool_calls_have_null_content_and_string_arguments() {
    let server = server(vec![
        Step::tool_call("lookup", json!({"country": "Crumpet"}))
            .with_tool_call("lookup", json!("{\"country\": oops")),
    ])
    .await;
    let body: Value = post(&server, &request(false)).await.json().await.unwrap();
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["id"], "call_0_0");
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "lookup");
    assert_eq!(
        calls[0]["function"]["arguments"],
        r#"{"country":"Crumpet"}"#
    );
    assert_eq!(calls[1]["id"], "call_0_1");
    assert_eq!(calls[1]["function"]["arguments"], "{\"country\": oops");
}

#[tokio::test]
async fn reasoning_model_usage_and_finish_follow_the_step() {
    let mut step = Step::text("partial")
        .with_reasoning("thinking hard")
        .with_model("gpt-4o-2024-08-06")
        .with_finish_reason(FinishReason::Length)
        .with_usage(11, 22);
    step.usage.as_mut().unwrap().cache_read_tokens = Some(5);
    let server = server(vec![step]).await;
    let body: Value = post(&server, &request(false)).await.json().await.unwrap();
    assert_eq!(body["model"], "gpt-4o-2024-08-06");
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(choice["message"]["reasoning_content"], "thinking hard");
    assert_eq!(body["usage"]["prompt_tokens"], 11);
    assert_eq!(body["usage"]["completion_tokens"], 22);
    assert_eq!(body["usage"]["total_tokens"], 33);
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 5);
}

#[tokio::test]
async fn streamed_text_is_openai_shaped() {
    let server = server(vec![Step::text("The answer is 42.")]).await;
    let response = post(&server, &request(true)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream; charset=utf-8"
    );
    let body = response.text().await.unwrap();
    let events = data_events(&body);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks = chunks(&body);
    let id = chunks[0]["id"].as_str().unwrap();
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["id"], id, "one id for the whole stream");
        assert_eq!(chunk["model"], "gpt-test");
        assert!(chunk.get("usage").is_some(), "usage is null until the end");
    }
    let opening = &chunks[0]["choices"][0];
    assert_eq!(opening["delta"]["role"], "assistant");
    assert_eq!(opening["delta"]["content"], "");
    assert_eq!(opening["finish_reason"], Value::Null);
    assert_eq!(streamed_text(&chunks), "The answer is 42.");
    let text_chunks = chunks[1..]
        .iter()
        .filter(|c| c.pointer("/choices/0/delta/content").is_some())
        .count();
    assert_eq!(text_chunks, 4, "split by words");

    let n = chunks.len();
    let finish = &chunks[n - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["choices"][0]["delta"], json!({}));
    assert_eq!(finish["usage"], Value::Null);
    let usage = &chunks[n - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 4);
}

#[tokio::test]
async fn stream_without_include_usage_has_no_usage_at_all() {
    let server = server(vec![Step::text("hi")]).await;
    let mut body = request(false);
    body["stream"] = json!(true);
    let text = post(&server, &body).await.text().await.unwrap();
    let chunks = chunks(&text);
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
    assert_eq!(data_events(&text).last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn streamed_tool_calls_announce_then_split_arguments() {
    let server = server(vec![
        Step::tool_call("secret_retrieval_tool", json!({"password": "mellon"}))
            .with_tool_call("secret_retrieval_tool", json!({"password": "radiance"}))
            .with_reasoning("two calls"),
    ])
    .await;
    let body = post(&server, &request(true)).await.text().await.unwrap();
    let chunks = chunks(&body);
    assert_eq!(chunks[0]["choices"][0]["delta"]["content"], Value::Null);
    assert_eq!(chunks[1]["choices"][0]["delta"]["reasoning_content"], "two");

    let mut arguments = [String::new(), String::new()];
    let mut announced = Vec::new();
    let mut fragments = [0, 0];
    for chunk in &chunks {
        let Some(calls) = chunk.pointer("/choices/0/delta/tool_calls") else {
            continue;
        };
        let call = &calls[0];
        let index = call["index"].as_u64().unwrap() as usize;
        if let Some(id) = call.get("id") {
            // An announcement: id, type, name and empty arguments, as OpenAI sends it.
            assert_eq!(call["type"], "function");
            assert_eq!(call["function"]["name"], "secret_retrieval_tool");
            assert_eq!(call["function"]["arguments"], "");
            announced.push((index, id.as_str().unwrap().to_string()));
        } else {
            assert!(call["function"].get("name").is_none());
            arguments[index] += call["function"]["arguments"].as_str().unwrap();
            fragments[index] += 1;
        }
    }
    assert_eq!(
        announced,
        [(0, "call_0_0".to_string()), (1, "call_0_1".to_string())]
    );
    assert_eq!(arguments[0], r#"{"password":"mellon"}"#);
    assert_eq!(arguments[1], r#"{"password":"radiance"}"#);
    assert!(fragments.iter().all(|&n| n > 1), "several fragments each");
    let n = chunks.len();
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn times_and_forever_repeat_steps_and_exhaustion_is_a_500() {
    let server = server(vec![Step::text("twice").repeat(2), Step::text("once")]).await;
    let mut texts = Vec::new();
    for _ in 0..3 {
        let body: Value = post(&server, &request(false)).await.json().await.unwrap();
        texts.push(body["choices"][0]["message"]["content"].clone());
    }
    assert_eq!(texts, [json!("twice"), json!("twice"), json!("once")]);
    let exhausted = post(&server, &request(false)).await;
    assert_eq!(exhausted.status(), 500);
    let body: Value = exhausted.json().await.unwrap();
    assert_eq!(
        body["error"]["message"],
        "keel-mock: script exhausted after 3 responses"
    );
    assert_eq!(body["error"]["type"], "server_error");

    let forever = common::server(vec![Step::text("again").repeat_forever()]).await;
    for _ in 0..5 {
        let response = post(&forever, &request(true)).await;
        assert_eq!(response.status(), 200);
    }
}

#[tokio::test]
async fn requests_are_recorded_in_order() {
    let server = server(vec![Step::text("a"), Step::text("b")]).await;
    let mut first = request(false);
    first["model"] = json!("first-model");
    post(&server, &first).await;
    post(&server, &request(true)).await;
    common::post_raw(&server, "not json".into()).await;

    let recorded = server.requests();
    assert_eq!(recorded.len(), 3);
    assert_eq!(recorded[0], first);
    assert_eq!(recorded[1]["stream"], true);
    assert_eq!(recorded[2], json!("not json"));

    let listed: Value = common::get(format!("{}/_mock/requests", server.base_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed, Value::Array(recorded));
}

#[tokio::test]
async fn base_url_unknown_routes_and_shutdown() {
    let server = server(vec![]).await;
    assert_eq!(server.base_url(), format!("http://{}/v1", server.addr()));
    let response = common::get(format!("{}/models", server.base_url()))
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["message"], "Invalid URL (GET /v1/models)");

    let addr = server.addr();
    server.shutdown().await;
    let refused = common::get(format!("http://{addr}/v1/_mock/requests")).await;
    assert!(refused.is_err(), "the server is gone after shutdown");
}

#[tokio::test]
async fn serve_forever_reports_its_address() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let script = keel_mock::Script::new(vec![Step::text("hi")]);
    let bind = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let task = tokio::spawn(keel_mock::serve_forever(bind, script, move |addr| {
        let _ = tx.send(addr);
    }));
    let addr = rx.await.unwrap();
    let body: Value = common::client()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&request(false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "hi");
    task.abort();
}
