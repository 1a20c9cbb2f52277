//! Schedules (`GET /schedules`): the viewer's schedules (an admin's: all), with when each
//! fires, its state, its next slot and its failures in a row.

use axum::extract::State;
use keel_platform::schedule::ScheduleFilter;
use keel_server::schedules::plan::describe;
use maud::{Markup, html};

use crate::ConsoleState;
use crate::error::ConsoleError;
use crate::format::time_ago;
use crate::layout;
use crate::session::Viewer;

/// Schedules the page shows at most.
const SHOWN: usize = 200;

/// The longest schedule text shown, in characters.
const TEXT_CHARS: usize = 160;

/// `GET /schedules`.
pub async fn list(
    State(state): State<ConsoleState>,
    viewer: Viewer,
) -> Result<Markup, ConsoleError> {
    let now = state.clock.now();
    let schedules = state
        .app
        .store
        .list_schedules(&ScheduleFilter {
            session_id: None,
            owner: viewer.caller.owner_filter(),
            limit: SHOWN,
        })
        .await?;
    let body = html! {
        h1 { "Schedules" }
        @if schedules.is_empty() {
            p class="note" {
                "No schedules. A model makes them with its " code { "schedule" } " tool; an \
                 operator with " code { "keel schedules add" } " or " code { "POST /v1/schedules" } "."
            }
        } @else {
            @if schedules.len() == SHOWN {
                p class="note" { "The first " (SHOWN) " schedules." }
            }
            div class="table-wrap" {
                table class="cards" {
                    thead {
                        tr {
                            th scope="col" { "When" }
                            th scope="col" { "Message" }
                            th scope="col" { "State" }
                            th scope="col" { "Next" }
                            th scope="col" class="num" { "Failures" }
                            th scope="col" { "Conversation" }
                            th scope="col" { "Made by" }
                        }
                    }
                    tbody {
                        @for schedule in &schedules {
                            tr {
                                td data-label="When" { (describe(schedule)) }
                                td data-label="Message" class="title" { (shorten(&schedule.text)) }
                                td data-label="State" {
                                    span class={ "state state-" (schedule.state.as_str()) } {
                                        (schedule.state.as_str())
                                    }
                                    @if let Some(reason) = &schedule.paused_reason {
                                        " " span class="note" { (reason) }
                                    }
                                }
                                td data-label="Next" {
                                    @match schedule.next_slot {
                                        Some(next) if next > now => {
                                            time datetime=(next.to_rfc3339()) {
                                                (next.format("%Y-%m-%d %H:%M UTC"))
                                            }
                                        }
                                        Some(next) => { "due " (time_ago(next, now)) }
                                        None => { "—" }
                                    }
                                }
                                td data-label="Failures" class="num" {
                                    (schedule.failures) " of " (schedule.max_failures)
                                }
                                td data-label="Conversation" {
                                    a class="mono" href={ "/conversations/" (schedule.session_id) } {
                                        (crate::pages::runs::short_id(&schedule.session_id))
                                    }
                                }
                                td data-label="Made by" { (schedule.created_by.as_str()) }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(layout::page("Schedules", Some(&viewer), body))
}

/// `text` cut to [`TEXT_CHARS`] characters, with an ellipsis when cut.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(TEXT_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}
