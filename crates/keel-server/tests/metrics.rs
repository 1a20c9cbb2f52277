//! `GET /metrics` after a known set of runs, through the router: the counters say what the
//! runs did (ended how, model calls and their errors, a retry, a tool call, approvals and a
//! denial, tokens by model and by user from the token log); an admin key is needed on the API
//! (none: 401, a user's: 403) and the keyless router serves the same text without one.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use chrono::Utc;
use http_body_util::BodyExt;
use keel_core::{
    AgentState, ApprovalDecision, ApprovalNeed, ErrorReason, LanePolicy, Permission, SessionInfo,
    Tool, ToolContext, ToolError, ToolOutput, ToolSpec, UserRecord,
};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_platform::{ConversationStore, NewConversation, PlatformStore};
use keel_server::engine::EngineOptions;
use keel_server::keys::new_key;
use keel_server::{AppState, router};
use keel_store::MemoryStore;
use serde_json::{Value, json};
use tower::ServiceExt;

/// `shell {command}`: every call needs approval.
struct Shell;

static SHELL_SPEC: std::sync::LazyLock<ToolSpec> = std::sync::LazyLock::new(|| {
    ToolSpec::new(
        "shell",
        "runs a command",
        json!({"type": "object", "properties": {"command": {"type": "string"}},
               "required": ["command"]}),
    )
});

#[async_trait]
impl Tool for Shell {
    fn spec(&self) -> &ToolSpec {
        &SHELL_SPEC
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("done"))
    }
    fn approval(&self, args: &Value) -> Option<ApprovalNeed> {
        Some(ApprovalNeed {
            reason: "every command asks".into(),
            pattern: args["command"].as_str()?.into(),
        })
    }
}

async fn conversation(store: &MemoryStore, id: &str, owner: &str) -> SessionInfo {
    store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: Some(owner.into()),
            lane_policy: LanePolicy::Queue,
            at: Utc::now(),
            place: None,
            trusted: true,
        })
        .await
        .unwrap()
        .unwrap()
}

async fn key(store: &MemoryStore, user: Option<&str>, admin: bool) -> String {
    let made = new_key(user.map(str::to_string), admin, Vec::new(), Utc::now()).unwrap();
    store.save_api_key(&made.record).await.unwrap();
    made.key
}

async fn scrape(app: axum::Router, key: Option<&str>) -> (StatusCode, String) {
    let mut request = Request::get("/metrics");
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let response = app
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// The value of the sample line that starts with `series` (name and labels, as rendered).
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no `{series}` in:\n{text}"))
        .parse()
        .unwrap()
}

fn ann() -> Option<String> {
    Some("ann".into())
}

/// A daemon whose model answers "ok".
async fn answering() -> (AppState, Arc<MemoryStore>) {
    common::state_with(EngineOptions::default(), |builder| {
        builder
            .provider(Arc::new(ScriptedProvider::new(
                Script::new(vec![Step::text("ok")]).with_per_turn(),
            )))
            .model("m")
    })
    .await
}

/// Four runs in one conversation: one approved shell call then an answer; a server error
/// retried, then an answer; a call denied, then an answer; a malformed request (fatal).
async fn four_runs() -> (AppState, Arc<MemoryStore>) {
    let script = Script::new(vec![
        Step::tool_call("shell", json!({"command": "ls"})).with_usage(10, 2),
        Step::text("listed").with_usage(20, 3),
        Step::error(500),
        Step::text("fine").with_usage(5, 1),
        Step::tool_call("shell", json!({"command": "rm -rf /"})).with_usage(7, 1),
        Step::text("not done").with_usage(8, 1),
        Step::error(400),
    ]);
    let (state, store) = common::state_with(EngineOptions::default(), |builder| {
        builder
            .provider(Arc::new(ScriptedProvider::new(script)))
            .model("m")
            .tool(Arc::new(Shell))
    })
    .await;
    let engine = state.engine.clone();
    let now = Utc::now();
    keel_core::Store::save_user(
        store.as_ref(),
        &UserRecord {
            id: "ann".into(),
            monthly_token_budget: None,
            created_at: now,
            updated_at: now,
            permission: Permission::User,
        },
    )
    .await
    .unwrap();
    let lane = conversation(&store, "c", "ann").await;

    let first = engine.submit(&lane, "list".into(), ann()).await.unwrap();
    let waiting = engine.wait(&first.run_id).await.unwrap();
    let call = waiting.approval.unwrap().call_id;
    engine
        .approve(&first.run_id, &call, ApprovalDecision::ApproveOnce)
        .await
        .unwrap();
    let done = engine.wait(&first.run_id).await.unwrap();
    assert_eq!(done.state, AgentState::Completed, "{done:?}");

    let second = engine.submit(&lane, "again".into(), ann()).await.unwrap();
    let done = engine.wait(&second.run_id).await.unwrap();
    assert_eq!(done.state, AgentState::Completed, "{done:?}");

    let third = engine.submit(&lane, "wipe".into(), ann()).await.unwrap();
    let waiting = engine.wait(&third.run_id).await.unwrap();
    let call = waiting.approval.unwrap().call_id;
    engine
        .approve(&third.run_id, &call, ApprovalDecision::Deny)
        .await
        .unwrap();
    let done = engine.wait(&third.run_id).await.unwrap();
    assert_eq!(done.state, AgentState::Completed, "{done:?}");

    let fourth = engine.submit(&lane, "break".into(), ann()).await.unwrap();
    let failed = engine.wait(&fourth.run_id).await.unwrap();
    assert_eq!(
        (failed.state, failed.reason),
        (AgentState::Error, Some(ErrorReason::ProviderFatal)),
        "{failed:?}"
    );
    (state, store)
}

