//! The HTTP surface, hostile input first, on `MemoryStore` through the router itself
//! (`tower::ServiceExt::oneshot`): every refusal is JSON with the right status, ids cannot walk
//! paths, another user's things are invisible however they are named, and nothing is stored
//! half.

mod common;

use keel_platform::{ConversationStore, PlatformStore};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use chrono::Utc;
use http_body_util::BodyExt;
use keel_core::Store;
use keel_mock::{Script, ScriptedProvider, Step};
use keel_server::engine::EngineOptions;
use keel_server::keys::new_key;
use keel_server::{AppState, router};
use keel_store::MemoryStore;
use serde_json::{Value, json};
use tower::ServiceExt;

struct Api {
    state: AppState,
    store: Arc<MemoryStore>,
}

impl Api {
    async fn new() -> Api {
        Api::with(Script::new(vec![Step::text("ok")]).with_per_turn(), None).await
    }

    /// An API whose model follows `script`, with `tool` besides the loop's own.
    async fn with(script: Script, tool: Option<Arc<dyn keel_core::Tool>>) -> Api {
        Api::with_provider(Arc::new(ScriptedProvider::new(script)), tool).await
    }

    /// An API whose model is `provider`, with `tool` besides the loop's own.
    async fn with_provider(
        provider: Arc<dyn keel_core::Provider>,
        tool: Option<Arc<dyn keel_core::Tool>>,
    ) -> Api {
        let (state, store) = common::state_with(EngineOptions::default(), |builder| {
            let builder = builder.provider(provider).model("m");
            match tool {
                Some(tool) => builder.tool(tool),
                None => builder,
            }
        })
        .await;
        Api { state, store }
    }

    async fn key(&self, user: Option<&str>, admin: bool) -> String {
        let made = new_key(user.map(str::to_string), admin, Vec::new(), Utc::now()).unwrap();
        self.store.save_api_key(&made.record).await.unwrap();
        made.key
    }

