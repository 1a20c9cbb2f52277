//! A fake Slack Web API for the end-to-end tests: axum on 127.0.0.1:0 in the test process. It
//! records every call keel makes (method, bearer token, JSON body) and answers as Slack does:
//! `auth.test` names the bot, `chat.postMessage` gives each message a new `ts`. It can be told
//! to fail a post (an HTTP status, an `ok: false` error) once a number of posts succeeded.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// The bot's user id the fake's `auth.test` answers.
pub const BOT: &str = "UBOT";
/// The bot token keel is given.
pub const TOKEN: &str = "xoxb-test-token";
/// The signing secret keel is given (and the tests sign with).
pub const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

/// One call keel made.
#[derive(Clone, Debug)]
pub struct Call {
    /// The Web API method, e.g. `chat.postMessage`.
    pub method: String,
    /// The `Authorization` header.
    pub auth: String,
    /// The JSON body.
    pub body: Value,
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    failures: Vec<(usize, Response)>,
}

/// The running fake.
#[derive(Clone)]
pub struct FakeSlack {
    /// Its Web API base, for `api_url`.
    pub url: String,
    inner: Arc<Mutex<Inner>>,
}

impl FakeSlack {
    /// Starts the fake in the current runtime.
    pub async fn start() -> FakeSlack {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let app = Router::new()
            .route("/api/{method}", post(call))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/api", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeSlack { url, inner }
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.inner.lock().unwrap().calls.clone()
    }

    /// The bodies of the calls of `method` so far.
    pub fn bodies(&self, method: &str) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .map(|c| c.body)
            .collect()
    }

    /// Waits (a few ms at a time) until `method` was called `count` times; its bodies.
    pub async fn until(&self, method: &str, count: usize) -> Vec<Value> {
        for _ in 0..3000 {
            let bodies = self.bodies(method);
            if bodies.len() >= count {
                return bodies;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "{method} was not called {count} times; calls: {:#?}",
            self.calls()
        );
    }

    /// Answers `chat.postMessage` with `status`, `headers` and `body`, once, when `after` posts
    /// have succeeded.
    pub fn fail_after(
        &self,
        after: usize,
        status: u16,
        headers: &[(&'static str, &str)],
        body: Value,
    ) {
        let mut response =
            (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response();
        for (name, value) in headers {
            response.headers_mut().insert(*name, value.parse().unwrap());
        }
        self.inner.lock().unwrap().failures.push((after, response));
    }
}

async fn call(
    State(inner): State<Arc<Mutex<Inner>>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut inner = inner.lock().unwrap();
    let posted = inner
        .calls
        .iter()
        .filter(|c| c.method == "chat.postMessage")
        .count();
    let due = inner
        .failures
        .iter()
        .position(|(after, _)| *after == posted);
    if method == "chat.postMessage"
        && let Some(due) = due
    {
        let (_, failure) = inner.failures.remove(due);
        inner.calls.push(Call {
            method: format!("{method} (failed)"),
            auth,
            body,
        });
        return failure;
    }
    let n = inner.calls.len();
    inner.calls.push(Call {
        method: method.clone(),
        auth: auth.clone(),
        body: body.clone(),
    });
    if auth != format!("Bearer {TOKEN}") {
        return axum::Json(json!({"ok": false, "error": "invalid_auth"})).into_response();
    }
    let answer = match method.as_str() {
        "auth.test" => json!({"ok": true, "user_id": BOT, "team_id": "T1"}),
        "chat.postMessage" => json!({"ok": true, "channel": body["channel"],
            "ts": format!("1800000000.{n:06}")}),
        "chat.postEphemeral" => json!({"ok": true, "message_ts": format!("1800000001.{n:06}")}),
        "chat.update" => json!({"ok": true, "channel": body["channel"], "ts": body["ts"]}),
        _ => json!({"ok": false, "error": "unknown_method"}),
    };
    axum::Json(answer).into_response()
}

/// Now, in Unix seconds.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Posts `body` to the daemon's `path` as Slack does, signed at `at` (Unix seconds) with
/// `secret`, with `extra` headers; the status.
pub async fn post_signed(
    daemon: &str,
    path: &str,
    body: &str,
    content_type: &str,
    secret: &str,
    at: i64,
    extra: &[(&str, &str)],
) -> (u16, String) {
    let timestamp = at.to_string();
    let signature = keel_channels::slack::sign(secret, &timestamp, body.as_bytes());
    keel_providers::install_crypto_provider();
    let mut request = reqwest::Client::new()
        .post(format!("{daemon}{path}"))
        .header("content-type", content_type)
        .header("x-slack-request-timestamp", &timestamp)
        .header("x-slack-signature", signature)
        .body(body.to_string());
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// An Events API `event_callback` body.
pub fn event(event_id: &str, event: Value) -> String {
    json!({"token": "unused", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": event_id, "event_time": now(), "event": event})
    .to_string()
}

/// A `message` event of `user` in `channel` at `ts`.
pub fn message(user: &str, channel: &str, ts: &str, text: &str) -> Value {
    let channel_type = if channel.starts_with('D') {
        "im"
    } else {
        "channel"
    };
    json!({"type": "message", "user": user, "channel": channel, "channel_type": channel_type,
        "ts": ts, "text": text, "team": "T1"})
}

/// An interaction body (form-encoded `payload=`) for a press of the button `value` by `user`.
pub fn press(user: &str, channel: &str, value: &str, action_ts: &str) -> String {
    let payload = json!({"type": "block_actions", "user": {"id": user}, "team": {"id": "T1"},
        "channel": {"id": channel}, "trigger_id": format!("trig-{action_ts}"),
        "message": {"ts": "1800000000.000000", "text": "asked", "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "asked"}},
            {"type": "actions", "elements": []}]},
        "actions": [{"type": "button", "action_id": value, "value": value,
            "action_ts": action_ts}]});
    let encoded: String = payload
        .to_string()
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            b' ' => "+".to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!("payload={encoded}")
}
