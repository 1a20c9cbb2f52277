//! The console's first page (`GET /`): the runs waiting on a person, and the runs going now.

use axum::extract::State;
use keel_core::AgentState;
use maud::{Markup, html};

use crate::ConsoleState;
use crate::error::ConsoleError;
use crate::filters::{self, Filters};
use crate::layout;
use crate::pages::runs::table;
use crate::session::Viewer;

/// `GET /`.
pub async fn show(
    State(state): State<ConsoleState>,
    viewer: Viewer,
) -> Result<Markup, ConsoleError> {
    let now = state.clock.now();
    let of = |state: AgentState| Filters {
        state: Some(state),
        ..Filters::default()
    };
    let waiting = of(AgentState::WaitingOnHuman);
    let waiting_runs = filters::runs(&state.app, &viewer.caller, &waiting, None, now).await?;
    let running = of(AgentState::Running);
    let running_runs = filters::runs(&state.app, &viewer.caller, &running, None, now).await?;
    let body = html! {
        h1 { "keel" }
        p { "Signed in as " (viewer.who()) "." }
        h2 { "Waiting on a person" }
        p class="note" { "Approvals, questions, and runs stopped before an unsafe call." }
        (table(&waiting_runs.items, now, true))
        @if waiting_runs.next.is_some() {
            p { a href={ "/runs?" (waiting.query_with_before(None)) } { "All waiting runs" } }
        }
        h2 { "Running" }
        (table(&running_runs.items, now, true))
        @if running_runs.next.is_some() {
            p { a href={ "/runs?" (running.query_with_before(None)) } { "All running runs" } }
        }
        p { a href="/runs" { "Every run" } " · " a href="/conversations" { "Every conversation" } }
    };
    Ok(layout::page("Home", Some(&viewer), body))
}
