//! The runs list (`GET /runs`): every run the viewer may see, filtered by state, user,
//! platform and age, newest first, a page at a time; and the runs table other pages share.

use axum::extract::{Query, State};
use chrono::{DateTime, Utc};
use keel_core::{RunRecord, SessionInfo};
use maud::{Markup, html};

use crate::ConsoleState;
use crate::error::ConsoleError;
use crate::filters::{self, Filters, ListQuery};
use crate::format::{count, dollars, model, state_badge, time_ago};
use crate::layout;
use crate::session::Viewer;

/// `GET /runs`.
pub async fn list(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Query(query): Query<ListQuery>,
) -> Result<Markup, ConsoleError> {
    let filters = query.filters()?;
    let now = state.clock.now();
    let scanned = filters::runs(&state.app, &viewer.caller, &filters, None, now).await?;
    let body = html! {
        h1 { "Runs" }
        (filters.form("/runs", viewer.caller.admin))
        (table(&scanned.items, now, true))
        (pager("/runs", &filters, scanned.next.as_deref()))
    };
    Ok(layout::page("Runs", Some(&viewer), body))
}

/// A table of runs with their conversations; `with_conversation` adds the conversation's
/// column (a conversation's own page leaves it out).
pub fn table(
    runs: &[(RunRecord, SessionInfo)],
    now: DateTime<Utc>,
    with_conversation: bool,
) -> Markup {
    html! {
        @if runs.is_empty() {
            p class="note" { "No runs here." }
        } @else {
            div class="table-wrap" {
                table class="cards" {
                    thead {
                        tr {
                            th scope="col" { "Run" }
                            th scope="col" { "State" }
                            @if with_conversation {
                                th scope="col" { "Conversation" }
                                th scope="col" { "User" }
                            }
                            th scope="col" { "Model" }
                            th scope="col" class="num" { "Iterations" }
                            th scope="col" class="num" { "Tokens" }
                            th scope="col" class="num" { "Cost" }
                            th scope="col" { "Started" }
                        }
                    }
                    tbody {
                        @for (run, conversation) in runs {
                            tr {
                                td data-label="Run" {
                                    a class="mono" href={ "/runs/" (run.id) } { (short_id(&run.id)) }
                                }
                                td data-label="State" { (state_badge(run)) }
                                @if with_conversation {
                                    td data-label="Conversation" class="title" {
                                        a href={ "/conversations/" (conversation.id) } {
                                            (conversation_title(conversation))
                                        }
                                    }
                                    td data-label="User" { (conversation.owner.as_deref().unwrap_or("—")) }
                                }
                                td data-label="Model" { (model(run)) }
                                td data-label="Iterations" class="num" { (run.iterations) }
                                td data-label="Tokens" class="num" { (count(run.usage.total())) }
                                td data-label="Cost" class="num" { (dollars(run.cost)) }
                                td data-label="Started" { (time_ago(run.started_at, now)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The link to a list's next page, when there is one.
pub fn pager(path: &str, filters: &Filters, next: Option<&str>) -> Markup {
    html! {
        nav class="pages" aria-label="Pages" {
            @if filters.before.is_some() {
                a href={ (path) "?" (filters.query_with_before(None)) } { "First page" }
            }
            @if let Some(next) = next {
                a href={ (path) "?" (filters.query_with_before(Some(next))) } rel="next" { "Older →" }
            }
        }
    }
}

/// A conversation's title for a list: its first message shortened, else its id.
pub fn conversation_title(conversation: &SessionInfo) -> String {
    match conversation.title.as_deref().map(str::trim) {
        Some(title) if !title.is_empty() => title.to_string(),
        _ => conversation.id.clone(),
    }
}

/// The last 12 characters of an id (ids start with their time; the end tells them apart).
pub fn short_id(id: &str) -> &str {
    let start = id.char_indices().rev().nth(11).map_or(0, |(at, _)| at);
    &id[start..]
}
