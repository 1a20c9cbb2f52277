//! Message fixup before every model call (seed 000): merge consecutive same-role messages, drop
//! tool results that answer no call and strip tool calls that got no result, then merge again.
//!
//! Histories go wrong in ordinary ways — a worker died between a tool call and its result, a
//! user sent two messages in a row, a transcript was edited — and every provider rejects such a
//! history. Fixup changes only what is sent, never what is stored, and never loses user text.
//! Each adapter then applies its own API's alternation rules on top.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::sync::Arc;

use crate::message::{Message, Role, ToolCall};

/// Returns a history every API accepts the shape of:
/// - no two consecutive messages share a role, except `tool` results;
/// - every run of `tool` results directly follows an assistant message, and answers each of
///   its calls exactly once, with no result that answers none of them;
/// - no assistant message is empty (no text and no calls);
/// - no tool-call id is used twice in the conversation (a later reuse, e.g. by a server that
///   numbers ids per process, is renamed together with its results).
///
/// A history that already has this shape is returned as it is, without copying.
pub fn fixup(messages: Vec<Message>) -> Vec<Message> {
    if is_well_formed(&messages) {
        return messages;
    }
    repair(messages)
}

/// [`fixup`] for a request's shared messages: a history that has the shape already is returned
/// as it is, without copying a message; otherwise its messages are copied out, fixed and shared
/// again.
pub fn fixup_shared(messages: Vec<Arc<Message>>) -> Vec<Arc<Message>> {
    if is_well_formed(&messages) {
        return messages;
    }
    let owned = messages.into_iter().map(Arc::unwrap_or_clone).collect();
    repair(owned).into_iter().map(Arc::new).collect()
}

/// The three passes, for a history known to need them.
fn repair(messages: Vec<Message>) -> Vec<Message> {
    merge_consecutive(pair_calls_with_results(merge_consecutive(messages)))
}

/// True when `messages` needs no fixup.
pub fn is_well_formed<M: Borrow<Message>>(messages: &[M]) -> bool {
    let mut previous: Option<&Message> = None;
    let mut open_calls: Vec<&str> = Vec::new();
    // Every call id of the conversation, checked for repeats once at the end: sorting them is
    // cheaper than hashing each, on the path of every model call.
    let mut all_calls: Vec<&str> = Vec::new();
    for message in messages {
        let message = message.borrow();
        match message.role {
            Role::Tool => {
                let Some(id) = message.tool_call_id.as_deref() else {
                    return false;
                };
                match open_calls.iter().position(|c| *c == id) {
                    Some(index) => {
                        open_calls.swap_remove(index);
                    }
                    None => return false,
                }
            }
            role => {
                if !open_calls.is_empty() || previous.is_some_and(|p| p.role == role) {
                    return false;
                }
                if role == Role::Assistant {
                    if message.content.is_empty() && message.tool_calls.is_empty() {
                        return false;
                    }
                    let ids = message.tool_calls.iter().map(|c| c.id.as_str());
                    all_calls.extend(ids.clone());
                    open_calls.extend(ids);
                }
            }
        }
        previous = Some(message);
    }
    if !open_calls.is_empty() {
        return false;
    }
    all_calls.sort_unstable();
    !all_calls.windows(2).any(|pair| pair[0] == pair[1])
}

/// Pass 1 and 3: consecutive messages of one role (other than `tool`) become one.
fn merge_consecutive(messages: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    for message in messages {
        match out.last_mut() {
            Some(last) if last.role == message.role && message.role != Role::Tool => {
                merge_into(last, message);
            }
            _ => out.push(message),
        }
    }
    out
}

fn merge_into(target: &mut Message, next: Message) {
    if !next.content.is_empty() {
        if !target.content.is_empty() {
            target.content.push_str("\n\n");
        }
        target.content.push_str(&next.content);
    }
    target.tool_calls.extend(next.tool_calls);
    if target.reasoning.is_none() {
        target.reasoning = next.reasoning;
    }
}

/// Pass 2: keeps each assistant's calls that were answered by the tool results right after it,
/// and those results (the first answer to each call), dropping everything unpaired. A call id
/// already used earlier in the conversation is renamed, with its results.
fn pair_calls_with_results(messages: Vec<Message>) -> Vec<Message> {
    let mut out = Vec::with_capacity(messages.len());
    let mut used_ids: HashSet<String> = HashSet::new();
    let mut iter = messages.into_iter().peekable();
    while let Some(message) = iter.next() {
        match message.role {
            // A result not claimed by the assistant before it answers nothing.
            Role::Tool => continue,
            Role::Assistant => {
                let mut results = Vec::new();
                while let Some(next) = iter.next_if(|m| m.role == Role::Tool) {
                    results.push(next);
                }
                let mut assistant = message;
                let mut block_ids = HashSet::new();
                assistant
                    .tool_calls
                    .retain(|call| block_ids.insert(call.id.clone()));
                let mut answered = HashSet::new();
                results.retain(|result| {
                    result
                        .tool_call_id
                        .as_ref()
                        .is_some_and(|id| block_ids.contains(id) && answered.insert(id.clone()))
                });
                assistant
                    .tool_calls
                    .retain(|call| answered.contains(&call.id));
                if assistant.content.is_empty() && assistant.tool_calls.is_empty() {
                    continue;
                }
                for call in &mut assistant.tool_calls {
                    if used_ids.contains(&call.id) {
                        let fresh = unused_id(&call.id, &used_ids, &block_ids);
                        for result in &mut results {
                            if result.tool_call_id.as_deref() == Some(call.id.as_str()) {
                                result.tool_call_id = Some(fresh.clone());
                            }
                        }
                        call.id = fresh;
                    }
                    used_ids.insert(call.id.clone());
                }
                out.push(assistant);
                out.extend(results);
            }
            _ => out.push(message),
        }
    }
    out
}

/// Gives each of `calls` (one assistant message's) an id no other call has: an id already in
/// `used`, or repeated within `calls`, becomes the first free `id_2`, `id_3`, ... Every id ends
/// up in `used`. The loop applies it to each answer before anything runs, so the stored message,
/// the tool results, the envelope and the next request all agree on one id per call.
pub fn make_call_ids_unique(calls: &mut [ToolCall], used: &mut HashSet<String>) {
    let block: HashSet<String> = calls.iter().map(|call| call.id.clone()).collect();
    for call in calls {
        if used.contains(&call.id) {
            call.id = unused_id(&call.id, used, &block);
        }
        used.insert(call.id.clone());
    }
}

/// `id_2`, `id_3`, ... — the first that no call uses.
fn unused_id(id: &str, used: &HashSet<String>, block: &HashSet<String>) -> String {
    (2..)
        .map(|n| format!("{id}_{n}"))
        .find(|candidate| !used.contains(candidate) && !block.contains(candidate))
        .unwrap_or_else(|| id.to_string())
}

#[cfg(test)]
#[path = "fixup_tests.rs"]
mod tests;
