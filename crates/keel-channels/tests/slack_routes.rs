//! The Slack routes on the memory store with an engine: an event the store cannot take now (the
//! daemon stopping) is answered 503, so that Slack sends it again, and nothing of it is kept; a
//! signed message is taken and acknowledged, and its redelivery is one run.

use std::sync::Arc;

use keel_channels::courier::CourierPolicy;
use keel_channels::decide::Decider;
use keel_channels::{Context, Intake};
use keel_mock::Step;
use keel_platform::{ChannelStore, InboundKey};
use keel_server::engine::Engine;
use keel_store::MemoryStore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod common;

const SECRET: &str = "slack-routes-test-secret";

struct Served {
    url: String,
    store: Arc<MemoryStore>,
    engine: Arc<Engine>,
    http: reqwest::Client,
}

/// The Slack channel's routes, served on 127.0.0.1:0 over a daemon on the memory store.
async fn serve() -> Served {
    let (state, store, _provider) = common::daemon_state(Step::text("ok")).await;
    let (engine, inbox) = (state.engine.clone(), state.inbox.clone());
    keel_providers::install_crypto_provider();
    let http = reqwest::Client::new();
    let ctx = Context {
        intake: Arc::new(Intake::new(store.clone(), engine.clone(), inbox)),
        decider: Arc::new(Decider::new(store.clone(), engine.clone())),
        state,
        http: http.clone(),
        stop: CancellationToken::new(),
        tasks: TaskTracker::new(),
        courier: CourierPolicy::default(),
    };
    // SAFETY: set once, before any thread of this test reads the environment, to values no
    // other test of this binary uses.
    unsafe {
        std::env::set_var("SLACK_ROUTES_TEST_TOKEN", "xoxb-unused");
        std::env::set_var("SLACK_ROUTES_TEST_SECRET", SECRET);
    }
    let raw: toml::Value = toml::from_str(
        "bot_token_env = \"SLACK_ROUTES_TEST_TOKEN\"\n\
         signing_secret_env = \"SLACK_ROUTES_TEST_SECRET\"\n\
         api_url = \"http://127.0.0.1:9\"\nbot_user_id = \"UBOT\"\nallow = \"everyone\"\n",
    )
    .unwrap();
    let started = keel_channels::slack::start(&raw, &ctx).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let routes = started.routes.unwrap();
    tokio::spawn(async move { axum::serve(listener, routes).await.unwrap() });
    Served {
        url,
        store,
        engine,
        http,
    }
}

impl Served {
    /// Posts a DM event, signed now; the status.
    async fn post(&self, event_id: &str, ts: &str) -> u16 {
        let body = serde_json::json!({"type": "event_callback", "team_id": "T1",
            "event_id": event_id, "event": {"type": "message", "user": "U1", "channel": "D1",
            "channel_type": "im", "ts": ts, "text": "hello"}})
        .to_string();
        let now = chrono::Utc::now().timestamp().to_string();
        let signature = keel_channels::slack::sign(SECRET, &now, body.as_bytes());
        self.http
            .post(format!("{}/channels/slack/events", self.url))
            .header("x-slack-request-timestamp", now)
            .header("x-slack-signature", signature)
            .body(body)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    async fn stored(&self, ts: &str) -> Option<String> {
        let key = InboundKey::new("slack", format!("D1:{ts}"));
        self.store.inbound_run(&key).await.unwrap()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_is_stored_before_its_200_and_a_redelivery_is_the_same_run() {
    let served = serve().await;
    assert_eq!(served.post("Ev1", "1.1").await, 200);
    let run = served.stored("1.1").await.expect("stored before the 200");
    assert_eq!(served.post("Ev1", "1.1").await, 200);
    assert_eq!(served.stored("1.1").await, Some(run));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_the_daemon_cannot_take_is_answered_503_and_nothing_is_kept() {
    let served = serve().await;
    served.engine.shutdown().await;
    assert_eq!(served.post("Ev2", "2.1").await, 503);
    assert_eq!(served.stored("2.1").await, None);
}
