//! A message's text is capped at the same 256 KiB on both ways in (`POST /v1/messages` and
//! `POST /v1/conversations/{id}/messages`), whatever room `max_request_bytes` leaves.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use keel_platform::MAX_TEXT_BYTES;
use serde_json::{Value, json};
use tower::ServiceExt;

async fn post(
    state: &keel_server::AppState,
    key: &str,
    path: &str,
    body: &Value,
) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = keel_server::router(state.clone())
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn a_conversation_message_over_256_kib_of_text_is_refused_like_a_platform_one() {
    let (mut state, key) = common::state().await;
    state.max_request_bytes = 1 << 20;
    let (_, conversation) = post(&state, &key, "/v1/conversations", &json!({})).await;
    let messages = format!(
        "/v1/conversations/{}/messages",
        conversation["id"].as_str().unwrap()
    );
    let (status, body) = post(
        &state,
        &key,
        &messages,
        &json!({"text": "x".repeat(300_000)}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 262144"),
        "{body}"
    );
    let id = conversation["id"].as_str().unwrap();
    assert!(state.store.messages(id).await.unwrap().is_empty());
    let (status, body) = post(
        &state,
        &key,
        &messages,
        &json!({"text": "x".repeat(MAX_TEXT_BYTES)}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}
