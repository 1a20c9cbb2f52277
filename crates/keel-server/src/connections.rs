//! The daemon's HTTP connections: accepted under a cap, each given a deadline for every request
//! head and for every request body, so slow or idle clients cannot hold the daemon's sockets
//! (slowloris). A connection over the cap is answered `503` with `Retry-After` and closed at
//! once, not left waiting in the kernel's backlog.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::time::{Instant, Sleep};
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// How many connections the daemon holds and how long a client may take to send a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections held open at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// The most a client may take to send a request's head (line and headers), counted from
    /// when the connection is ready for it — also how long an idle keep-alive connection stays.
    pub header_timeout: Duration,
    /// The most a client may take to send a request's whole body, counted from its head.
    pub body_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
        }
    }
}

/// What a request body that missed its deadline reads as: the JSON extractor answers 408 for it.
pub const BODY_TIMED_OUT: &str = "the request body did not arrive in time";

/// Serves `app` on `listener` under `limits` until `stop` resolves; then stops accepting, lets
/// each open connection finish the request it is in and closes it, and returns when all are
/// closed.
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    stop: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let (closing_tx, closing_rx) = watch::channel(false);
    let tracker = TaskTracker::new();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            // Out of descriptors or a connection reset before it was taken: the listener is
            // fine; give the others a moment to close before taking the next.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracker.spawn(refuse_busy(stream));
            continue;
        };
        let app = app.clone();
        let mut closing = closing_rx.clone();
        tracker.spawn(async move {
            let _permit = permit;
            let body_timeout = limits.body_timeout;
            let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                let request = request.map(|body| Body::new(DeadlineBody::new(body, body_timeout)));
                app.clone().oneshot(request)
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = async { drop(closing.wait_for(|closing| *closing).await) } => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    tracker.close();
    tracker.wait().await;
}

/// Answers a connection over the cap with a JSON 503 and closes it, giving up on a client that
/// does not take the answer within a second.
async fn refuse_busy(mut stream: tokio::net::TcpStream) {
    let body = r#"{"error":{"code":"unavailable","message":"the server holds as many connections as it takes; try again shortly"}}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// A request body that fails once its deadline passes: the whole body must arrive within the
/// body timeout, however slowly it drips.
struct DeadlineBody {
    inner: Incoming,
    deadline: Pin<Box<Sleep>>,
}

impl DeadlineBody {
    fn new(inner: Incoming, timeout: Duration) -> Self {
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep_until(Instant::now() + timeout)),
        }
    }
}

/// The error of a body that missed its deadline, or of the connection under it.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("{BODY_TIMED_OUT}")]
    TimedOut,
    #[error(transparent)]
    Connection(#[from] hyper::Error),
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(BodyError::from)));
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyError::TimedOut))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
