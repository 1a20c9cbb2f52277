//! A fake Discord for end-to-end tests, on real sockets in the test process: a Gateway (a
//! WebSocket server: Hello, expects Identify or Resume, answers Ready or Resumed, acknowledges
//! and counts heartbeats, sends the dispatches the test injects) and the REST API (axum:
//! `GET /gateway/bot`, messages and typing recorded, answers the test queues first, like a 429).

#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as Frame;

/// The bot's own user id on the fake.
pub const BOT_ID: &str = "4242";

/// The token the daemon must present.
pub const TOKEN: &str = "test-token";

/// A message keel posted.
#[derive(Clone, Debug)]
pub struct Posted {
    /// The channel it went to.
    pub channel: String,
    /// Its body as sent.
    pub body: Value,
}

enum Command {
    Text(String),
    Drop,
}

#[derive(Default)]
struct Inner {
    posted: Vec<Posted>,
    typing: Vec<String>,
    heartbeats: usize,
    identifies: Vec<Value>,
    resumes: Vec<Value>,
    unauthorized: usize,
    refusals: VecDeque<(usize, u16, Value)>,
    socket: Option<mpsc::UnboundedSender<Command>>,
    seq: u64,
    next_id: u64,
}

/// The fake: its URLs, what it saw.
pub struct FakeDiscord {
    /// Runs the fake's servers (and the test's async calls).
    pub rt: tokio::runtime::Runtime,
    /// The REST base URL (`rest_url`).
    pub rest_url: String,
    /// The Gateway's URL.
    pub gateway_url: String,
    inner: Arc<Mutex<Inner>>,
}

impl FakeDiscord {
    /// Starts the fake on 127.0.0.1.
    pub fn start() -> FakeDiscord {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let inner = Arc::new(Mutex::new(Inner {
            next_id: 900_000,
            ..Inner::default()
        }));
        let (rest_url, gateway_url) = rt.block_on(async {
            let ws = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let gateway_url = format!("ws://{}", ws.local_addr().unwrap());
            let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let rest_url = format!("http://{}/api/v10", http.local_addr().unwrap());
            let state = (inner.clone(), gateway_url.clone());
            let app = axum::Router::new()
                .route("/api/v10/gateway/bot", get(gateway_bot))
                .route("/api/v10/channels/{id}/messages", post(message))
                .route("/api/v10/channels/{id}/typing", post(typing))
                .with_state(state);
            tokio::spawn(async move { axum::serve(http, app).await.unwrap() });
            let gateway = (inner.clone(), gateway_url.clone());
            tokio::spawn(async move {
                while let Ok((stream, _)) = ws.accept().await {
                    tokio::spawn(socket(stream, gateway.0.clone(), gateway.1.clone()));
                }
            });
            (rest_url, gateway_url)
        });
        FakeDiscord {
            rt,
            rest_url,
            gateway_url,
            inner,
        }
    }

    /// Waits until a connection identified (or resumed) `count` times in all.
    pub fn until_connected(&self, count: usize) {
        self.until(&format!("{count} identify/resume"), |inner| {
            inner.identifies.len() + inner.resumes.len() >= count && inner.socket.is_some()
        });
    }

    /// Sends a dispatch `kind` with `data` on the current connection.
    pub fn dispatch(&self, kind: &str, data: Value) {
        let mut inner = self.inner.lock().unwrap();
        inner.seq += 1;
        let text = json!({"op": 0, "t": kind, "s": inner.seq, "d": data}).to_string();
        let socket = inner.socket.as_ref().expect("a gateway connection");
        socket.send(Command::Text(text)).unwrap();
    }

    /// Sends `text` as it is (any payload, or not JSON at all).
    pub fn raw(&self, text: &str) {
        let inner = self.inner.lock().unwrap();
        let socket = inner.socket.as_ref().expect("a gateway connection");
        socket.send(Command::Text(text.to_string())).unwrap();
    }

    /// Drops the current connection without a close frame.
    pub fn drop_connection(&self) {
        let mut inner = self.inner.lock().unwrap();
        if let Some(socket) = inner.socket.take() {
            let _ = socket.send(Command::Drop);
        }
    }

    /// Answers the next message post with `status` and `body` instead of taking it.
    pub fn refuse_next(&self, status: u16, body: Value) {
        self.refuse_later(0, status, body);
    }

    /// Takes `skip` message posts, then answers the next with `status` and `body`.
    pub fn refuse_later(&self, skip: usize, status: u16, body: Value) {
        let mut inner = self.inner.lock().unwrap();
        inner.refusals.push_back((skip, status, body));
    }

    /// Every message posted so far.
    pub fn posted(&self) -> Vec<Posted> {
        self.inner.lock().unwrap().posted.clone()
    }

    /// The messages posted to `channel`.
    pub fn posted_to(&self, channel: &str) -> Vec<Value> {
        self.posted()
            .into_iter()
            .filter(|p| p.channel == channel)
            .map(|p| p.body)
            .collect()
    }

