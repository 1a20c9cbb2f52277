//! OpenAI Responses over real HTTP: whole `response` objects and `response.*` SSE streams with
//! sequence numbers, in the shape of the recordings in `fixtures/providers/resp_*`, and OpenAI
//! error bodies.

mod common;

use common::{collapsed, named_events, names, post_responses, responses_request, server};
use keel_core::ProviderErrorKind;
use keel_mock::{FinishReason, Step};
use serde_json::{Value, json};

/// The `delta`s of every event named `name`, joined.
fn joined(events: &[(String, Value)], name: &str, output_index: u64) -> String {
    events
        .iter()
        .filter(|(n, d)| n == name && d["output_index"] == output_index)
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn whole_text_answer_is_a_completed_response() {
    let server = server(vec![Step::text("4200 + 42 equals 4242.")]).await;
    let response = post_responses(&server, &responses_request(false)).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert!(body["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(body["object"], "response");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["error"], Value::Null);
    assert_eq!(body["incomplete_details"], Value::Null);
    assert_eq!(body["model"], "gpt-test");
    let output = body["output"].as_array().unwrap();
    assert_eq!(output.len(), 1);
    let message = &output[0];
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["status"], "completed");
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        message["content"],
        json!([{"type": "output_text", "annotations": [], "logprobs": [],
                "text": "4200 + 42 equals 4242."}])
    );
    let usage = &body["usage"];
    assert_eq!(usage["output_tokens"], 5, "22 characters / 4");
    let total = usage["input_tokens"].as_u64().unwrap() + 5;
    assert_eq!(usage["total_tokens"], total);
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(usage["output_tokens_details"]["reasoning_tokens"], 0);
}

#[tokio::test]
async fn whole_function_calls_are_output_items() {
    let server = server(vec![
        Step::tool_call("secret", json!({"password": "mellon"}))
            .with_tool_call("secret", json!({"password": "radiance"})),
    ])
    .await;
    let body: Value = post_responses(&server, &responses_request(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["status"], "completed");
    let output = body["output"].as_array().unwrap();
    assert_eq!(output.len(), 2, "no message item without text");
    for (i, (item, password)) in output.iter().zip(["mellon", "radiance"]).enumerate() {
        assert_eq!(item["type"], "function_call");
        assert_eq!(item["status"], "completed");
        assert_eq!(item["name"], "secret");
        assert_eq!(item["call_id"], format!("call_0_{i}"));
        assert!(item["id"].as_str().unwrap().starts_with("fc_"));
        let arguments: Value = serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(arguments, json!({"password": password}));
    }
}

#[tokio::test]
async fn reasoning_is_a_reasoning_item_with_a_summary() {
    let step = Step::text("3").with_reasoning("count the primes");
    let server = server(vec![step.clone(), step]).await;
    let body: Value = post_responses(&server, &responses_request(false))
        .await
        .json()
        .await
        .unwrap();
    let reasoning = &body["output"][0];
    assert_eq!(reasoning["type"], "reasoning");
    assert!(reasoning["id"].as_str().unwrap().starts_with("rs_"));
    assert_eq!(
        reasoning["summary"],
        json!([{"type": "summary_text", "text": "count the primes"}])
    );
    assert_eq!(body["output"][1]["type"], "message");
    assert_eq!(
        body["usage"]["output_tokens_details"]["reasoning_tokens"],
        4
    );

    let text = post_responses(&server, &responses_request(true))
        .await
        .text()
        .await
        .unwrap();
    let events = named_events(&text);
    assert_eq!(
        joined(&events, "response.reasoning_summary_text.delta", 0),
        "count the primes"
    );
    let done = events
        .iter()
        .find(|(n, _)| n == "response.reasoning_summary_text.done")
        .unwrap();
    assert_eq!(done.1["text"], "count the primes");
    assert_eq!(joined(&events, "response.output_text.delta", 1), "3");
}

#[tokio::test]
async fn streamed_text_numbers_every_event() {
    let server = server(vec![Step::text("4200 + 42 equals 4242.")]).await;
    let response = post_responses(&server, &responses_request(true)).await;
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    let text = response.text().await.unwrap();
    let events = named_events(&text);
    assert_eq!(
        collapsed(names(&events)),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(&data["type"], name);
        assert_eq!(data["sequence_number"], i, "numbered from 0, in order");
    }
    let created = &events[0].1["response"];
    assert_eq!(created["status"], "in_progress");
    assert_eq!(created["output"], json!([]));
    assert_eq!(created["usage"], Value::Null);
    assert_eq!(
        joined(&events, "response.output_text.delta", 0),
        "4200 + 42 equals 4242."
    );
    let done = events
        .iter()
        .find(|(n, _)| n == "response.output_text.done")
        .unwrap();
    assert_eq!(done.1["text"], "4200 + 42 equals 4242.");
    let completed = &events.last().unwrap().1["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["id"], created["id"], "one response id throughout");
    assert_eq!(
        completed["output"][0]["content"][0]["text"],
        "4200 + 42 equals 4242."
    );
    assert_eq!(completed["usage"]["output_tokens"], 5);
}

#[tokio::test]
async fn streamed_function_calls_split_their_arguments() {
    let server = server(vec![
        Step::tool_call("secret", json!({"password": "mellon"}))
            .with_tool_call("secret", json!({"password": "radiance"})),
    ])
    .await;
    let text = post_responses(&server, &responses_request(true))
        .await
        .text()
        .await
        .unwrap();
    let events = named_events(&text);
    assert_eq!(
        collapsed(names(&events)),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (index, password) in [(0u64, "mellon"), (1, "radiance")] {
        let added = events
            .iter()
            .find(|(n, d)| n == "response.output_item.added" && d["output_index"] == index)
            .unwrap();
        assert_eq!(added.1["item"]["status"], "in_progress");
        assert_eq!(added.1["item"]["arguments"], "");
        assert_eq!(added.1["item"]["call_id"], format!("call_0_{index}"));
        let deltas = events
            .iter()
            .filter(|(n, d)| {
                n == "response.function_call_arguments.delta" && d["output_index"] == index
            })
            .count();
        assert!(deltas > 1, "several fragments");
        let arguments = joined(&events, "response.function_call_arguments.delta", index);
        let parsed: Value = serde_json::from_str(&arguments).unwrap();
        assert_eq!(parsed, json!({"password": password}));
        let done = events
            .iter()
            .find(|(n, d)| {
                n == "response.function_call_arguments.done" && d["output_index"] == index
            })
            .unwrap();
        assert_eq!(done.1["arguments"], arguments);
        assert_eq!(done.1["item_id"], added.1["item"]["id"]);
    }
}

#[tokio::test]
async fn length_makes_an_incomplete_response() {
    let step = Step::text("Alabama Alaska").with_finish_reason(FinishReason::Length);
    let server = server(vec![step.clone(), step]).await;
    let body: Value = post_responses(&server, &responses_request(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["status"], "incomplete");
    assert_eq!(
        body["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(body["output"][0]["status"], "incomplete");

    let text = post_responses(&server, &responses_request(true))
        .await
        .text()
        .await
        .unwrap();
    let events = named_events(&text);
    let (name, last) = events.last().unwrap();
    assert_eq!(name, "response.incomplete");
    assert_eq!(last["response"]["status"], "incomplete");
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert!(!names(&events).contains(&"response.completed"));
}

#[tokio::test]
async fn usage_follows_the_step() {
    let mut step = Step::text("hi").with_usage(100, 20);
    step.usage.as_mut().unwrap().cache_read_tokens = Some(30);
    let server = server(vec![step]).await;
    let body: Value = post_responses(&server, &responses_request(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 30},
               "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
               "total_tokens": 120})
    );
}

#[tokio::test]
async fn the_response_echoes_request_parameters() {
    let server = server(vec![Step::text("hi")]).await;
    let mut request = responses_request(false);
    request["instructions"] = json!("be brief");
    request["max_output_tokens"] = json!(50);
    request["tools"] = json!([{"type": "function", "name": "f", "parameters": {"type": "object"}}]);
    request["tool_choice"] = json!("required");
    let body: Value = post_responses(&server, &request)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["instructions"], "be brief");
    assert_eq!(body["max_output_tokens"], 50);
    assert_eq!(body["tools"], request["tools"]);
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["temperature"], 1.0, "defaults fill the rest");
}

#[tokio::test]
async fn every_error_status_gets_an_openai_error_body() {
    let cases = [
        (
            Step::error(401),
            401,
            "invalid_request_error",
            json!("invalid_api_key"),
        ),
        (
            Step::error(429),
            429,
            "requests",
            json!("rate_limit_exceeded"),
        ),
        (Step::error(500), 500, "server_error", Value::Null),
        (Step::error(503), 503, "server_error", Value::Null),
        (
            Step::error(400).with_error_kind(ProviderErrorKind::ModelNotFound),
            400,
            "invalid_request_error",
            json!("model_not_found"),
        ),
        (
            Step::error(400).with_error_kind(ProviderErrorKind::ContextOverflow),
            400,
            "invalid_request_error",
            json!("context_length_exceeded"),
        ),
        (
            Step::error(429).with_error_kind(ProviderErrorKind::Billing),
            429,
            "insufficient_quota",
            json!("insufficient_quota"),
        ),
    ];
    let steps = cases.iter().map(|(step, ..)| step.clone()).collect();
    let server = server(steps).await;
    for (i, (_, status, error_type, code)) in cases.iter().enumerate() {
        let response = post_responses(&server, &responses_request(i % 2 == 0)).await;
        assert_eq!(response.status(), *status, "case {i}");
        let body: Value = response.json().await.unwrap();
        let error = &body["error"];
        // Sorted: the order of a JSON object's keys is serde_json's (`preserve_order`, which a
        // dependency may turn on for the whole workspace), not the body's.
        let mut fields: Vec<_> = error.as_object().unwrap().keys().cloned().collect();
        fields.sort();
        assert_eq!(fields, ["code", "message", "param", "type"]);
        assert_eq!(error["type"], *error_type, "case {i}");
        assert_eq!(error["code"], *code, "case {i}");
    }
}

#[tokio::test]
async fn an_unknown_model_is_named_like_the_recording() {
    let server = server(vec![
        Step::error(400).with_error_kind(ProviderErrorKind::ModelNotFound),
    ])
    .await;
    let mut request = responses_request(false);
    request["model"] = json!("this-model-does-not-exist-12345");
    let body: Value = post_responses(&server, &request)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["error"]["message"],
        "The requested model 'this-model-does-not-exist-12345' does not exist."
    );
    assert_eq!(body["error"]["param"], "model");
}
