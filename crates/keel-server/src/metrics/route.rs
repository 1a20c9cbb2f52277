//! `GET /metrics`: on the API, for an admin key only (a user's key is 403: the series name
//! every user and model); and, with `[telemetry] metrics_bind`, on a listener of its own that
//! serves nothing else and asks for no key (for a Prometheus on the same host or network).

use std::future::Future;
use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::auth::Caller;
use crate::connections::{ConnectionLimits, serve_connections};
use crate::error::ApiError;
use crate::state::AppState;

/// The API's `/metrics` route (an admin key).
pub fn routes() -> Router<AppState> {
    Router::new().route("/metrics", get(admin_scrape))
}

async fn admin_scrape(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    if !caller.admin {
        return Err(ApiError::forbidden(
            "the metrics name every user and model: an admin key is needed (or scrape \
             `[telemetry] metrics_bind`)",
        ));
    }
    scrape(&state).await
}

async fn scrape(state: &AppState) -> Result<Response, ApiError> {
    let text = super::scrape::render(state).await?;
    Ok(([(header::CONTENT_TYPE, super::scrape::CONTENT_TYPE)], text).into_response())
}

/// The keyless listener's router: `GET /metrics`, and 404 for anything else.
pub fn keyless(state: AppState) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(state): State<AppState>| async move { scrape(&state).await }),
        )
        .fallback(|| async { ApiError::not_found("this path (only /metrics is served here)") })
        .with_state(state)
}

/// Serves [`keyless`] on `listener` until `stop` resolves.
pub async fn serve_keyless(
    listener: tokio::net::TcpListener,
    state: AppState,
    stop: impl Future<Output = ()>,
) {
    let limits = ConnectionLimits {
        max_connections: 64,
        ..ConnectionLimits::default()
    };
    serve_connections(listener, keyless(state), limits, stop).await;
}

/// The keyless `/metrics` listener (`[telemetry] metrics_bind`), served in the background.
pub struct KeylessMetrics {
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl KeylessMetrics {
    /// Listens on `bind` and serves [`keyless`] until [`KeylessMetrics::stop`].
    pub async fn start(bind: SocketAddr, state: AppState) -> std::io::Result<KeylessMetrics> {
        let listener = tokio::net::TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            serve_keyless(listener, state, stopped.cancelled_owned()).await;
        });
        Ok(KeylessMetrics { addr, stop, task })
    }

    /// Stops listening, lets open scrapes finish, and returns when they have.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
