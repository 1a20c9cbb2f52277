//! Who may approve a call of an untrusted conversation, through the daemon's router on
//! `MemoryStore`: a channel key brings an email in (`source: email_trigger`) and sees the run
//! it starts, but it may not approve that run's calls (403; the call still waits, and the key
//! may deny); an admin may. In a trusted conversation of its platform the same key may approve.

mod common;

use keel_platform::PlatformStore;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use chrono::Utc;
use http_body_util::BodyExt;
use keel_core::{Permission, ToolSpec};
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
    sent: Arc<AtomicUsize>,
}

impl Api {
    async fn new() -> Api {
        let mut spec = ToolSpec::new("send", "sends mail", json!({"type": "object"}));
        // The senders are guests.
        spec.required_permission = Permission::Guest;
        let script = Script::new(vec![Step::tool_call("send", json!({})), Step::text("done")])
            .with_per_turn();
        let tool = Arc::new(common::AskingTool::new(spec, "it sends mail", "sent"));
        let sent = tool.ran.clone();
        let (state, store) = common::state_with(EngineOptions::default(), |builder| {
            builder
                .provider(Arc::new(ScriptedProvider::new(script)))
                .model("m")
                .tool(tool)
        })
        .await;
        Api { state, store, sent }
    }

    async fn key(&self, admin: bool, platforms: &[&str]) -> String {
        let platforms = platforms.iter().map(|p| p.to_string()).collect();
        let made = new_key(None, admin, platforms, Utc::now()).unwrap();
        self.store.save_api_key(&made.record).await.unwrap();
        made.key
    }

    async fn post(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
        let request = Request::post(path)
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = router(self.state.clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// A message from Slack user U1 in channel `channel`, as `key` posts it: the paused run's
    /// report.
    async fn paused(&self, key: &str, channel: &str, source: Option<&str>) -> Value {
        let mut message = json!({
            "platform": "slack", "platform_user_id": "U1", "platform_channel_id": channel,
            "text": "please read this"
        });
        if let Some(source) = source {
            message["source"] = json!(source);
        }
        let (status, report) = self.post(key, "/v1/messages?wait=true", message).await;
        assert_eq!(status, StatusCode::OK, "{report}");
        assert_eq!(report["state"], "waiting_on_human", "{report}");
        report
    }

    async fn decide(&self, key: &str, report: &Value, decision: &str) -> (StatusCode, Value) {
        let run_id = report["run_id"].as_str().unwrap();
        let body = json!({"decision": decision, "call_id": report["approval"]["call_id"]});
        self.post(key, &format!("/v1/runs/{run_id}/approval"), body)
            .await
    }
}

#[tokio::test]
async fn a_channel_key_cannot_approve_the_calls_of_its_platforms_untrusted_conversation() {
    let api = Api::new().await;
    let slack = api.key(false, &["slack"]).await;
    let admin = api.key(true, &[]).await;
    let report = api.paused(&slack, "C1", Some("email_trigger")).await;
    for decision in ["approve_once", "approve_session"] {
        let (status, refused) = api.decide(&slack, &report, decision).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{decision}: {refused}");
        assert_eq!(refused["error"]["code"], "forbidden", "{refused}");
    }
    assert_eq!(api.sent.load(Ordering::SeqCst), 0, "the call ran");
    // Still waiting: an admin decides it.
    let (status, body) = api.decide(&admin, &report, "approve_once").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let done = api
        .state
        .engine
        .wait(report["run_id"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(done.state, keel_core::AgentState::Completed, "{done:?}");
    assert_eq!(api.sent.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_channel_key_may_deny_there_and_approve_in_a_trusted_conversation() {
    let api = Api::new().await;
    let slack = api.key(false, &["slack"]).await;
    let report = api.paused(&slack, "C1", Some("email_trigger")).await;
    let (status, body) = api.decide(&slack, &report, "deny").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let report = api.paused(&slack, "C2", None).await;
    let (status, body) = api.decide(&slack, &report, "approve_once").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let done = api
        .state
        .engine
        .wait(report["run_id"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(done.state, keel_core::AgentState::Completed, "{done:?}");
    assert_eq!(api.sent.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_openapi_document_names_the_refusal() {
    let api = Api::new().await;
    let admin = api.key(true, &[]).await;
    let request = Request::get("/openapi.json")
        .header("authorization", format!("Bearer {admin}"))
        .body(Body::empty())
        .unwrap();
    let response = router(api.state.clone()).oneshot(request).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let document: Value = serde_json::from_slice(&bytes).unwrap();
    let refusal = &document["paths"]["/v1/runs/{id}/approval"]["post"]["responses"]["403"];
    assert!(
        refusal["description"]
            .as_str()
            .is_some_and(|d| d.contains("untrusted")),
        "{refusal}"
    );
}