    /// Waits until `channel` got `count` messages; returns them.
    pub fn until_posted(&self, channel: &str, count: usize) -> Vec<Value> {
        self.until(&format!("{count} message(s) in {channel}"), |inner| {
            inner.posted.iter().filter(|p| p.channel == channel).count() >= count
        });
        self.posted_to(channel)
    }

    /// Channels typing was shown in.
    pub fn typing(&self) -> Vec<String> {
        self.inner.lock().unwrap().typing.clone()
    }

    /// Heartbeats received.
    pub fn heartbeats(&self) -> usize {
        self.inner.lock().unwrap().heartbeats
    }

    /// Identify payloads received.
    pub fn identifies(&self) -> Vec<Value> {
        self.inner.lock().unwrap().identifies.clone()
    }

    /// Resume payloads received.
    pub fn resumes(&self) -> Vec<Value> {
        self.inner.lock().unwrap().resumes.clone()
    }

    /// Requests refused for a wrong token.
    pub fn unauthorized(&self) -> usize {
        self.inner.lock().unwrap().unauthorized
    }

    /// Waits, a few ms at a time for at most a minute, until `done`.
    fn until(&self, what: &str, done: impl Fn(&Inner) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if done(&self.inner.lock().unwrap()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let inner = self.inner.lock().unwrap();
        panic!(
            "the fake Discord never saw {what}; posted: {:?}",
            inner.posted
        );
    }
}

type Shared = (Arc<Mutex<Inner>>, String);

async fn gateway_bot(State((_, gateway)): State<Shared>) -> Json<Value> {
    Json(json!({"url": gateway, "shards": 1}))
}

fn authorized(inner: &Mutex<Inner>, headers: &HeaderMap) -> bool {
    let ok =
        headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bot {TOKEN}"));
    if !ok {
        inner.lock().unwrap().unauthorized += 1;
    }
    ok
}

async fn message(
    State((inner, _)): State<Shared>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if !authorized(&inner, &headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let mut inner = inner.lock().unwrap();
    match inner.refusals.front_mut() {
        Some((skip, _, _)) if *skip > 0 => *skip -= 1,
        Some(_) => {
            let (_, status, refusal) = inner.refusals.pop_front().unwrap();
            return (StatusCode::from_u16(status).unwrap(), Json(refusal)).into_response();
        }
        None => {}
    }
    inner.next_id += 1;
    let id = inner.next_id.to_string();
    inner.posted.push(Posted {
        channel: channel.clone(),
        body,
    });
    Json(json!({"id": id, "channel_id": channel})).into_response()
}

async fn typing(
    State((inner, _)): State<Shared>,
    Path(channel): Path<String>,
    headers: HeaderMap,
) -> StatusCode {
    if !authorized(&inner, &headers) {
        return StatusCode::UNAUTHORIZED;
    }
    inner.lock().unwrap().typing.push(channel);
    StatusCode::NO_CONTENT
}

/// One Gateway connection.
async fn socket(stream: tokio::net::TcpStream, inner: Arc<Mutex<Inner>>, url: String) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    let hello = json!({"op": 10, "d": {"heartbeat_interval": 100}}).to_string();
    if ws.send(Frame::text(hello)).await.is_err() {
        return;
    }
    let Some(Ok(Frame::Text(first))) = ws.next().await else {
        return;
    };
    let first: Value = serde_json::from_str(&first).unwrap_or(Value::Null);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let answer = {
        let mut inner = inner.lock().unwrap();
        inner.seq += 1;
        let answer = match first["op"].as_u64() {
            Some(2) if first["d"]["token"] == TOKEN => {
                inner.identifies.push(first.clone());
                json!({"op": 0, "t": "READY", "s": inner.seq, "d": {
                    "v": 10, "session_id": "session-1", "resume_gateway_url": url,
                    "user": {"id": BOT_ID, "username": "keel", "bot": true},
                    "guilds": [],
                }})
            }
            Some(6) if first["d"]["token"] == TOKEN => {
                inner.resumes.push(first.clone());
                json!({"op": 0, "t": "RESUMED", "s": inner.seq, "d": null})
            }
            _ => return,
        };
        inner.socket = Some(tx);
        answer
    };
    if ws.send(Frame::text(answer.to_string())).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            frame = ws.next() => match frame {
                Some(Ok(Frame::Text(text))) => {
                    let payload: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    if payload["op"] == 1 {
                        inner.lock().unwrap().heartbeats += 1;
                        let ack = json!({"op": 11}).to_string();
                        if ws.send(Frame::text(ack)).await.is_err() {
                            return;
                        }
                    }
                }
                Some(Ok(_)) => {}
                _ => return,
            },
            command = rx.recv() => match command {
                Some(Command::Text(text)) => {
                    if ws.send(Frame::text(text)).await.is_err() {
                        return;
                    }
                }
                Some(Command::Drop) | None => return,
            },
        }
    }
}
