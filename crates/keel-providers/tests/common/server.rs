//! A local HTTP server for the adapters' tests: an axum app on 127.0.0.1:0, started by each
//! test, that answers one route with scripted replies (written at once: nothing sleeps) and
//! records every request it saw.

use std::io;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::post;
use futures::StreamExt;
use keel_core::{DeltaSink, StreamDelta};
use serde_json::Value;
use tokio::sync::Notify;

use super::Recorder;

/// What the mock server answers to one request.
#[derive(Clone)]
pub struct Reply {
    /// The status line's code.
    pub status: StatusCode,
    /// The `Content-Type` header.
    pub content_type: &'static str,
    /// Further headers.
    pub headers: Vec<(&'static str, &'static str)>,
    /// Body pieces, each written as it comes.
    pub chunks: Vec<Bytes>,
    /// Drop the connection after the last piece, once this is notified, instead of ending the
    /// body.
    pub break_after: Option<Arc<Notify>>,
}

impl Reply {
    /// A 200 JSON answer.
    pub fn json(body: impl Into<Bytes>) -> Self {
        Reply {
            status: StatusCode::OK,
            content_type: "application/json",
            headers: Vec::new(),
            chunks: vec![body.into()],
            break_after: None,
        }
    }

    /// A 200 event stream of these pieces.
    pub fn sse(chunks: Vec<Bytes>) -> Self {
        Reply {
            content_type: "text/event-stream",
            chunks,
            ..Reply::json("")
        }
    }

    /// `status` with a body of `content_type` (none when `body` is empty).
    pub fn status(status: u16, content_type: &'static str, body: &'static str) -> Self {
        Reply {
            status: StatusCode::from_u16(status).unwrap(),
            content_type,
            chunks: if body.is_empty() {
                Vec::new()
            } else {
                vec![Bytes::from(body)]
            },
            ..Reply::json("")
        }
    }

    /// `status` with a JSON body.
    pub fn error(status: u16, body: &str) -> Self {
        Reply {
            status: StatusCode::from_u16(status).unwrap(),
            ..Reply::json(body.to_string())
        }
    }
}

/// What the mock server saw of one request.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The request's path.
    pub path: String,
    /// All its headers.
    pub headers: HeaderMap,
    /// Its `Authorization` header.
    pub authorization: Option<String>,
    /// Its `Accept` header.
    pub accept: Option<String>,
    /// Its body, as JSON.
    pub body: Value,
}

impl Seen {
    /// The header `name`, as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().unwrap())
    }
}

/// The requests a server saw.
pub type Log = Arc<Mutex<Vec<Seen>>>;

/// The replies still to give (the last one is repeated) and the requests seen.
#[derive(Clone)]
struct Script {
    replies: Arc<Mutex<Vec<Reply>>>,
    seen: Log,
}

/// A running mock server.
pub struct MockServer {
    /// Its base URL: `http://127.0.0.1:<port>` and the base path it was started with.
    pub base_url: String,
    /// The requests it saw.
    pub seen: Log,
}

impl MockServer {
    /// The requests it saw so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The one request it saw (there must be exactly one).
    pub fn only_request(&self) -> Seen {
        let seen = self.seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        seen[0].clone()
    }
}

/// Starts a server that answers POSTs to `route` with `replies` in turn (repeating the last),
/// its base URL the server's address followed by `base_path`.
pub async fn serve(route: &str, base_path: &str, replies: Vec<Reply>) -> MockServer {
    let script = Script {
        replies: Arc::new(Mutex::new(replies)),
        seen: Log::default(),
    };
    let app = Router::new()
        .route(route, post(answer))
        .with_state(script.clone());
    MockServer {
        base_url: format!("http://{}{base_path}", listen(app).await),
        seen: script.seen,
    }
}

async fn answer(
    State(script): State<Script>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let text = |name| {
        headers
            .get(name)
            .map(|value: &header::HeaderValue| value.to_str().unwrap().to_string())
    };
    let seen = Seen {
        path: uri.path().to_string(),
        authorization: text(header::AUTHORIZATION),
        accept: text(header::ACCEPT),
        body: serde_json::from_slice(&body).unwrap(),
        headers,
    };
    script.seen.lock().unwrap().push(seen);
    let reply = {
        let mut replies = script.replies.lock().unwrap();
        if replies.len() > 1 {
            replies.remove(0)
        } else {
            replies[0].clone()
        }
    };
    let pieces = futures::stream::iter(reply.chunks.into_iter().map(Ok));
    let breaking = futures::stream::iter(reply.break_after).then(|notify| async move {
        notify.notified().await;
        Err(io::Error::other("server dropped the connection"))
    });
    let mut response = Response::builder()
        .status(reply.status)
        .header(header::CONTENT_TYPE, reply.content_type);
    for (name, value) in reply.headers {
        response = response.header(name, value);
    }
    response
        .body(Body::from_stream(pieces.chain(breaking)))
        .unwrap()
}

/// Starts a server that never answers POSTs to `route` (`None`), or sends the `opening` pieces
/// of an event stream and then stalls; returns its base URL, as [`serve`] does.
pub async fn serve_stalling(route: &str, base_path: &str, opening: Option<Vec<Bytes>>) -> String {
    let app = Router::new().route(
        route,
        post(move || {
            let opening = opening.clone();
            async move {
                let Some(pieces) = opening else {
                    return std::future::pending::<Response>().await;
                };
                let stalled = futures::stream::iter(pieces.into_iter().map(Ok::<_, io::Error>))
                    .chain(futures::stream::pending());
                Response::builder()
                    .header(header::CONTENT_TYPE, "text/event-stream")
                    .body(Body::from_stream(stalled))
                    .unwrap()
            }
        }),
    );
    format!("http://{}{base_path}", listen(app).await)
}

/// Serves `app` on 127.0.0.1 at a free port, in the background; returns the address.
async fn listen(app: Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// An address nothing listens on (bound, then closed): connecting to it is refused.
pub fn closed_address() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr
}

/// A sink that records the deltas and, at the first text, notifies the server to drop the
/// connection, so that the break falls mid-stream.
pub struct BreakOnText(pub Recorder, pub Arc<Notify>);

impl DeltaSink for BreakOnText {
    fn delta(&self, delta: &StreamDelta) {
        if let StreamDelta::Text { .. } = delta {
            self.1.notify_one();
        }
        self.0.delta(delta);
    }
}
