//! The run page, `GET /runs/{id}` (404 for a run the viewer's key may not see): the run's
//! state, model, iterations, tokens, cost and age; seed 001's panels (Stop, the failure panel
//! with the journal's handoff and Resume, Approve once / for the session / Deny, Answer); the
//! transcript with tool calls folded; its events, followed live over SSE from
//! `GET /runs/{id}/live`; its delegate tree and its files.
//!
//! The panels' forms post to `/runs/{id}/stop`, `/approval`, `/answer` and `/resume`
//! ([`actions`]), checked like the API's handlers for the same actions, each redirecting back
//! to the page.

mod actions;
mod data;
mod live;
mod panels;
mod render;
mod transcript;

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use maud::{Markup, html};

use crate::{ConsoleError, ConsoleState, Viewer};

/// The routes of the run page.
pub fn routes() -> Router<ConsoleState> {
    Router::new()
        .route("/runs/{id}", get(show))
        .route("/runs/{id}/live", get(live::events))
        .route("/runs/{id}/files/{file_id}", get(live::file))
        .route("/runs/{id}/stop", post(actions::stop))
        .route("/runs/{id}/approval", post(actions::approve))
        .route("/runs/{id}/answer", post(actions::answer))
        .route("/runs/{id}/resume", post(actions::resume))
}

/// `GET /runs/{id}`.
async fn show(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Markup, ConsoleError> {
    let data = data::load(&state.app, &viewer, &id).await?;
    let now = state.clock.now();
    let title = format!("Run {}", short_id(&data.run.id));
    let body = html! {
        link rel="stylesheet" href=(crate::assets::href("run-page.css"));
        h1 { "Run " code { (data.run.id) } }
        (render::summary(&data, now))
        (panels::panels(&data, &viewer.csrf))
        (render::transcript(&data.transcript))
        (render::events(&data))
        (render::delegates(&data.children))
        (render::files(&data.run.id, &data.files))
        script src=(crate::assets::href("run-page.js")) defer {}
    };
    Ok(crate::layout::page(&title, Some(&viewer), body))
}

/// The first few characters of an id, for a title.
fn short_id(id: &str) -> &str {
    match id.char_indices().nth(13) {
        Some((cut, _)) => &id[..cut],
        None => id,
    }
}
