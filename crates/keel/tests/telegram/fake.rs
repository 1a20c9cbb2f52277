//! A fake Telegram Bot API for the end-to-end tests: axum on 127.0.0.1:0 in the test process.
//! It serves `getMe` and `getUpdates` (long polling: updates at or past `offset` at once, or
//! when one arrives within `timeout`; an `offset` confirms the updates before it, as Telegram
//! does) from a queue the test fills, `getFile` and the files' bytes, and records every call
//! (`sendMessage`, `editMessageText`, `sendChatAction`, `answerCallbackQuery`, ...). It can be
//! told to answer `sendMessage` with a 429 (`retry_after`) or 503s for a while. For the
//! channels bench (`benches/channels.rs`) it also keeps when each update was first handed out
//! and when each `sendMessage` arrived, for which chat.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The token the fake accepts.
pub const TOKEN: &str = "123456:TEST-token";
/// The bot's id and username.
pub const BOT_ID: i64 = 999;
/// The bot's username.
pub const BOT_NAME: &str = "keel_test_bot";

/// A refusal the fake gives `sendMessage`.
#[derive(Clone, Debug)]
pub enum Fail {
    /// 429 with `retry_after` seconds.
    TooMany(u64),
    /// 503 until this long after the first 503 was given.
    Down(Duration),
}

#[derive(Default)]
struct Inner {
    updates: Vec<Value>,
    next_update: i64,
    calls: Vec<(String, Value)>,
    next_message: i64,
    files: HashMap<String, Vec<u8>>,
    fails: VecDeque<Fail>,
    down_until: Option<Instant>,
    offsets: Vec<i64>,
    /// Updates served once whatever the offset (a redelivery), to a `getUpdates` that arrives
    /// after this many had.
    forced: Vec<(usize, Value)>,
    polls: usize,
    /// When the fake started: each call is recorded with `_ms` since.
    born: Option<Instant>,
    /// When each update was first handed to a `getUpdates`, by update id.
    served: HashMap<i64, Instant>,
    /// The chat and instant of each `sendMessage` that succeeded, in order.
    sends: Vec<(i64, Instant)>,
}

#[derive(Default)]
struct Shared {
    inner: Mutex<Inner>,
    arrived: Notify,
}

/// The running fake.
pub struct FakeTelegram {
    /// Its base URL (the channel's `api_url`).
    pub url: String,
    shared: Arc<Shared>,
}

impl FakeTelegram {
    /// Starts it.
    pub async fn start() -> FakeTelegram {
        let shared = Arc::new(Shared::default());
        shared.inner.lock().unwrap().next_update = 1000;
        shared.inner.lock().unwrap().next_message = 1;
        shared.inner.lock().unwrap().born = Some(Instant::now());
        let app = Router::new()
            .route("/{bot}/{method}", post(method))
            .route("/file/{bot}/{*path}", get(file))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeTelegram { url, shared }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.shared.inner.lock().unwrap()
    }

    /// Queues `update` (its `update_id` given here when it has none); returns its id.
    pub fn push(&self, mut update: Value) -> i64 {
        let id = {
            let mut inner = self.lock();
            let id = match update["update_id"].as_i64() {
                Some(id) => id,
                None => {
                    inner.next_update += 1;
                    update["update_id"] = json!(inner.next_update);
                    inner.next_update
                }
            };
            inner.updates.push(update);
            id
        };
        self.shared.arrived.notify_waiters();
        id
    }

    /// Serves `update` (with its `update_id`) again, whatever the offset, to the first
    /// `getUpdates` that arrives from now on (not to one waiting already, which may be a killed
    /// daemon's): what Telegram does when keel died before it confirmed the update.
    pub fn redeliver(&self, update: Value) {
        let mut inner = self.lock();
        let polls = inner.polls;
        inner.forced.push((polls, update));
    }

    /// Queues a text message from `from` in `chat`; returns its update id.
    pub fn message(&self, chat: Value, from: i64, text: &str) -> i64 {
        let message_id = self.next_message();
        self.push(json!({"message": {
            "message_id": message_id, "date": 0, "chat": chat, "text": text,
            "from": {"id": from, "is_bot": false, "first_name": "P", "username": format!("user{from}")},
        }}))
    }

