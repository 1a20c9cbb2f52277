//! The run page, `GET /runs/{id}` (helper C2 owns this module): a placeholder until it lands,
//! showing the run's state to a viewer who may see it and 404 to anyone else.
//!
//! What the console gives a page here:
//! - [`Viewer`] as an extractor: the signed-in person's [`keel_server::Caller`] and CSRF token;
//!   a request without a live session is sent to `/sign-in` (back here after, for a GET).
//! - `State<ConsoleState>` (`.app` is the daemon's `AppState`; `State<AppState>` works too) and
//!   `.clock` for "now".
//! - [`layout::page`] for the page shell and [`layout::csrf_field`] for every form that posts.
//!   Every POST under the console is checked before its handler runs ([`crate::csrf`]): an
//!   urlencoded form carrying the session's `csrf` field, and no foreign `Origin` or
//!   `Sec-Fetch-Site`; a handler reads its own fields with `axum::Form` (serde ignores `csrf`).
//! - [`ConsoleError`] (from `ApiError` and `StoreError` with `?`) renders the error page: a
//!   run the viewer may not see is the same 404 as one that does not exist.
//! - [`crate::format`]: ages, dollars, counts, state badges, as the lists write them.
//! - The Content-Security-Policy allows only the console's own files: no inline `<script>` or
//!   `style=""`; put scripts and styles in `assets/` (served at `/assets/{name}`, linked with
//!   `crate::assets::href`) and connect only to this origin (SSE included).

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::get;
use maud::{Markup, html};

use crate::error::ConsoleError;
use crate::session::Viewer;
use crate::{ConsoleState, layout};

/// The routes of the run page.
pub fn routes() -> Router<ConsoleState> {
    Router::new().route("/runs/{id}", get(run_page))
}

async fn run_page(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Markup, ConsoleError> {
    let (run, _conversation) = viewer.caller.run(&state.app, &id).await?;
    Ok(layout::page(
        &format!("Run {}", run.id),
        Some(&viewer),
        html! {
            h1 { "Run " code { (run.id) } }
            p { "State: " (run.state.to_string()) }
        },
    ))
}
