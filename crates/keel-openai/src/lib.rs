//! keel-openai: the OpenAI-compatible API of `keel serve` (`POST /v1/chat/completions`,
//! `POST /v1/responses`, `GET /v1/models`), so chat front-ends and OpenAI SDKs drive durable keel runs unchanged.
//!
//! It owns the OpenAI wire shapes, the mapping of a client's turn to a keel conversation and
//! run, and OpenAI's error shape; the runs themselves are `keel-server`'s engine's. It must not
//! depend on the `keel` binary. See `docs/openai.md` for every choice it makes.

pub mod answer;
pub mod chat;
pub mod errors;
pub mod models;
pub mod pending;
pub mod responses;
pub mod responses_stream;
pub mod stream;
pub mod turns;
pub mod wire;

use axum::Router;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::routing::{get, post};
use keel_server::{AppState, Caller};

pub use errors::OpenAiError;

/// The pseudo-channel whose state keeps the OpenAI routes' conversation names and turns, and
/// the source of their runs' inbound keys.
pub const CHANNEL: &str = "openai";

/// How the OpenAI routes behave.
#[derive(Clone, Debug)]
pub struct OpenAiOptions {
    /// How long after its run ended an identical request still counts as a retry of the
    /// same turn (answered from that run); later, it is a new turn.
    pub redelivery_window: chrono::Duration,
}

impl Default for OpenAiOptions {
    fn default() -> Self {
        OpenAiOptions {
            redelivery_window: chrono::Duration::seconds(120),
        }
    }
}

/// The caller of an OpenAI route: keel's API key check, refused in OpenAI's error shape.
pub struct OpenAiCaller(pub Caller);

impl FromRequestParts<AppState> for OpenAiCaller {
    type Rejection = OpenAiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        Caller::from_request_parts(parts, state)
            .await
            .map(OpenAiCaller)
            .map_err(OpenAiError::from)
    }
}

/// The OpenAI-compatible routes on `state`, merged into `keel serve`'s router.
pub fn routes(state: AppState) -> Router {
    routes_with(state, OpenAiOptions::default())
}

/// [`routes`], behaving as `options` say.
pub fn routes_with(state: AppState, options: OpenAiOptions) -> Router {
    // A wrong method is refused in OpenAI's shape too (keel's own router would answer its own).
    let wrong_method = || async { OpenAiError::method_not_allowed() };
    Router::new()
        .route(
            "/v1/chat/completions",
            post(chat::completions).fallback(wrong_method),
        )
        .route(
            "/v1/responses",
            post(responses::create).fallback(wrong_method),
        )
        .route("/v1/models", get(models::list).fallback(wrong_method))
        .route("/v1/models/{id}", get(models::one).fallback(wrong_method))
        .layer(axum::Extension(options))
        .with_state(state)
}
