//! The run page's parts as HTML: the summary, the transcript (tool calls folded in
//! `<details>`), the events (the live list the page's script appends to), the delegate tree and
//! the files. Everything from a run goes through maud's escaping: nothing stored is ever
//! written as HTML.

use chrono::{DateTime, Utc};
use keel_core::Event;
use keel_core::files::FileRecord;
use keel_extensions::delegation::ChildRun;
use maud::{Markup, html};

use super::data::RunPageData;
use super::transcript::Entry;
use crate::format::{count, dollars, time_ago};

/// The longest text an event's line shows.
const EVENT_TEXT_CHARS: usize = 200;

/// The fields an event's line shows, in this order, when it has them (the page's script
/// reads the same list).
pub const EVENT_FIELDS: &[&str] = &[
    "name", "tool", "model", "question", "answer", "decision", "reason", "error", "goal", "state",
    "how",
];

/// The run's state, model, iterations, tokens, cost and age.
pub fn summary(data: &RunPageData, now: DateTime<Utc>) -> Markup {
    let run = &data.run;
    let model = run.model_used.as_deref().unwrap_or(&run.model);
    html! {
        section #summary aria-labelledby="summary-title" {
            h2 #summary-title { "Summary" }
            dl .facts {
                dt { "State" }
                dd { span #run-state class={ "state state-" (data.shown_state().as_str()) }
                        data-state=(data.shown_state().as_str()) {
                        (data.shown_state().as_str()) }
                    @if let Some(reason) = run.reason.filter(|_| !data.moving) {
                        " (" (reason.as_str()) ")"
                    }
                    @if let Some(position) = data.position { ", " (position) " ahead in its lane" }
                    @if run.cancel_requested_at.is_some() && !run.state.is_terminal() {
                        ", stop requested"
                    }
                }
                dt { "Model" }
                dd { (model) @if !run.provider.is_empty() { " (" (run.provider) ")" } }
                dt { "Iterations" }
                dd { (run.iterations) }
                dt { "Tokens" }
                dd { (count(run.usage.total())) " (" (count(run.usage.input_tokens)) " in, "
                    (count(run.usage.output_tokens)) " out)" }
                dt { "Cost" }
                dd { (dollars(run.cost)) }
                dt { "Started" }
                dd { (time_ago(run.started_at, now)) }
                @if let Some(finished) = run.finished_at {
                    dt { "Finished" }
                    dd { (time_ago(finished, now)) }
                }
                dt { "Conversation" }
                dd { a href={ "/conversations/" (run.session_id) } { code { (run.session_id) } } }
            }
            @if let Some(error) = &run.error {
                p #run-error .error { strong { "Error: " } (error) }
            }
            @if let Some(answer) = &run.final_text {
                h3 { "Answer" }
                pre #final-text .text { (answer) }
            }
        }
    }
}

/// The run's transcript, oldest first.
pub fn transcript(entries: &[Entry]) -> Markup {
    html! {
        section #transcript aria-labelledby="transcript-title" {
            h2 #transcript-title { "Transcript" }
            @if entries.is_empty() {
                p { "No messages yet." }
            }
            ol .transcript {
                @for entry in entries { (entry_markup(entry)) }
            }
        }
    }
}

fn entry_markup(entry: &Entry) -> Markup {
    match entry {
        Entry::User { text } => html! {
            li .entry.user { p .who { "User" } pre .text { (text) } }
        },
        Entry::Assistant {
            text,
            reasoning,
            model,
        } => html! {
            li .entry.assistant {
                p .who { "Assistant" @if let Some(model) = model { " (" (model) ")" } }
                @if let Some(reasoning) = reasoning {
                    details .reasoning { summary { "Reasoning" } pre .text { (reasoning) } }
                }
                @if !text.is_empty() { pre .text { (text) } }
            }
        },
        Entry::ToolCall {
            id,
            name,
            arguments,
            result,
        } => {
            let outcome = match result {
                None => "waiting for its result",
                Some(result) if result.failed => "failed",
                Some(_) => "ok",
            };
            html! {
                li .entry.tool data-call-id=(id) {
                    details {
                        summary { "Tool call " code { (name) } " — " (outcome) }
                        h4 { "Arguments" }
                        pre .text { (arguments) }
                        @if let Some(result) = result {
                            h4 { "Result" }
                            pre .text.result { (result.output) }
                        }
                    }
                }
            }
        }
        Entry::Summary { text } => html! {
            li .entry.summary {
                p .who .mark { "Summary of earlier messages" }
                pre .text { (text) }
            }
        },
        Entry::Internal { why, text } => html! {
            li .entry.internal {
                p .who .mark { "Internal note: " (why) }
                pre .text { (text) }
            }
        },
    }
}

