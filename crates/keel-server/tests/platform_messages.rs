//! `POST /v1/messages` attacked over HTTP (issue 31, items 1 and 10), on `MemoryStore` through
//! the router itself: a platform key's message reaches only a conversation of its own place,
//! however its fields spell another's, and a refused message (429, 503) leaves nothing behind
//! — no files, and when refused up front no user and no conversation either.

mod common;

use keel_platform::{ConversationStore, PlatformStore};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use chrono::Utc;
use http_body_util::BodyExt;
use keel_core::PlatformPlace;
use keel_core::Store;
use keel_core::files::{FileOrigin, FileRecord};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_platform::{ConversationKey, Source};
use keel_server::engine::EngineOptions;
use keel_server::keys::new_key;
use keel_server::{AppState, router};
use keel_store::MemoryStore;
use serde_json::{Value, json};
use tower::ServiceExt;

struct Api {
    state: AppState,
    store: Arc<MemoryStore>,
    provider: Arc<ScriptedProvider>,
}

impl Api {
    async fn new(step: Step, options: EngineOptions) -> Api {
        let provider = Arc::new(ScriptedProvider::new(
            Script::new(vec![step]).with_per_turn(),
        ));
        let (state, store) = common::state_with(options, |builder| {
            builder.provider(provider.clone()).model("m")
        })
        .await;
        Api {
            state,
            store,
            provider,
        }
    }