    async fn call(&self, request: Request<Body>) -> (StatusCode, Value) {
        let response = router(self.state.clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn get(&self, key: &str, path: &str) -> (StatusCode, Value) {
        self.call(
            Request::get(path)
                .header("authorization", format!("Bearer {key}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
    }

    async fn post(&self, key: &str, path: &str, body: &str) -> (StatusCode, Value) {
        self.call(
            Request::post(path)
                .header("authorization", format!("Bearer {key}"))
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .unwrap(),
        )
        .await
    }
}

fn code(body: &Value) -> &str {
    body["error"]["code"]
        .as_str()
        .unwrap_or("<not a JSON error>")
}

#[tokio::test]
async fn refusals_are_json_with_the_right_status() {
    let api = Api::new().await;
    let key = api.key(Some("ann"), false).await;
    for header in [
        "",
        "Bearer",
        "Bearer ",
        "bearer x",
        "Basic abc",
        "Bearer keel_nope",
    ] {
        let mut request = Request::get("/v1/conversations");
        if !header.is_empty() {
            request = request.header("authorization", header);
        }
        let (status, body) = api.call(request.body(Body::empty()).unwrap()).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::UNAUTHORIZED, "unauthorized"),
            "{header:?}"
        );
    }
    let (status, body) = api.get(&key, "/v1/nothing/here").await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (status, body) = api.post(&key, "/v1/runs", "{}").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::METHOD_NOT_ALLOWED, "invalid_request")
    );
    for query in [
        "limit=0",
        "limit=1000",
        "limit=x",
        "colour=red",
        "state=sleeping",
    ] {
        let (status, body) = api.get(&key, &format!("/v1/runs?{query}")).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{query}"
        );
    }
    let (status, body) = api
        .call(
            Request::post("/v1/conversations")
                .header("authorization", format!("Bearer {key}"))
                .header("content-type", "text/plain")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await;
    assert_eq!(code(&body), "invalid_request", "{status}");
    let (status, body) = api
        .post(&key, "/v1/conversations", r#"{"lane_policy": "drop"}"#)
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "invalid_request")
    );
    let (status, _) = api.get(&key, "/healthz").await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api.get("", "/readyz").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn ids_do_not_walk_paths_and_others_things_are_invisible() {
    let api = Api::new().await;
    let ann = api.key(Some("ann"), false).await;
    let bob = api.key(Some("bob"), false).await;
    let (status, conversation) = api.post(&ann, "/v1/conversations", "{}").await;
    assert_eq!(status, StatusCode::CREATED);
    let id = conversation["id"].as_str().unwrap();
    assert_eq!(conversation["owner"], "ann");
    for path in [
        "/v1/conversations/..%2F..%2Fetc%2Fpasswd".to_string(),
        "/v1/conversations/%00".to_string(),
        format!("/v1/conversations/{id}%20"),
        format!("/v1/runs/{id}"),
    ] {
        let (status, body) = api.get(&ann, &path).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::NOT_FOUND, "not_found"),
            "{path}"
        );
    }
    let (status, accepted) = api
        .post(
            &ann,
            &format!("/v1/conversations/{id}/messages?wait=true"),
            r#"{"text": "hi"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{accepted}");
    let run_id = accepted["run_id"].as_str().unwrap();
    // Bob names Ann's things every way the API takes an id: all invisible.
    for path in [
        format!("/v1/conversations/{id}"),
        format!("/v1/conversations/{id}/messages"),
        format!("/v1/runs/{run_id}"),
        format!("/v1/runs/{run_id}/report"),
        format!("/v1/runs?conversation={id}"),
    ] {
        let (status, body) = api.get(&bob, &path).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::NOT_FOUND, "not_found"),
            "{path}"
        );
    }
    let (_, listed) = api
        .get(&bob, &format!("/v1/conversations?cursor={id}"))
        .await;
    assert_eq!(
        listed["items"],
        json!([]),
        "a cursor of another's reveals nothing"
    );
    // Bob's own conversation with a Last-Event-ID naming Ann's run: refused, not replayed.
    let (_, mine) = api.post(&bob, "/v1/conversations", "{}").await;
    let mine = mine["id"].as_str().unwrap();
    let (status, body) = api
        .call(
            Request::get(format!("/v1/conversations/{mine}/events"))
                .header("authorization", format!("Bearer {bob}"))
                .header("last-event-id", format!("{run_id}:1"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "invalid_request")
    );
    let (status, body) = api
        .call(
            Request::get(format!("/v1/runs/{run_id}/events"))
                .header("authorization", format!("Bearer {ann}"))
                .header("last-event-id", "999")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "invalid_request"),
        "{body}"
    );
}

#[tokio::test]
async fn a_body_too_large_or_malformed_stores_nothing() {
    let api = Api::new().await;
    let key = api.key(Some("ann"), false).await;
    let (_, conversation) = api.post(&key, "/v1/conversations", "{}").await;
    let id = conversation["id"].as_str().unwrap();
    let messages = format!("/v1/conversations/{id}/messages");
    let big = json!({"text": "x".repeat(100 * 1024)}).to_string();
    let (status, body) = api.post(&key, &messages, &big).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    for bad in [
        "",
        "{",
        "[]",
        r#"{"text": 5}"#,
        r#"{"text": "hi", "extra": 1}"#,
        r#"{"text": "   "}"#,
        r#"{"text": "hi", "attachments": [{"name": "a"}]}"#,
    ] {
        let (status, body) = api.post(&key, &messages, bad).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{bad}"
        );
    }
    assert!(api.store.messages(id).await.unwrap().is_empty());
    assert!(api.store.queued_runs(id).await.unwrap().is_empty());
    let (_, runs) = api.get(&key, "/v1/runs").await;
    assert_eq!(runs["items"], json!([]));
}

