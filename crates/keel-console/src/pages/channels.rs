//! Channels (`GET /channels`, admins only): each channel the daemon started, its kept state
//! (last event, last error, a poller's offset) and its outbox (replies waiting, delivered,
//! given up; the oldest waiting; the last error).

use axum::extract::State;
use maud::{Markup, html};

use crate::ConsoleState;
use crate::error::ConsoleError;
use crate::format::{count, time_ago};
use crate::layout;
use crate::session::Viewer;

/// `GET /channels`.
pub async fn list(
    State(state): State<ConsoleState>,
    viewer: Viewer,
) -> Result<Markup, ConsoleError> {
    if !viewer.caller.admin {
        let body = html! {
            h1 { "Channels" }
            p { "The channels' status is for admins." }
        };
        return Ok(layout::page("Channels", Some(&viewer), body));
    }
    let now = state.clock.now();
    let mut channels = Vec::new();
    for name in state.channels.iter() {
        let kept = state.app.store.channel_states(name).await?;
        let outbox = state.app.store.outbox_stats(name).await?;
        channels.push((name, kept, outbox));
    }
    let body = html! {
        h1 { "Channels" }
        @if channels.is_empty() {
            p class="note" { "No channels are configured (" code { "[channels.*]" } " in keel.toml)." }
        }
        @for (name, kept, outbox) in &channels {
            section aria-labelledby={ "channel-" (name) } {
                h2 id={ "channel-" (name) } { (name) }
                dl class="facts" {
                    dt { "Replies waiting" } dd { (count(outbox.pending)) }
                    dt { "Delivered" } dd { (count(outbox.delivered)) }
                    dt { "Given up" } dd { (count(outbox.failed)) }
                    @if let Some(oldest) = outbox.oldest_pending_at {
                        dt { "Oldest waiting" } dd { (time_ago(oldest, now)) }
                    }
                    @if let Some(error) = &outbox.last_error {
                        dt { "Last delivery error" } dd { pre { (error) } }
                    }
                    @for (key, value) in kept {
                        dt { (key) } dd class="mono" { (value) }
                    }
                }
            }
        }
    };
    Ok(layout::page("Channels", Some(&viewer), body))
}
