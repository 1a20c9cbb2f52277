//! The HTTP mock server: axum routes that take the next script step and answer it in the wire
//! format of the route's API, injecting the step's faults (delays, errors, cut streams,
//! mid-stream error events). One script cursor serves every route: each request takes one step,
//! whatever its API, from its model's own steps if the script has some, else from the
//! top-level steps; in a per-turn script, the step at the request's position in its turn.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use keel_core::ProviderErrorKind;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::answer::{Answer, error_kind, exhausted_message};
use crate::chat_completions::ChatCompletions;
use crate::cursor::{Cursor, Turn};
use crate::messages::Messages;
use crate::responses::Responses;
use crate::script::{CutMode, ErrorReply, Script, StreamError};
use crate::wire::{Events, RequestInfo, WireApi, failure_message};

/// The largest request body the server reads.
const BODY_LIMIT: usize = 64 * 1024 * 1024;

/// A failure to start or run the mock server.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    /// The address could not be bound.
    #[error("keel-mock cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why binding failed.
        source: io::Error,
    },
    /// The server stopped with an I/O error.
    #[error("keel-mock server failed: {0}")]
    Serve(#[source] io::Error),
}

/// State shared by all requests: the script's cursor and the recorded request bodies.
#[derive(Debug)]
struct Shared {
    cursor: Cursor,
    requests: Mutex<Vec<Value>>,
    record: bool,
    /// When each recorded request arrived and was answered, beside it (same index).
    timeline: Mutex<Vec<Timing>>,
    started: std::time::Instant,
}

/// When one request arrived and when its answer began, in milliseconds since the server
/// started, with the model it asked for.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct Timing {
    received_ms: u64,
    answered_ms: Option<u64>,
    model: Option<String>,
}

/// How a [`MockServer`] serves, besides its script.
#[derive(Clone, Copy, Debug)]
pub struct ServeOptions {
    /// Keep every request body for [`MockServer::requests`] (the default). Off for benchmarks,
    /// where bodies would pile up in memory.
    pub record: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions { record: true }
    }
}

impl Shared {
    fn new(script: Script, options: ServeOptions) -> Arc<Shared> {
        Arc::new(Shared {
            cursor: Cursor::new(script),
            requests: Mutex::new(Vec::new()),
            record: options.record,
            timeline: Mutex::new(Vec::new()),
            started: std::time::Instant::now(),
        })
    }

    /// Records a request body; returns its index in the log (for [`Shared::answered`]).
    fn record(&self, body: &[u8]) -> Option<usize> {
        if !self.record {
            return None;
        }
        let value = serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
        let mut requests = self.recorded();
        requests.push(value);
        // Pushed under the requests' lock, so both logs keep the same order.
        self.timings().push(Timing {
            received_ms: self.elapsed_ms(),
            ..Timing::default()
        });
        Some(requests.len() - 1)
    }

    /// Notes that the answer to request `index` (asking for `model`) begins now.
    fn answered(&self, index: Option<usize>, model: &str) {
        let now = self.elapsed_ms();
        if let Some(i) = index {
            let mut timings = self.timings();
            if let Some(timing) = timings.get_mut(i) {
                timing.answered_ms = Some(now);
                timing.model = Some(model.to_string());
            }
        }
    }

    fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn timings(&self) -> std::sync::MutexGuard<'_, Vec<Timing>> {
        // Pushing to or setting a field of a Vec cannot leave it half-updated.
        self.timeline.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn recorded(&self) -> std::sync::MutexGuard<'_, Vec<Value>> {
        // Pushing to a Vec cannot leave it half-updated, so a poisoned lock is safe to use.
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running mock server, serving a script on the caller's tokio runtime. Dropping it stops the
/// server.
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl MockServer {
    /// Binds `bind` (port 0 picks a free port) and serves `script` in a spawned task.
    pub async fn start(bind: SocketAddr, script: Script) -> Result<MockServer, MockError> {
        Self::start_with(bind, script, ServeOptions::default()).await
    }

    /// [`MockServer::start`] with `options`.
    pub async fn start_with(
        bind: SocketAddr,
        script: Script,
        options: ServeOptions,
    ) -> Result<MockServer, MockError> {
        let (listener, addr) = listen(bind).await?;
        let shared = Shared::new(script, options);
        let app = router(shared.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            // axum's serve only returns once shutdown completes; accept errors are retried
            // inside it, so there is nothing to report here.
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(MockServer {
            addr,
            shared,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// Starts a server on a free port of 127.0.0.1.
    pub async fn start_local(script: Script) -> Result<MockServer, MockError> {
        Self::start(SocketAddr::from(([127, 0, 0, 1], 0)), script).await
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The API base URL, `http://ADDR/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The request bodies received so far on every API route, in arrival order (a body that is
    /// not JSON is recorded as a JSON string of its text).
    pub fn requests(&self) -> Vec<Value> {
        self.shared.recorded().clone()
    }

    /// Stops accepting requests and waits for the responses in flight to finish.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Serves `script` on `bind` until the process ends; `ready` gets the bound address first (the
/// `keel mock-provider` command prints it).
pub async fn serve_forever(
    bind: SocketAddr,
    script: Script,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), MockError> {
    let (listener, addr) = listen(bind).await?;
    let shared = Shared::new(script, ServeOptions::default());
    ready(addr);
    axum::serve(listener, router(shared))
        .await
        .map_err(MockError::Serve)
}

async fn listen(bind: SocketAddr) -> Result<(TcpListener, SocketAddr), MockError> {
    let bind_error = |source| MockError::Bind { addr: bind, source };
    let listener = TcpListener::bind(bind).await.map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    Ok((listener, addr))
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(answer::<ChatCompletions>))
        .route("/v1/messages", post(answer::<Messages>))
        .route("/v1/responses", post(answer::<Responses>))
        .route("/v1/embeddings", post(crate::embeddings::answer))
        .route("/v1/_mock/requests", get(recorded_requests))
        .route("/v1/_mock/timeline", get(recorded_timeline))
        .fallback(unknown_route)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(shared)
}

async fn recorded_requests(State(shared): State<Arc<Shared>>) -> Response {
    let requests = Value::Array(shared.recorded().clone());
    json_response(StatusCode::OK, requests.to_string())
}

async fn recorded_timeline(State(shared): State<Arc<Shared>>) -> Response {
    let timeline = serde_json::to_string(&*shared.timings()).unwrap_or_else(|_| "[]".into());
    json_response(StatusCode::OK, timeline)
}

async fn unknown_route(method: Method, uri: Uri) -> Response {
    let body = ChatCompletions::invalid_request_body(&crate::wire::Invalid::new(
        format!("Invalid URL ({method} {})", uri.path()),
        None,
    ));
    json_response(StatusCode::NOT_FOUND, body)
}

/// Answers one request of API `A` with the next step for its model (per turn: the step at its
/// position). Every body is recorded; an invalid request (headers or body) is answered 400
/// without consuming a step.
async fn answer<A: WireApi>(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let index = shared.record(&body);
    let request = match A::check_headers(&headers).and_then(|()| A::read_request(&body)) {
        Ok(request) => request,
        Err(invalid) => {
            return json_response(StatusCode::BAD_REQUEST, A::invalid_request_body(&invalid));
        }
    };
    let (ids, step) = match shared.cursor.take(&request.model, || request.turn_position) {
        Turn::Answer { ids, step, .. } => (ids, step),
        Turn::Exhausted { served, model } => {
            let message = exhausted_message(served, model.as_deref());
            let body = A::error_body(500, ProviderErrorKind::Server, &message);
            return json_response(StatusCode::INTERNAL_SERVER_ERROR, body);
        }
    };
    if step.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(step.delay_ms)).await;
    }
    shared.answered(index, &request.model);
    if let Some(error) = &step.error {
        return error_response::<A>(error, &request);
    }
    let step = crate::answer::echoed(step, || crate::answer::last_user_text(&body));
    let answer = Answer::from_step(
        &step,
        ids,
        || request.size,
        &request.model,
        A::CALL_ID_PREFIX,
    );
    let cut = step
        .cut_after_chunks
        .map(|n| (n, step.cut_mode.unwrap_or_default()));
    let delay = Duration::from_millis(step.chunk_delay_ms);
    if request.stream {
        let events = A::stream_events(&answer, &request, step.stream_error.as_ref());
        stream_response(events, delay, cut)
    } else if let Some(failure) = &step.stream_error {
        failed_whole_answer::<A>(failure, &request)
    } else if let Some((_, mode)) = cut {
        // A cut whole answer: the first half of the body, then the break.
        let mut body = A::whole_body(&answer, &request);
        let half = (0..=body.len() / 2)
            .rev()
            .find(|&i| body.is_char_boundary(i))
            .unwrap_or(0);
        body.truncate(half);
        let events = Events {
            frames: vec![body],
            content: 1,
        };
        let mut response = stream_response(events, Duration::ZERO, Some((1, mode)));
        set_header(&mut response, header::CONTENT_TYPE, "application/json");
        response
    } else {
        json_response(StatusCode::OK, A::whole_body(&answer, &request))
    }
}

/// A whole answer whose generation fails: the API's HTTP error for the failure's kind.
fn failed_whole_answer<A: WireApi>(failure: &StreamError, request: &RequestInfo) -> Response {
    let status = A::status_for(failure.kind);
    let body = A::error_body(
        status,
        failure.kind,
        &failure_message::<A>(failure, request),
    );
    // `status_for` gives 400–599 statuses; anything else would still answer, as a 500.
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, body)
}

fn error_response<A: WireApi>(error: &ErrorReply, request: &RequestInfo) -> Response {
    // Statuses are checked to be 400–599 when a script loads; a step built in code with a
    // status that is no status at all still answers, as a 500.
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let (body, content_type) = match &error.body {
        Some(Value::String(text)) => (text.clone(), "text/plain; charset=utf-8"),
        Some(value) => (value.to_string(), "application/json"),
        None => {
            let kind = error_kind(error);
            let message = A::default_message(error.status, kind, request);
            let body = A::error_body(error.status, kind, &message);
            (body, "application/json")
        }
    };
    let mut response = (status, body).into_response();
    set_header(&mut response, header::CONTENT_TYPE, content_type);
    for (name, value) in &error.headers {
        // Header names and values are checked when a script loads; an invalid one from a step
        // built in code is left out.
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// Streams `events` as `text/event-stream`, pausing `delay` between frames. With a cut, only
/// the first `n` content frames go out; then the connection breaks (`Abort`: the body yields an
/// error, so the server aborts it) or the body ends cleanly (`Eof`).
fn stream_response(events: Events, delay: Duration, cut: Option<(usize, CutMode)>) -> Response {
    let Events {
        mut frames,
        content,
    } = events;
    let abort = match cut {
        Some((n, mode)) => {
            frames.truncate(n.min(content));
            mode == CutMode::Abort
        }
        None => false,
    };
    let items = frames
        .into_iter()
        .enumerate()
        .map(Some)
        .chain(abort.then_some(None));
    let body = futures::stream::iter(items).then(move |item| async move {
        match item {
            Some((index, frame)) => {
                if index > 0 && !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                Ok(Bytes::from(frame))
            }
            None => {
                // The break comes when the next frame would have. Returning `Pending` once
                // first makes hyper flush what was sent: on a body error it closes the
                // connection at once, dropping anything still buffered (even the headers).
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                tokio::task::yield_now().await;
                Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "keel-mock: stream cut by the script",
                ))
            }
        }
    });
    let mut response = Response::new(Body::from_stream(body));
    let headers: &mut HeaderMap = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    set_header(&mut response, header::CONTENT_TYPE, "application/json");
    response
}

fn set_header(response: &mut Response, name: HeaderName, value: &'static str) {
    response
        .headers_mut()
        .insert(name, HeaderValue::from_static(value));
}