#[tokio::test]
async fn the_openapi_document_is_3_1_and_names_every_endpoint() {
    let api = Api::new().await;
    let (status, document) = api
        .call(Request::get("/openapi.json").body(Body::empty()).unwrap())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(document["openapi"].as_str().unwrap().starts_with("3.1"));
    let paths = document["paths"].as_object().unwrap();
    for (path, method) in [
        ("/v1/conversations", "post"),
        ("/v1/conversations", "get"),
        ("/v1/conversations/{id}", "get"),
        ("/v1/conversations/{id}/messages", "post"),
        ("/v1/conversations/{id}/messages", "get"),
        ("/v1/conversations/{id}/events", "get"),
        ("/v1/runs", "get"),
        ("/v1/runs/{id}", "get"),
        ("/v1/runs/{id}/report", "get"),
        ("/v1/runs/{id}/events", "get"),
        ("/v1/runs/{id}/cancel", "post"),
        ("/v1/runs/{id}/answer", "post"),
        ("/v1/runs/{id}/resume", "post"),
        ("/readyz", "get"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} missing from {:?}",
            paths.keys().collect::<Vec<_>>()
        );
    }
}

/// `shell {command}`: every call needs approval.
struct AlwaysAsks(keel_core::ToolSpec);

#[async_trait::async_trait]
impl keel_core::Tool for AlwaysAsks {
    fn spec(&self) -> &keel_core::ToolSpec {
        &self.0
    }
    async fn call(
        &self,
        _args: Value,
        _ctx: &keel_core::ToolContext,
    ) -> Result<keel_core::ToolOutput, keel_core::ToolError> {
        Ok(keel_core::ToolOutput::text("ran"))
    }
    fn approval(&self, _args: &Value) -> Option<keel_core::ApprovalNeed> {
        Some(keel_core::ApprovalNeed {
            reason: "every call asks".into(),
            pattern: "*".into(),
        })
    }
}