#[tokio::test(start_paused = true)]
async fn the_counters_say_what_the_runs_did() {
    let (state, store) = four_runs().await;
    let admin = key(&store, None, true).await;
    let (status, text) = scrape(router(state.clone()), Some(&admin)).await;
    assert_eq!(status, StatusCode::OK, "{text}");

    assert_eq!(
        value(&text, r#"keel_runs_total{state="completed",reason="none"}"#),
        3.0
    );
    assert_eq!(
        value(
            &text,
            r#"keel_runs_total{state="error",reason="provider_fatal"}"#
        ),
        1.0
    );
    // Answers: the shell call, "listed", "fine", the second shell call, "not done".
    assert_eq!(
        value(&text, r#"keel_model_calls_total{model="m",error="none"}"#),
        5.0
    );
    assert_eq!(
        value(&text, r#"keel_model_calls_total{model="m",error="server"}"#),
        1.0
    );
    assert_eq!(
        value(
            &text,
            r#"keel_model_calls_total{model="m",error="invalid_request"}"#
        ),
        1.0
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("keel_provider_retries_total{") && l.ends_with(" 1")),
        "{text}"
    );
    assert_eq!(
        value(&text, r#"keel_tool_calls_total{tool="shell",outcome="ok"}"#),
        1.0
    );
    assert_eq!(
        value(&text, r#"keel_approvals_total{decision="approve_once"}"#),
        1.0
    );
    assert_eq!(
        value(&text, r#"keel_approvals_total{decision="deny"}"#),
        1.0
    );
    assert_eq!(
        value(&text, r#"keel_model_latency_seconds_count{model="m"}"#),
        5.0
    );
    assert_eq!(
        value(&text, r#"keel_tool_duration_seconds_count{tool="shell"}"#),
        1.0
    );
    assert!(
        value(&text, "keel_loop_overhead_seconds_count") >= 1.0,
        "{text}"
    );
    assert!(
        text.contains("# TYPE keel_model_latency_seconds histogram"),
        "{text}"
    );
    assert!(text.contains(r#"keel_model_latency_seconds_bucket{model="m",le="+Inf"} 5"#));
    assert_eq!(value(&text, "keel_runs_active"), 0.0);
    assert_eq!(value(&text, "keel_runs_queued"), 0.0);
    // Tokens from the token log: 10+20+5+7+8 in, 2+3+1+1+1 out.
    assert_eq!(
        value(&text, r#"keel_tokens_total{model="m",kind="input"}"#),
        50.0
    );
    assert_eq!(
        value(&text, r#"keel_tokens_total{model="m",kind="output"}"#),
        8.0
    );
    assert_eq!(
        value(&text, r#"keel_user_tokens_total{user="ann",kind="input"}"#),
        50.0
    );
    assert!(
        text.contains(r#"keel_user_cost_usd_total{user="ann"} "#),
        "{text}"
    );
    assert!(!text.contains("keel_outbox_backlog"), "no channels here");
    // What the runs' timing needed is let go once they ended.
    assert_eq!(state.engine.metrics().runs_followed(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_api_wants_an_admin_key_and_the_keyless_router_none() {
    let (state, store) = answering().await;
    let user = key(&store, Some("ann"), false).await;
    let (status, text) = scrape(router(state.clone()), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{text}");
    let (status, text) = scrape(router(state.clone()), Some("not-a-key")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{text}");
    let (status, text) = scrape(router(state.clone()), Some(&user)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    assert!(text.contains("admin"), "{text}");

    let keyless = keel_server::metrics::route::keyless(state.clone());
    let (status, text) = scrape(keyless.clone(), None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains("keel_runs_active 0"), "{text}");
    let response = keyless
        .oneshot(Request::get("/v1/runs").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND, "only /metrics");
}

#[tokio::test(start_paused = true)]
async fn channels_report_their_outbox_backlog() {
    let (state, store) = answering().await;
    let admin = key(&store, None, true).await;
    state
        .engine
        .metrics()
        .set_channels(&["telegram".to_string()]);
    let (status, text) = scrape(router(state), Some(&admin)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        value(&text, r#"keel_outbox_backlog{channel="telegram"}"#),
        0.0
    );
}
