//! `POST /v1/runs/{id}/cancel` reaches a run that goes on after an approval or an answer: the
//! model call in flight is abandoned and the run ends `cancelled` (before, the continued run
//! had a token of its own and went on).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use chrono::Utc;
use http_body_util::BodyExt;
use keel_core::{
    AgentState, ChatRequest, ChatResponse, DeltaSink, Permission, Provider, ProviderError, Store,
    ToolSpec,
};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_platform::PlatformStore;
use keel_server::engine::EngineOptions;
use keel_server::keys::new_key;
use keel_server::{AppState, router};
use keel_store::MemoryStore;
use serde_json::{Value, json};
use tower::ServiceExt;

/// The script's first call answers; every later one never does (it tells `entered`).
struct HangsAfterFirst {
    script: ScriptedProvider,
    calls: AtomicUsize,
    entered: tokio::sync::Notify,
}

#[async_trait]
impl Provider for HangsAfterFirst {
    fn name(&self) -> &str {
        self.script.name()
    }
    async fn chat(
        &self,
        request: &ChatRequest,
        sink: &dyn DeltaSink,
    ) -> Result<ChatResponse, ProviderError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return self.script.chat(request, sink).await;
        }
        self.entered.notify_one();
        std::future::pending().await
    }
}

struct Api {
    state: AppState,
    store: Arc<MemoryStore>,
    key: String,
    model: Arc<HangsAfterFirst>,
    shell: Arc<common::AskingTool>,
}

impl Api {
    async fn new(first: Step) -> Api {
        let model = Arc::new(HangsAfterFirst {
            script: ScriptedProvider::new(Script::new(vec![first])),
            calls: AtomicUsize::new(0),
            entered: tokio::sync::Notify::new(),
        });
        let mut spec = ToolSpec::new("shell", "runs a command", json!({"type": "object"}));
        spec.required_permission = Permission::Guest;
        let shell = Arc::new(common::AskingTool::new(spec, "every command asks", "ran"));
        let (provider, tool) = (model.clone(), shell.clone());
        let (state, store) = common::state_with(EngineOptions::default(), |builder| {
            // No heartbeat in the test's time: only the run's own token can stop the call.
            builder
                .provider(provider)
                .model("m")
                .tool(tool)
                .heartbeat_interval(Duration::from_secs(3600))
        })
        .await;
        let made = new_key(Some("ann".into()), false, Vec::new(), Utc::now()).unwrap();
        store.save_api_key(&made.record).await.unwrap();
        Api {
            state,
            store,
            key: made.key,
            model,
            shell,
        }
    }

    async fn post(&self, path: &str, body: &str) -> (StatusCode, Value) {
        let request = Request::post(path)
            .header("authorization", format!("Bearer {}", self.key))
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

    /// A run of a new conversation, once it waits for a person.
    async fn paused_run(&self) -> Value {
        let (status, conversation) = self.post("/v1/conversations", "{}").await;
        assert_eq!(status, StatusCode::CREATED, "{conversation}");
        let id = conversation["id"].as_str().unwrap();
        let path = format!("/v1/conversations/{id}/messages?wait=true");
        let (status, report) = self.post(&path, r#"{"text": "go"}"#).await;
        assert_eq!(status, StatusCode::OK, "{report}");
        assert_eq!(report["state"], "waiting_on_human", "{report}");
        report
    }

    /// Once the continued run's model call is in flight, cancels it over HTTP and waits (with
    /// a deadline) for the run to end.
    async fn cancel_in_flight(&self, run_id: &str) -> AgentState {
        let deadline = Duration::from_secs(30);
        tokio::time::timeout(deadline, self.model.entered.notified())
            .await
            .expect("the continued run calls the model");
        let (status, body) = self.post(&format!("/v1/runs/{run_id}/cancel"), "").await;
        assert!(status.is_success(), "{status}: {body}");
        let report = tokio::time::timeout(deadline, self.state.engine.wait(run_id))
            .await
            .expect("the cancel reaches the continued run")
            .unwrap();
        let stored = self.store.run(run_id).await.unwrap().unwrap();
        assert_eq!(stored.state, report.state);
        report.state
    }
}

#[tokio::test]
async fn a_cancel_reaches_a_run_continued_by_an_approval() {
    let api = Api::new(Step::tool_call("shell", json!({"command": "ls"}))).await;
    let report = api.paused_run().await;
    let run_id = report["run_id"].as_str().unwrap();
    let call_id = report["approval"]["call_id"].as_str().unwrap();
    let body = json!({"decision": "approve_once", "call_id": call_id}).to_string();
    let (status, accepted) = api
        .post(&format!("/v1/runs/{run_id}/approval"), &body)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    assert_eq!(api.cancel_in_flight(run_id).await, AgentState::Cancelled);
    assert_eq!(api.shell.ran(), 1, "the approved call ran once");
}

#[tokio::test]
async fn a_cancel_reaches_a_run_continued_by_an_answer() {
    let api = Api::new(Step::tool_call("ask_human", json!({"question": "Which?"}))).await;
    let report = api.paused_run().await;
    let run_id = report["run_id"].as_str().unwrap();
    let (status, accepted) = api
        .post(&format!("/v1/runs/{run_id}/answer"), r#"{"text": "a.txt"}"#)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    assert_eq!(api.cancel_in_flight(run_id).await, AgentState::Cancelled);
}