/// A conversation of `key`'s user with one message sent: the run's report once it pauses.
async fn paused_run(api: &Api, key: &str) -> Value {
    let (status, conversation) = api.post(key, "/v1/conversations", "{}").await;
    assert_eq!(status, StatusCode::CREATED, "{conversation}");
    let id = conversation["id"].as_str().unwrap();
    let (status, report) = api
        .post(
            key,
            &format!("/v1/conversations/{id}/messages?wait=true"),
            r#"{"text": "go"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["state"], "waiting_on_human", "{report}");
    report
}

#[tokio::test]
async fn an_approval_names_its_call_and_the_report_shows_the_arguments_as_an_object() {
    let mut shell = keel_core::ToolSpec::new(
        "shell",
        "runs a command",
        json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    );
    // `ann` is not a stored user: a guest.
    shell.required_permission = keel_core::Permission::Guest;
    let script = Script::new(vec![
        Step::tool_call("shell", json!({"command": "ls"})),
        Step::tool_call("shell", json!({"command": "kill -9 1"})),
        Step::text("done"),
    ]);
    let api = Api::with(script, Some(Arc::new(AlwaysAsks(shell)))).await;
    let key = api.key(Some("ann"), false).await;
    let report = paused_run(&api, &key).await;
    assert_eq!(report["approval"]["arguments"], json!({"command": "ls"}));
    let run_id = report["run_id"].as_str().unwrap();
    let call_id = report["approval"]["call_id"].as_str().unwrap();
    let path = format!("/v1/runs/{run_id}/approval");

    // Without the call it decides, a decision is refused, and says why.
    for body in [
        r#"{"decision": "approve_once"}"#,
        r#"{"decision": "approve_once", "call_id": ""}"#,
        r#"{"decision": "approve_once", "call_id": null}"#,
    ] {
        let (status, refused) = api.post(&key, &path, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains("call_id is required"), "{message}");
    }
    // Another call's id is a conflict.
    let (status, refused) = api
        .post(
            &key,
            &path,
            r#"{"decision": "approve_once", "call_id": "other"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");

    let body = json!({"decision": "approve_once", "call_id": call_id}).to_string();
    let (status, accepted) = api.post(&key, &path, &body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let next = api.state.engine.wait(run_id).await.unwrap();
    let kill = next.approval.unwrap();
    assert_eq!(kill.arguments, r#"{"command":"kill -9 1"}"#);
    // The same request again is about the first call: refused, and `kill -9` still waits.
    let (status, refused) = api.post(&key, &path, &body).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&kill.call_id),
        "{refused}"
    );
    let (status, waiting) = api.get(&key, &format!("/v1/runs/{run_id}/report")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(waiting["approval"]["call_id"], kill.call_id.as_str());
    assert_eq!(
        waiting["approval"]["arguments"],
        json!({"command": "kill -9 1"})
    );

    // The OpenAPI document says `call_id` is required.
    let (_, document) = api
        .call(Request::get("/openapi.json").body(Body::empty()).unwrap())
        .await;
    let required = &document["components"]["schemas"]["ApprovalBody"]["required"];
    assert!(
        required.as_array().unwrap().contains(&json!("call_id")),
        "{required}"
    );
}

#[tokio::test]
async fn an_approval_for_a_run_waiting_for_an_answer_is_409_and_the_question_stays() {
    let script = Script::new(vec![
        Step::tool_call("ask_human", json!({"question": "Which file?"})),
        Step::text("a.txt it is."),
    ]);
    let api = Api::with(script, None).await;
    let key = api.key(Some("ann"), false).await;
    let report = paused_run(&api, &key).await;
    assert_eq!(report["question"], "Which file?");
    let run_id = report["run_id"].as_str().unwrap();
    let (status, refused) = api
        .post(
            &key,
            &format!("/v1/runs/{run_id}/approval"),
            r#"{"decision": "approve_once", "call_id": "call_0"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(code(&refused), "conflict");
    let (status, still) = api.get(&key, &format!("/v1/runs/{run_id}/report")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(still["state"], "waiting_on_human", "{still}");
    assert_eq!(still["question"], "Which file?", "{still}");
    let (status, answered) = api
        .post(
            &key,
            &format!("/v1/runs/{run_id}/answer"),
            r#"{"text": "a.txt"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answered}");
    let done = api.state.engine.wait(run_id).await.unwrap();
    assert_eq!(done.final_text.as_deref(), Some("a.txt it is."));
}

#[tokio::test]
async fn a_path_id_that_is_not_utf8_is_a_json_400_on_every_kind_of_endpoint() {
    let api = Api::new().await;
    let key = api.key(Some("ann"), false).await;
    for path in [
        "/v1/runs/%FF%FE",
        "/v1/conversations/%C0%AF",
        "/v1/conversations/%FF/messages",
        "/v1/runs/%FF/events",
        "/v1/files/%FF",
    ] {
        let (status, body) = api.get(&key, path).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn a_run_that_panics_answers_its_waiting_request_with_the_internal_error_answer() {
    // Panics on its first call (a bug in the loop), then answers "fine".
    let provider = Arc::new(keel_mock::PanicsAt::new(
        ScriptedProvider::new(Script::new(vec![Step::text("fine")]).with_per_turn()),
        1,
        "a bug in the loop",
    ));
    let api = Api::with_provider(provider, None).await;
    let key = api.key(Some("ann"), false).await;
    let (_, conversation) = api.post(&key, "/v1/conversations", "{}").await;
    let path = format!(
        "/v1/conversations/{}/messages?wait=true",
        conversation["id"].as_str().unwrap()
    );
    // Before, the request hung for good: the run's task died with its waiter's answer.
    let waited = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        api.post(&key, &path, r#"{"text": "one"}"#),
    );
    let (status, report) = waited.await.expect("the waiting request was answered");
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["state"], "error", "{report}");
    assert_eq!(report["reason"], "internal", "{report}");
    assert_eq!(
        report["final_text"],
        keel_core::run::INTERNAL_ERROR_ANSWER,
        "{report}"
    );
    let run_id = report["run_id"].as_str().unwrap();
    let (status, run) = api.get(&key, &format!("/v1/runs/{run_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (&run["state"], &run["reason"]),
        (&json!("error"), &json!("internal"))
    );
    // The daemon is up and the conversation goes on.
    let (status, next) = api.post(&key, &path, r#"{"text": "two"}"#).await;
    assert_eq!(status, StatusCode::OK, "{next}");
    assert_eq!(next["state"], "completed", "{next}");
    assert_eq!(next["final_text"], "fine", "{next}");
}
