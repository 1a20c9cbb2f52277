//! The run page, `GET /runs/{id}` (helper C2 owns this module): a placeholder until it lands,
//! showing the run's state to a viewer who may see it and 404 to anyone else.

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