/// The run's events: the stored ones, then (on a page that follows the run) those its live
/// stream brings, appended by the page's script.
pub fn events(data: &RunPageData) -> Markup {
    let live = data.live();
    html! {
        section #events-section aria-labelledby="events-title" {
            h2 #events-title { "Events" }
            p #live-status role="status" aria-live="polite" {
                @if live { "Following this run's events as they happen." }
                @else { "This run is not running: its events are all below." }
            }
            ol #events .events data-run=(data.run.id) data-after=(data.last_seq())
                data-live=(if live { "1" } else { "0" }) data-state=(data.shown_state().as_str()) {
                @for (seq, event) in &data.events { (event_line(*seq, event)) }
            }
            pre #streaming .text hidden {}
        }
    }
}

fn event_line(seq: u64, event: &Event) -> Markup {
    let value = serde_json::to_value(event).unwrap_or_default();
    html! {
        li data-id=(seq) {
            code .event-name { (event.kind.name()) }
            " "
            span .event-text { (event_text(&value)) }
        }
    }
}

/// The short text of an event's line: its [`EVENT_FIELDS`] that it has, cut to a few hundred
/// characters.
pub fn event_text(event: &serde_json::Value) -> String {
    let parts: Vec<String> = EVENT_FIELDS
        .iter()
        .filter_map(|field| {
            let value = event.get(*field)?;
            let text = match value {
                serde_json::Value::String(text) => text.clone(),
                serde_json::Value::Null => return None,
                other => other.to_string(),
            };
            (!text.is_empty()).then(|| format!("{field}: {text}"))
        })
        .collect();
    let text = parts.join(", ");
    match text.char_indices().nth(EVENT_TEXT_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The run's delegates, as a tree.
pub fn delegates(children: &[ChildRun]) -> Markup {
    html! {
        @if !children.is_empty() {
            section #delegates aria-labelledby="delegates-title" {
                h2 #delegates-title { "Delegates" }
                (child_list(children))
            }
        }
    }
}

fn child_list(children: &[ChildRun]) -> Markup {
    html! {
        ul .tree {
            @for child in children {
                li {
                    a href={ "/runs/" (child.record.id) } { (child.goal) }
                    " — " (crate::format::state_badge(&child.record))
                    @if !child.children.is_empty() { (child_list(&child.children)) }
                }
            }
        }
    }
}

/// The run's files, each downloadable (never shown inline).
pub fn files(run_id: &str, files: &[FileRecord]) -> Markup {
    html! {
        @if !files.is_empty() {
            section #files aria-labelledby="files-title" {
                h2 #files-title { "Files" }
                table {
                    thead { tr { th scope="col" { "Name" } th scope="col" { "Type" }
                        th scope="col" { "Size" } } }
                    tbody {
                        @for file in files {
                            tr {
                                td { a href={ "/runs/" (run_id) "/files/" (file.id) } download
                                    { (file.name) } }
                                td { (file.media_type) }
                                td { (file.size) " bytes" }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_events_line_names_its_main_fields_and_is_cut() {
        let event = json!({"event": "agent.tool.started", "name": "shell", "call_id": "c1"});
        assert_eq!(event_text(&event), "name: shell");
        let long = json!({"question": "x".repeat(500)});
        assert_eq!(event_text(&long).chars().count(), EVENT_TEXT_CHARS + 1);
    }

    #[test]
    fn stored_text_is_escaped() {
        let markup = transcript(&[Entry::User {
            text: "<script>alert(1)</script><img src=x onerror=alert(2)>".into(),
        }])
        .into_string();
        assert!(markup.contains("&lt;script&gt;"), "{markup}");
        assert!(!markup.contains("<script>"), "{markup}");
        assert!(!markup.contains("<img"), "{markup}");
    }
}
