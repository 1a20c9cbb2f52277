//! A request's position in its turn, for [`Script::per_turn`](crate::Script::per_turn)
//! scripts: how many assistant replies it carries after its last real user message. Read from
//! keel's own messages (in process) and from each wire API's request body (over HTTP).
//!
//! In process the loop's internal messages are flagged, so a real user message is simply a
//! user message the loop did not inject. On the wire they cannot be told apart, so a user
//! message that carries tool results, or comes right after them with no reply between (the
//! loop's nudges, warnings and time-limit prompt land there), continues the turn; any other
//! user message starts one.

use std::borrow::Borrow;

use keel_core::{Message, Role};
use serde_json::Value;

/// One entry of a conversation, as far as turn positions go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    /// A user message known to be a real one: starts a turn.
    TurnStart,
    /// A user message read from the wire: starts a turn unless it follows tool results.
    UserText,
    /// Tool results (or a user message carrying some).
    ToolResults,
    /// One whole assistant reply.
    Reply,
    /// One item of an assistant reply that may span several (Responses' reasoning, message
    /// and function-call items): a run of them is one reply.
    ReplyPart,
    /// Anything else (system and developer messages, internal notes, unknown items).
    Other,
}

/// The position after `entries`: the replies since the last turn start.
fn position(entries: impl IntoIterator<Item = Entry>) -> usize {
    let mut position = 0;
    let mut after_results = false;
    let mut in_reply = false;
    for entry in entries {
        match entry {
            Entry::TurnStart => {
                position = 0;
                after_results = false;
                in_reply = false;
            }
            Entry::UserText => {
                if !after_results {
                    position = 0;
                }
                in_reply = false;
            }
            Entry::ToolResults => {
                after_results = true;
                in_reply = false;
            }
            Entry::Reply => {
                position += 1;
                after_results = false;
                in_reply = false;
            }
            Entry::ReplyPart => {
                if !in_reply {
                    position += 1;
                }
                after_results = false;
                in_reply = true;
            }
            Entry::Other => {}
        }
    }
    position
}

/// The position of a request of keel's own messages. Internal messages (flagged in their
/// `meta`) neither start a turn nor count as replies.
pub(crate) fn of_messages<M: Borrow<Message>>(messages: &[M]) -> usize {
    position(
        messages
            .iter()
            .map(Borrow::borrow)
            .map(|message: &Message| match message.role {
                _ if message.is_internal() => Entry::Other,
                Role::User => Entry::TurnStart,
                Role::Assistant => Entry::Reply,
                Role::Tool => Entry::ToolResults,
                Role::System => Entry::Other,
            }),
    )
}

fn kind<'a>(value: &'a Value, field: &str) -> Option<&'a str> {
    value.get(field).and_then(Value::as_str)
}

/// The position of a chat-completions request: each `assistant` message is a reply, `tool`
/// messages are results.
pub(crate) fn of_chat_completions(messages: &[Value]) -> usize {
    position(messages.iter().map(|message| match kind(message, "role") {
        Some("user") => Entry::UserText,
        Some("assistant") => Entry::Reply,
        Some("tool") => Entry::ToolResults,
        _ => Entry::Other,
    }))
}

/// The position of an Anthropic Messages request: each `assistant` message is a reply; a
/// `user` message with a `tool_result` block is results (the loop's own text may ride along
/// in it, merged into the turn by the adapter).
pub(crate) fn of_messages_api(messages: &[Value]) -> usize {
    let has_results = |message: &Value| {
        message
            .get("content")
            .and_then(Value::as_array)
            .is_some_and(|blocks| {
                blocks
                    .iter()
                    .any(|block| kind(block, "type") == Some("tool_result"))
            })
    };
    position(messages.iter().map(|message| match kind(message, "role") {
        Some("user") if has_results(message) => Entry::ToolResults,
        Some("user") => Entry::UserText,
        Some("assistant") => Entry::Reply,
        _ => Entry::Other,
    }))
}

/// The position of an OpenAI Responses request: one reply is a run of output items (reasoning,
/// assistant messages, function and other tool calls) between inputs; `*_output` items are
/// results. A string `input` is one user message. Items of a `previous_response_id` are not
/// looked up: only the `input` sent counts.
pub(crate) fn of_responses(input: Option<&Value>) -> usize {
    let Some(Value::Array(items)) = input else {
        return 0;
    };
    position(
        items
            .iter()
            .map(|item| match kind(item, "type").unwrap_or("message") {
                "message" => match kind(item, "role") {
                    Some("user") => Entry::UserText,
                    Some("assistant") => Entry::ReplyPart,
                    _ => Entry::Other,
                },
                "mcp_approval_response" => Entry::ToolResults,
                kind if kind.ends_with("_output") => Entry::ToolResults,
                "reasoning" | "mcp_approval_request" => Entry::ReplyPart,
                kind if kind.ends_with("_call") => Entry::ReplyPart,
                _ => Entry::Other,
            }),
    )
}

#[cfg(test)]
#[path = "turn_position_tests.rs"]
mod tests;