    /// A key speaking for `platforms` (an admin's when there are none).
    async fn key(&self, platforms: &[&str]) -> String {
        let platforms: Vec<String> = platforms.iter().map(|p| p.to_string()).collect();
        let admin = platforms.is_empty();
        let made = new_key(None, admin, platforms, Utc::now()).unwrap();
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

    async fn post(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
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

fn message(platform: &str, user: &str, channel: &str, text: &str) -> Value {
    json!({"platform": platform, "platform_user_id": user, "platform_channel_id": channel,
           "text": text})
}

/// What the model was sent, every request of it, as one text.
fn seen_by_model(provider: &ScriptedProvider) -> Vec<String> {
    provider
        .requests()
        .iter()
        .map(|request| format!("{:?}", request.messages))
        .collect()
}

#[tokio::test]
async fn a_platform_key_reaches_only_conversations_of_its_own_place() {
    let api = Api::new(Step::text("ok"), EngineOptions::default()).await;
    let slack = api.key(&["slack"]).await;
    let telegram = api.key(&["telegram"]).await;
    let (status, said) = api
        .post(
            &slack,
            "/v1/messages?wait=true",
            message("slack", "U1", "C1", "the launch code is 4512"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{said}");
    assert_eq!(said["session_id"], "slack:C1");

    // The Telegram key names the Slack conversation every way it can.
    let mut forged = vec![
        message("telegram", "666", "slack:C1", "what was the launch code?"),
        message("telegram", "666", "slack%3AC1", "what was the launch code?"),
    ];
    let mut as_thread = message("telegram", "666", "slack", "what was the launch code?");
    as_thread["platform_thread_id"] = json!("C1");
    forged.push(as_thread);
    let mut as_email = message("telegram", "666", "slack:C1", "what was the launch code?");
    as_email["source"] = json!("email_trigger");
    forged.push(as_email);
    for body in forged {
        let before = api.provider.requests().len();
        let (status, report) = api
            .post(&telegram, "/v1/messages?wait=true", body.clone())
            .await;
        assert_eq!(status, StatusCode::OK, "{body} -> {report}");
        let id = report["session_id"].as_str().unwrap();
        assert_ne!(id, "slack:C1", "{body}");
        let conversation = api.store.session(id).await.unwrap().unwrap();
        assert_eq!(
            conversation.place.as_ref().map(|p| p.platform.as_str()),
            Some("telegram"),
            "{body}"
        );
        // The guest's run never read the Slack history.
        for sent in &seen_by_model(&api.provider)[before..] {
            assert!(!sent.contains("4512"), "{body}: {sent}");
        }
    }
    // The Slack conversation holds its own two messages only, and stays out of the Telegram
    // key's sight, as a parent too.
    let slack_c1 = api.store.session("slack:C1").await.unwrap().unwrap();
    assert_eq!(slack_c1.message_count, 2);
    let (status, _) = api.get(&telegram, "/v1/conversations/slack:C1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let mut child = message("telegram", "666", "-1", "hi");
    child["source"] = json!("sub_agent");
    child["parent_conversation_id"] = json!("slack:C1");
    let (status, body) = api.post(&telegram, "/v1/messages", child).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // A platform name that would make its chats read as another kind of session is refused.
    let admin = api.key(&[]).await;
    let (status, body) = api
        .post(&admin, "/v1/messages", message("event_x", "U1", "C1", "hi"))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

fn attachment(name: &str, content: &str) -> Value {
    json!({"name": name, "content": content})
}

/// The SHA-256 the store keeps `content` under.
fn sha(content: &str) -> String {
    FileRecord::new(
        "x",
        "text/plain",
        content.as_bytes(),
        "s",
        FileOrigin::Attachment,
        Utc::now(),
    )
    .sha256
}

#[tokio::test]
async fn a_refused_message_keeps_no_attachment_and_when_refused_up_front_nothing() {
    let options = EngineOptions {
        queue_limit: 1,
        shutdown_grace: Duration::from_millis(200),
        ..EngineOptions::default()
    };
    // Every run waits long on the model: the lane fills.
    let api = Api::new(Step::text("ok").with_delay_ms(60_000), options).await;
    let slack = api.key(&["slack"]).await;
    let mut accepted = 0;
    let mut refused = Vec::new();
    for i in 0..6 {
        let mut body = message("slack", "U1", "C1", &format!("message {i}"));
        body["attachments"] = json!([
            attachment("shared.txt", "the same bytes in every message"),
            attachment("own.txt", &format!("only message {i}'s bytes")),
        ]);
        let (status, answer) = api.post(&slack, "/v1/messages", body).await;
        match status {
            StatusCode::ACCEPTED => accepted += 1,
            StatusCode::TOO_MANY_REQUESTS => refused.push(i),
            other => panic!("{other}: {answer}"),
        }
    }
    assert!(
        accepted >= 1 && !refused.is_empty(),
        "{accepted} {refused:?}"
    );
    // Only the accepted messages' files are kept; the refused ones' own bytes are gone, the
    // bytes they shared with an accepted one stay.
    let files = api.store.session_files("slack:C1").await.unwrap();
    assert_eq!(files.len(), 2 * accepted, "{files:?}");
    for i in &refused {
        let own = sha(&format!("only message {i}'s bytes"));
        assert_eq!(api.store.file_content(&own).await.unwrap(), None, "{i}");
        assert!(files.iter().all(|file| file.sha256 != own));
    }
    assert!(
        api.store
            .file_content(&sha("the same bytes in every message"))
            .await
            .unwrap()
            .is_some()
    );

    // Shutting down: a new sender's message is refused before anything is stored.
    api.state.engine.shutdown().await;
    let mut late = message("slack", "U9", "C9", "too late");
    late["attachments"] = json!([attachment("late.txt", "bytes of a late message")]);
    let (status, answer) = api.post(&slack, "/v1/messages", late).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(
        api.store
            .file_content(&sha("bytes of a late message"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(api.store.user("slack:U9").await.unwrap(), None);
    let place = PlatformPlace {
        platform: "slack".into(),
        channel_id: "C9".into(),
        thread_id: None,
        server_id: None,
    };
    let key = ConversationKey::of(&Source::Chat, &place, "U9").unwrap();
    assert_eq!(api.store.platform_conversation(&key).await.unwrap(), None);
    // Sent straight to a conversation, the same.
    let (status, answer) = api
        .post(
            &slack,
            "/v1/conversations/slack:C1/messages",
            json!({"text": "late too",
                   "attachments": [attachment("l.txt", "bytes sent straight")]}),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(
        api.store
            .file_content(&sha("bytes sent straight"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        api.store.session_files("slack:C1").await.unwrap().len(),
        2 * accepted
    );
}
