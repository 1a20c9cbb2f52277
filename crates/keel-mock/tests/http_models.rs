//! Per-model step lists over real HTTP: requests for a model with steps of its own consume
//! those, on every API, however they interleave with the other requests; each list runs out on
//! its own; the request log keeps every model's requests in arrival order.

mod common;

use common::{
    chunks, messages_request, named_events, names, post_to, request, responses_request,
    streamed_text,
};
use keel_core::ProviderErrorKind;
use keel_mock::{MockServer, Script, Step};
use serde_json::{Value, json};

/// The three APIs, by path under `/v1`.
const APIS: [&str; 3] = ["chat/completions", "messages", "responses"];

/// The model the scripts give steps of their own.
const SUMMARY: &str = "summary-model";

/// A minimal request of `api` asking for `model`.
fn request_for(api: &str, model: &str, stream: bool) -> Value {
    let mut body = match api {
        "messages" => messages_request(stream),
        "responses" => responses_request(stream),
        _ => request(stream),
    };
    body["model"] = json!(model);
    body
}

/// The text of a whole answer of `api`.
fn text_of(api: &str, body: &Value) -> Value {
    let pointer = match api {
        "messages" => "/content/0/text",
        "responses" => "/output/0/content/0/text",
        _ => "/choices/0/message/content",
    };
    body.pointer(pointer).cloned().unwrap_or(Value::Null)
}

/// The error message of an error body of `api` (all three put it at `error.message`).
fn error_message(body: &Value) -> Value {
    body["error"]["message"].clone()
}

async fn start(script: Script) -> MockServer {
    MockServer::start_local(script).await.unwrap()
}

