//! `/v1/schedules` through the router (`tower::ServiceExt::oneshot`) on `MemoryStore`: a
//! conversation's owner adds, lists, shows (with the slots: fired, missed, refused), pauses,
//! resumes and deletes its schedules; another user sees none of them however they are named
//! (404), a key that sees a conversation only through its platform reads but may not change
//! them (403), an admin does everything; what cannot be used is a 400 that says why.

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use chrono::{DateTime, Utc};
use http_body_util::BodyExt;
use keel_platform::schedule::{ScheduleStore, SlotKey, SlotOutcome, SlotRecord};
use keel_platform::{ConversationStore, NewConversation, PlatformStore, QueuedRun};
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
        let (state, store) = common::state_with(EngineOptions::default(), |builder| {
            builder
                .provider(Arc::new(keel_mock::ScriptedProvider::new(
                    keel_mock::Script::new(vec![keel_mock::Step::text("ok")]).with_per_turn(),
                )))
                .model("m")
        })
        .await;
        Api { state, store }
    }

    async fn key(&self, user: Option<&str>, admin: bool, platforms: &[&str]) -> String {
        let platforms = platforms.iter().map(|p| p.to_string()).collect();
        let made = new_key(user.map(str::to_string), admin, platforms, Utc::now()).unwrap();
        self.store.save_api_key(&made.record).await.unwrap();
        made.key
    }

    async fn call(
        &self,
        method: &str,
        key: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json");
        let body = body.map_or(Body::empty(), |b| Body::from(b.to_string()));
        let response = router(self.state.clone())
            .oneshot(request.body(body).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn conversation(&self, key: &str) -> String {
        let (status, body) = self
            .call("POST", key, "/v1/conversations", Some(json!({})))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["id"].as_str().unwrap().to_string()
    }
}

fn every_15m(conversation: &str) -> Value {
    json!({"conversation_id": conversation, "kind": "every", "spec": "15m", "text": "standup"})
}

fn code(body: &Value) -> &str {
    body["error"]["code"]
        .as_str()
        .unwrap_or("<not a JSON error>")
}

fn time(body: &Value, field: &str) -> DateTime<Utc> {
    body[field].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn an_owner_adds_lists_shows_pauses_resumes_and_deletes_a_schedule() {
    let api = Api::new().await;
    let ann = api.key(Some("ann"), false, &[]).await;
    let c1 = api.conversation(&ann).await;
    let c2 = api.conversation(&ann).await;
    let before = Utc::now();
    let (status, made) = api
        .call("POST", &ann, "/v1/schedules", Some(every_15m(&c1)))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(made["conversation_id"], c1.as_str());
    assert_eq!(made["owner"], "ann");
    assert_eq!(made["created_by"], "operator");
    assert_eq!(
        (made["kind"].as_str(), made["spec"].as_str()),
        (Some("every"), Some("900"))
    );
    assert_eq!(made["when"], "every 15m");
    assert_eq!(
        (made["catch_up"].as_str(), made["state"].as_str()),
        (Some("once"), Some("active"))
    );
    assert!(
        time(&made, "next_slot")
            >= before + chrono::Duration::minutes(15) - chrono::Duration::seconds(1)
    );
    let id = made["id"].as_str().unwrap().to_string();
    let cron = json!({"conversation_id": c2, "kind": "cron", "spec": "0 9 * * 1-5",
                      "tz": "Europe/Berlin", "text": "good morning", "catch_up": "skip"});
    let (status, other) = api.call("POST", &ann, "/v1/schedules", Some(cron)).await;
    assert_eq!(status, StatusCode::CREATED, "{other}");
    assert_eq!(other["tz"], "Europe/Berlin");

    // Listed: all of the caller's, or one conversation's.
    let (_, all) = api.call("GET", &ann, "/v1/schedules", None).await;
    assert_eq!(all["items"].as_array().unwrap().len(), 2);
    let (_, of_c1) = api
        .call(
            "GET",
            &ann,
            &format!("/v1/schedules?conversation={c1}"),
            None,
        )
        .await;
    let items = of_c1["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["id"], id.as_str());

    // Shown with its slots, newest first: a fire with its run's state, a miss, a refusal.
    let slot = |minutes| time(&made, "next_slot") + chrono::Duration::minutes(minutes);
    let fire = QueuedRun {
        run_id: "r1".into(),
        session_id: c1.clone(),
        user_id: Some("ann".into()),
        message: "standup".into(),
        enqueued_at: slot(0),
        provider: "mock".into(),
        model: "m".into(),
        options: Default::default(),
        inbound: None,
        slot: Some(SlotKey {
            schedule_id: id.clone(),
            slot: slot(0),
        }),
    };
    api.store.enqueue_run(&fire, 16).await.unwrap();
    for (minutes, outcome, reason) in [
        (15, SlotOutcome::Missed, None),
        (
            30,
            SlotOutcome::Refused,
            Some("ann is over the monthly budget"),
        ),
    ] {
        let record = SlotRecord {
            schedule_id: id.clone(),
            slot: slot(minutes),
            outcome,
            run_id: None,
            reason: reason.map(str::to_string),
            at: slot(31),
        };
        assert!(api.store.record_slot(&record).await.unwrap());
    }
    let (status, shown) = api
        .call("GET", &ann, &format!("/v1/schedules/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let slots = shown["slots"].as_array().unwrap();
    let outcomes: Vec<_> = slots
        .iter()
        .map(|s| s["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["refused", "missed", "fired"]);
    assert_eq!(slots[0]["reason"], "ann is over the monthly budget");
    assert_eq!(
        (slots[2]["run_id"].as_str(), slots[2]["run_state"].as_str()),
        (Some("r1"), Some("queued"))
    );
    // A listing does not carry the slots.
    assert!(all["items"][0].get("slots").is_none());

    // Paused, with who did it; resumed from now.
    let (status, paused) = api
        .call("POST", &ann, &format!("/v1/schedules/{id}/pause"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(
        (paused["state"].as_str(), paused["paused_reason"].as_str()),
        (Some("paused"), Some("paused by ann"))
    );
    let resumed_at = Utc::now();
    let (status, resumed) = api
        .call("POST", &ann, &format!("/v1/schedules/{id}/resume"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    assert_eq!(resumed["state"], "active");
    assert!(resumed["paused_reason"].is_null());
    assert!(time(&resumed, "next_slot") > resumed_at);

    // Deleted: gone, and so are its slots' records.
    let (status, _) = api
        .call("DELETE", &ann, &format!("/v1/schedules/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = api
        .call("GET", &ann, &format!("/v1/schedules/{id}"), None)
        .await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    assert!(api.store.slots(&id, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn another_users_schedules_are_invisible_and_a_platform_key_may_not_change_them() {
    let api = Api::new().await;
    let ann = api.key(Some("ann"), false, &[]).await;
    let bob = api.key(Some("bob"), false, &[]).await;
    let admin = api.key(None, true, &[]).await;
    let c1 = api.conversation(&ann).await;
    let (_, made) = api
        .call("POST", &ann, "/v1/schedules", Some(every_15m(&c1)))
        .await;
    let id = made["id"].as_str().unwrap();

    // Bob: not found, whatever he does; he lists nothing and cannot add to ann's conversation.
    for (method, path) in [
        ("GET", format!("/v1/schedules/{id}")),
        ("POST", format!("/v1/schedules/{id}/pause")),
        ("POST", format!("/v1/schedules/{id}/resume")),
        ("DELETE", format!("/v1/schedules/{id}")),
        ("GET", format!("/v1/schedules?conversation={c1}")),
    ] {
        let (status, body) = api.call(method, &bob, &path, None).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::NOT_FOUND, "not_found"),
            "{method} {path}"
        );
    }
    let (_, listed) = api.call("GET", &bob, "/v1/schedules", None).await;
    assert_eq!(listed["items"], json!([]));
    let (status, _) = api
        .call("POST", &bob, "/v1/schedules", Some(every_15m(&c1)))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        api.store
            .schedule(id)
            .await
            .unwrap()
            .unwrap()
            .state
            .as_str(),
        "active"
    );

    // A Telegram conversation of ann's: the channel's key sees it, reads its schedules, and
    // may not change them.
    let place = keel_core::PlatformPlace {
        platform: "telegram".into(),
        channel_id: "42".into(),
        thread_id: None,
        server_id: None,
    };
    api.store
        .create_conversation(&NewConversation {
            id: "42".into(),
            owner: Some("ann".into()),
            lane_policy: Default::default(),
            at: Utc::now(),
            place: Some(place),
            trusted: true,
        })
        .await
        .unwrap();
    let (status, chat) = api
        .call("POST", &ann, "/v1/schedules", Some(every_15m("42")))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{chat}");
    let chat_id = chat["id"].as_str().unwrap();
    let telegram = api.key(None, false, &["telegram"]).await;
    let (status, _) = api
        .call("GET", &telegram, &format!("/v1/schedules/{chat_id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = api
        .call(
            "POST",
            &telegram,
            &format!("/v1/schedules/{chat_id}/pause"),
            None,
        )
        .await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "forbidden"));
    let (status, _) = api
        .call("POST", &telegram, "/v1/schedules", Some(every_15m("42")))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // An admin sees all and changes any.
    let (_, listed) = api.call("GET", &admin, "/v1/schedules", None).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 2);
    let (status, paused) = api
        .call("POST", &admin, &format!("/v1/schedules/{id}/pause"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(paused["paused_reason"], "paused by an admin");
}

#[tokio::test]
async fn what_cannot_be_used_is_a_400_that_says_why_and_a_done_schedule_is_409() {
    let api = Api::new().await;
    let ann = api.key(Some("ann"), false, &[]).await;
    let c1 = api.conversation(&ann).await;
    for (change, says) in [
        (json!({"spec": "10s"}), "too short"),
        (json!({"kind": "cron", "spec": "0 9 * *"}), "five-field"),
        (
            json!({"kind": "cron", "spec": "0 9 * * *", "tz": "Mars/Base"}),
            "time zone",
        ),
        (
            json!({"kind": "once", "spec": "2020-01-01T00:00:00Z"}),
            "in the past",
        ),
        (json!({"text": " "}), "empty"),
        (json!({"catch_up": "sometimes"}), "catch_up"),
        (json!({"colour": "red"}), "colour"),
    ] {
        let mut body = every_15m(&c1);
        for (field, value) in change.as_object().unwrap() {
            body[field] = value.clone();
        }
        let (status, answer) = api.call("POST", &ann, "/v1/schedules", Some(body)).await;
        assert_eq!(
            (status, code(&answer)),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{change}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{change}: {message}");
    }
    let everything = keel_platform::ScheduleFilter {
        limit: 50,
        ..Default::default()
    };
    assert!(
        api.store
            .list_schedules(&everything)
            .await
            .unwrap()
            .is_empty()
    );

    let (_, made) = api
        .call("POST", &ann, "/v1/schedules", Some(every_15m(&c1)))
        .await;
    let id = made["id"].as_str().unwrap();
    let next = time(&made, "next_slot");
    api.store
        .advance_schedule(id, Some(next), None, Utc::now())
        .await
        .unwrap();
    for action in ["pause", "resume"] {
        let (status, body) = api
            .call("POST", &ann, &format!("/v1/schedules/{id}/{action}"), None)
            .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::CONFLICT, "conflict"),
            "{action}"
        );
    }
}

#[tokio::test]
async fn the_openapi_document_names_the_schedule_endpoints() {
    let api = Api::new().await;
    let response = router(api.state.clone())
        .oneshot(Request::get("/openapi.json").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let document: Value = serde_json::from_slice(&bytes).unwrap();
    let paths = document["paths"].as_object().unwrap();
    for (path, method) in [
        ("/v1/schedules", "get"),
        ("/v1/schedules", "post"),
        ("/v1/schedules/{id}", "get"),
        ("/v1/schedules/{id}", "delete"),
        ("/v1/schedules/{id}/pause", "post"),
        ("/v1/schedules/{id}/resume", "post"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path}"
        );
    }
}
