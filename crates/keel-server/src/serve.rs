//! Serving the API until a stop signal, then stopping in order: no new runs, running runs
//! stopped at their next boundary (resumable), open event streams ended, connections closed.

use std::future::Future;

use crate::connections::{ConnectionLimits, serve_connections};
use crate::live::LiveEvents;
use crate::state::AppState;

/// Serves `state`'s API on `listener`, its connections held to `limits`, until `stop`
/// resolves, then shuts down gracefully: the engine first (it waits up to its grace period for
/// runs to reach a boundary), then the live streams, then the connections.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    limits: ConnectionLimits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<crate::engine::ShutdownReport> {
    serve_with(listener, state, axum::Router::new(), limits, stop).await
}

/// [`serve`], with `extra` routes served beside the API (the channels' webhooks): they have
/// neither the API's keys nor its body limit, and check their callers themselves.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: AppState,
    extra: axum::Router,
    limits: ConnectionLimits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<crate::engine::ShutdownReport> {
    let engine = state.engine.clone();
    let hub = state.hub.clone();
    let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel();
    let graceful = async move {
        stop.await;
        let report = engine.shutdown().await;
        hub.shutdown();
        let _ = stopped_tx.send(report);
    };
    serve_connections(
        listener,
        crate::router(state).merge(extra),
        limits,
        graceful,
    )
    .await;
    Ok(stopped_rx.await.unwrap_or_default())
}
