//! The conversations list (`GET /conversations`, filtered by their last run's state, user,
//! platform and the age of their last message) and a conversation's page
//! (`GET /conversations/{id}`: what it is, and its runs).

use axum::extract::{Path, Query, State};
use maud::{Markup, html};

use crate::ConsoleState;
use crate::error::ConsoleError;
use crate::filters::{self, ListQuery};
use crate::format::{count, dollars, model, state_badge, time_ago};
use crate::layout;
use crate::pages::runs::{conversation_title, pager, table};
use crate::session::Viewer;

/// `GET /conversations`.
pub async fn list(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Query(query): Query<ListQuery>,
) -> Result<Markup, ConsoleError> {
    let filters = query.filters()?;
    let now = state.clock.now();
    let scanned = filters::conversations(&state.app, &viewer.caller, &filters, now).await?;
    let body = html! {
        h1 { "Conversations" }
        (filters.form("/conversations", viewer.caller.admin))
        @if scanned.items.is_empty() {
            p class="note" { "No conversations here." }
        } @else {
            div class="table-wrap" {
                table class="cards" {
                    thead {
                        tr {
                            th scope="col" { "Conversation" }
                            th scope="col" { "User" }
                            th scope="col" { "Platform" }
                            th scope="col" { "Last run" }
                            th scope="col" { "Model" }
                            th scope="col" class="num" { "Iterations" }
                            th scope="col" class="num" { "Tokens" }
                            th scope="col" class="num" { "Cost" }
                            th scope="col" { "Last message" }
                        }
                    }
                    tbody {
                        @for (conversation, last) in &scanned.items {
                            tr {
                                td data-label="Conversation" class="title" {
                                    a href={ "/conversations/" (conversation.id) } {
                                        (conversation_title(conversation))
                                    }
                                }
                                td data-label="User" { (conversation.owner.as_deref().unwrap_or("—")) }
                                td data-label="Platform" { (platform(conversation)) }
                                @if let Some(run) = last {
                                    td data-label="Last run" {
                                        a href={ "/runs/" (run.id) } { (state_badge(run)) }
                                    }
                                    td data-label="Model" { (model(run)) }
                                    td data-label="Iterations" class="num" { (run.iterations) }
                                    td data-label="Tokens" class="num" { (count(run.usage.total())) }
                                    td data-label="Cost" class="num" { (dollars(run.cost)) }
                                } @else {
                                    td data-label="Last run" { "none" }
                                    td data-label="Model" { "—" }
                                    td data-label="Iterations" class="num" { "0" }
                                    td data-label="Tokens" class="num" { "0" }
                                    td data-label="Cost" class="num" { (dollars(0.0)) }
                                }
                                td data-label="Last message" { (time_ago(conversation.updated_at, now)) }
                            }
                        }
                    }
                }
            }
        }
        (pager("/conversations", &filters, scanned.next.as_deref()))
    };
    Ok(layout::page("Conversations", Some(&viewer), body))
}

/// `GET /conversations/{id}`: 404 for one the viewer may not see.
pub async fn show(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Markup, ConsoleError> {
    let conversation = viewer.caller.conversation(&state.app, &id).await?;
    let filters = query.filters()?;
    let now = state.clock.now();
    let runs = filters::runs(&state.app, &viewer.caller, &filters, Some(&id), now).await?;
    let title = conversation_title(&conversation);
    let path = format!("/conversations/{id}");
    let body = html! {
        h1 { (title) }
        dl class="facts" {
            dt { "Id" } dd class="mono" { (conversation.id) }
            dt { "User" } dd { (conversation.owner.as_deref().unwrap_or("—")) }
            dt { "Platform" } dd { (platform(&conversation)) }
            @if let Some(place) = &conversation.place {
                dt { "Channel" } dd class="mono" {
                    (place.channel_id)
                    @if let Some(thread) = &place.thread_id { " · thread " (thread) }
                }
            }
            dt { "Trusted" } dd { (if conversation.trusted { "yes" } else { "no: its side effects wait for approval" }) }
            dt { "Messages" } dd { (conversation.message_count) }
            dt { "Lane policy" } dd { (conversation.lane_policy.as_str()) }
            dt { "Created" } dd { (time_ago(conversation.created_at, now)) }
            dt { "Last message" } dd { (time_ago(conversation.updated_at, now)) }
        }
        h2 { "Runs" }
        (table(&runs.items, now, false))
        (pager(&path, &filters, runs.next.as_deref()))
    };
    Ok(layout::page(&title, Some(&viewer), body))
}

/// Where a conversation is: its platform, or `api` for one made through the API.
pub fn platform(conversation: &keel_core::SessionInfo) -> &str {
    conversation
        .place
        .as_ref()
        .map_or("api", |place| place.platform.as_str())
}