/// POSTs a whole request of `api` for `model`: the status and the JSON body.
async fn ask(server: &MockServer, api: &str, model: &str) -> (u16, Value) {
    let response = post_to(server, api, &request_for(api, model, false)).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn agent_and_summary() -> Script {
    Script::new(vec![Step::text("agent one"), Step::text("agent two")])
        .with_model(SUMMARY, vec![Step::text("summary one")])
}

#[tokio::test]
async fn each_api_routes_requests_by_model() {
    for api in APIS {
        let server = start(agent_and_summary()).await;
        let agent_model = if api == "messages" {
            "claude-test"
        } else {
            "gpt-test"
        };
        let mut texts = Vec::new();
        for model in [agent_model, SUMMARY, agent_model] {
            let (status, body) = ask(&server, api, model).await;
            assert_eq!(status, 200, "{api} {model}: {body}");
            texts.push(text_of(api, &body));
            assert_eq!(
                body["model"], model,
                "{api}: the answer names the request's model"
            );
        }
        assert_eq!(
            texts,
            [json!("agent one"), json!("summary one"), json!("agent two")],
            "{api}"
        );
        let models: Vec<Value> = server
            .requests()
            .iter()
            .map(|r| r["model"].clone())
            .collect();
        assert_eq!(
            models,
            [json!(agent_model), json!(SUMMARY), json!(agent_model)]
        );
    }
}

#[tokio::test]
async fn interleaved_requests_across_apis_consume_their_own_lists() {
    let server = start(
        Script::new(vec![
            Step::tool_call("read_file", json!({"path": "a.txt"})),
            Step::text("agent done"),
        ])
        .with_model(
            SUMMARY,
            vec![Step::text("first summary"), Step::text("second summary")],
        ),
    )
    .await;
    // Agent (chat), summary (messages), summary (responses), agent (messages).
    let (_, first) = ask(&server, "chat/completions", "gpt-test").await;
    assert_eq!(
        first["choices"][0]["message"]["tool_calls"][0]["id"],
        "call_0_0"
    );
    let (_, summary) = ask(&server, "messages", SUMMARY).await;
    assert_eq!(text_of("messages", &summary), "first summary");
    let (_, summary) = ask(&server, "responses", SUMMARY).await;
    assert_eq!(text_of("responses", &summary), "second summary");
    let (_, last) = ask(&server, "messages", "claude-test").await;
    assert_eq!(text_of("messages", &last), "agent done");

    // One log, every model, in arrival order; also over HTTP.
    let recorded = server.requests();
    assert_eq!(
        recorded,
        [
            request_for("chat/completions", "gpt-test", false),
            request_for("messages", SUMMARY, false),
            request_for("responses", SUMMARY, false),
            request_for("messages", "claude-test", false),
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
async fn a_model_list_runs_out_on_its_own_on_every_api() {
    for api in APIS {
        let server = start(
            Script::new(vec![Step::text("agent").repeat_forever()])
                .with_model(SUMMARY, vec![Step::text("summary")]),
        )
        .await;
        let (status, _) = ask(&server, api, SUMMARY).await;
        assert_eq!(status, 200);
        let (status, body) = ask(&server, api, SUMMARY).await;
        assert_eq!(status, 500, "{api}");
        assert_eq!(
            error_message(&body),
            "keel-mock: script for model `summary-model` exhausted after 1 responses",
            "{api}"
        );
        // The other requests still take the top-level steps, matched exactly by model.
        for model in ["gpt-test", "Summary-Model", "summary-model-2"] {
            let (status, body) = ask(&server, api, model).await;
            assert_eq!(status, 200, "{api} {model}");
            assert_eq!(text_of(api, &body), "agent");
        }
    }
}

#[tokio::test]
async fn a_script_of_models_only_serves_them_and_nothing_else() {
    let script = Script::from_json(
        r#"{"models": {"summary-model": {"steps": [{"text": "summary", "times": 2}]}}}"#,
    )
    .unwrap();
    let server = start(script).await;
    for api in APIS {
        let (status, body) = ask(&server, api, "gpt-test").await;
        assert_eq!(status, 500, "{api}");
        assert_eq!(
            error_message(&body),
            "keel-mock: script exhausted after 0 responses"
        );
    }
    let (_, chat) = ask(&server, "chat/completions", SUMMARY).await;
    let (_, messages) = ask(&server, "messages", SUMMARY).await;
    assert_eq!(text_of("chat/completions", &chat), "summary");
    assert_eq!(text_of("messages", &messages), "summary");
    let (status, _) = ask(&server, "responses", SUMMARY).await;
    assert_eq!(status, 500);
}

#[tokio::test]
async fn model_lists_inject_faults_and_invalid_requests_take_no_step() {
    let server = start(Script::new(vec![Step::text("agent")]).with_model(
        SUMMARY,
        vec![
            Step::error(529),
            Step::text("one two three four").fail_stream_after(3, ProviderErrorKind::Overloaded),
            Step::text("streamed summary"),
        ],
    ))
    .await;
    // Rejected for its missing max_tokens: answered 400, no step taken.
    let mut invalid = request_for("messages", SUMMARY, false);
    invalid.as_object_mut().unwrap().remove("max_tokens");
    assert_eq!(post_to(&server, "messages", &invalid).await.status(), 400);

    let (status, body) = ask(&server, "messages", SUMMARY).await;
    assert_eq!(status, 529);
    assert_eq!(body["error"]["type"], "overloaded_error");

    let response = post_to(&server, "messages", &request_for("messages", SUMMARY, true)).await;
    let events = named_events(&response.text().await.unwrap());
    assert_eq!(names(&events).last(), Some(&"error"));

    let response = post_to(
        &server,
        "chat/completions",
        &request_for("chat/completions", SUMMARY, true),
    )
    .await;
    let streamed = chunks(&response.text().await.unwrap());
    assert_eq!(streamed_text(&streamed), "streamed summary");

    let (_, agent) = ask(&server, "chat/completions", "gpt-test").await;
    assert_eq!(text_of("chat/completions", &agent), "agent");
    assert_eq!(
        server.requests().len(),
        5,
        "the invalid request is recorded too"
    );
}