    /// Queues a press by `from` of a button with `data`; returns its update id.
    pub fn press(&self, from: i64, data: &str) -> i64 {
        let id = format!("cb{}", self.next_message());
        self.push(json!({"callback_query": {
            "id": id, "chat_instance": "1", "data": data,
            "from": {"id": from, "is_bot": false, "first_name": "P"},
        }}))
    }

    /// Keeps a file for `getFile` and its download.
    pub fn file(&self, file_id: &str, bytes: &[u8]) {
        self.lock().files.insert(file_id.into(), bytes.to_vec());
    }

    /// Answers the next `sendMessage` calls with these refusals, in order.
    pub fn fail_sends(&self, fails: Vec<Fail>) {
        self.lock().fails.extend(fails);
    }

    fn next_message(&self) -> i64 {
        let mut inner = self.lock();
        inner.next_message += 1;
        inner.next_message
    }

    /// Every call so far: method and body.
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.lock().calls.clone()
    }

    /// The bodies of the calls of `method`.
    pub fn calls_of(&self, method: &str) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter(|(m, _)| m == method)
            .map(|(_, body)| body)
            .collect()
    }

    /// The `sendMessage` bodies that succeeded, to `chat`.
    pub fn sent_to(&self, chat: i64) -> Vec<Value> {
        self.calls_of("sendMessage")
            .into_iter()
            .filter(|body| body["chat_id"] == json!(chat) && body["_ok"] == json!(true))
            .collect()
    }

    /// The messages of `chat` as they read now, in the order they were sent: each sent text
    /// with the later edits of its message applied (a streamed draft reads as what it became).
    pub fn shown_to(&self, chat: i64) -> Vec<String> {
        let mut shown: Vec<(Value, String)> = Vec::new();
        for (method, body) in self.calls() {
            if body["chat_id"] != json!(chat) || body["_ok"] != json!(true) {
                continue;
            }
            let text = body["text"].as_str().unwrap_or("").to_string();
            match method.as_str() {
                "sendMessage" => shown.push((body["_message_id"].clone(), text)),
                "editMessageText" => {
                    if let Some(message) =
                        shown.iter_mut().find(|(id, _)| *id == body["message_id"])
                    {
                        message.1 = text;
                    }
                }
                _ => {}
            }
        }
        shown.into_iter().map(|(_, text)| text).collect()
    }

    /// When update `id` was first handed to a `getUpdates`, if it was.
    pub fn served_at(&self, id: i64) -> Option<Instant> {
        self.lock().served.get(&id).copied()
    }

    /// How many `sendMessage` calls succeeded so far (cheap: for a bench's waits).
    pub fn sends_count(&self) -> usize {
        self.lock().sends.len()
    }

    /// The chat and arrival instant of each `sendMessage` that succeeded, in order.
    pub fn sends(&self) -> Vec<(i64, Instant)> {
        self.lock().sends.clone()
    }

    /// The offsets `getUpdates` was called with.
    pub fn offsets(&self) -> Vec<i64> {
        self.lock().offsets.clone()
    }

    /// Waits (a few ms at a time, up to `within`) until `check` holds of the calls.
    pub async fn until(&self, what: &str, within: Duration, check: impl Fn(&FakeTelegram) -> bool) {
        let deadline = Instant::now() + within;
        while !check(self) {
            if Instant::now() > deadline {
                let calls: Vec<String> = self
                    .calls()
                    .iter()
                    .filter(|(m, _)| m != "getUpdates")
                    .map(|(m, b)| format!("{m} {b}"))
                    .collect();
                panic!(
                    "the fake Telegram never saw {what}; its calls:\n{}",
                    calls.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn ok(result: Value) -> Response {
    axum::Json(json!({"ok": true, "result": result})).into_response()
}

fn refuse(status: u16, description: &str, retry_after: Option<u64>) -> Response {
    let mut body = json!({"ok": false, "error_code": status, "description": description});
    if let Some(seconds) = retry_after {
        body["parameters"] = json!({"retry_after": seconds});
    }
    (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response()
}

async fn method(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    if bot != format!("bot{TOKEN}") {
        return refuse(401, "Unauthorized", None);
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
    if method == "getUpdates" {
        return get_updates(shared, body).await;
    }
    let mut inner = shared.inner.lock().unwrap();
    let mut recorded = body.clone();
    if let Some(born) = inner.born {
        recorded["_ms"] = json!(born.elapsed().as_millis() as u64);
    }
    let answer = match method.as_str() {
        "getMe" => {
            ok(json!({"id": BOT_ID, "is_bot": true, "first_name": "Keel", "username": BOT_NAME}))
        }
        "sendMessage" => {
            let now = Instant::now();
            let refusal = if inner.down_until.is_some_and(|until| now < until) {
                Some(refuse(503, "Service Unavailable", None))
            } else {
                match inner.fails.pop_front() {
                    Some(Fail::TooMany(seconds)) => {
                        Some(refuse(429, "Too Many Requests: retry later", Some(seconds)))
                    }
                    Some(Fail::Down(during)) => {
                        inner.down_until = Some(now + during);
                        Some(refuse(503, "Service Unavailable", None))
                    }
                    None => None,
                }
            };
            match refusal {
                Some(refusal) => refusal,
                None if body["chat_id"] == json!(-404) => {
                    refuse(400, "Bad Request: chat not found", None)
                }
                None => {
                    inner.next_message += 1;
                    recorded["_ok"] = json!(true);
                    recorded["_message_id"] = json!(inner.next_message);
                    let chat = body["chat_id"].as_i64().unwrap_or(0);
                    inner.sends.push((chat, now));
                    ok(json!({"message_id": inner.next_message, "date": 0,
                        "chat": {"id": body["chat_id"], "type": "private"}, "text": body["text"]}))
                }
            }
        }
        "editMessageText" => {
            recorded["_ok"] = json!(true);
            ok(json!({"message_id": body["message_id"], "date": 0,
            "chat": {"id": body["chat_id"], "type": "private"}, "text": body["text"]}))
        }
        "sendChatAction" | "answerCallbackQuery" | "deleteMessage" => ok(json!(true)),
        "getFile" => {
            let id = body["file_id"].as_str().unwrap_or("");
            match inner.files.get(id) {
                Some(bytes) => ok(json!({"file_id": id, "file_unique_id": id,
                    "file_size": bytes.len(), "file_path": format!("documents/{id}")})),
                None => refuse(400, "Bad Request: invalid file_id", None),
            }
        }
        _ => refuse(404, "Not Found: method not found", None),
    };
    inner.calls.push((method, recorded));
    answer
}

async fn get_updates(shared: Arc<Shared>, body: Value) -> Response {
    let offset = body["offset"].as_i64().unwrap_or(0);
    let timeout = Duration::from_secs(body["timeout"].as_u64().unwrap_or(0).min(5));
    let deadline = tokio::time::Instant::now() + timeout;
    let arrival = {
        let mut inner = shared.inner.lock().unwrap();
        inner.polls += 1;
        inner.polls
    };
    loop {
        let arrived = shared.arrived.notified();
        {
            let mut inner = shared.inner.lock().unwrap();
            inner.offsets.push(offset);
            inner.calls.push(("getUpdates".into(), body.clone()));
            // An offset confirms every update before it.
            inner
                .updates
                .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
            let (mut ready, later): (Vec<_>, Vec<_>) = std::mem::take(&mut inner.forced)
                .into_iter()
                .partition(|(since, _)| *since < arrival);
            inner.forced = later;
            let mut ready: Vec<Value> = ready.drain(..).map(|(_, update)| update).collect();
            ready.extend(inner.updates.iter().take(100).cloned());
            if !ready.is_empty() {
                let now = Instant::now();
                for update in &ready {
                    if let Some(id) = update["update_id"].as_i64() {
                        inner.served.entry(id).or_insert(now);
                    }
                }
                return ok(json!(ready));
            }
        }
        if tokio::time::timeout_at(deadline, arrived).await.is_err() {
            return ok(json!([]));
        }
    }
}

async fn file(
    State(shared): State<Arc<Shared>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    if bot != format!("bot{TOKEN}") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let id = path.trim_start_matches("documents/");
    match shared.inner.lock().unwrap().files.get(id) {
        Some(bytes) => bytes.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
