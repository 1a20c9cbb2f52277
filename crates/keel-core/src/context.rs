//! Context management (DESIGN.md section 6): how much of a model's window a conversation may
//! fill, where to cut when it fills up (never between a tool call and its result), which tool
//! results to pin, and what the summarizer is asked. Pure functions and settings; the run state
//! machine decides when to use them.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::message::{InternalReason, Message, Role};
use crate::provider::ModelTarget;

/// The window assumed for a model missing from the table.
pub const DEFAULT_WINDOW: u32 = 32_768;

/// The longest a pinned tool result may be, in characters.
pub const PINNED_RESULT_MAX_CHARS: usize = 2_000;

/// The longest one message may be in the text sent to the summarizer, in characters.
pub const SUMMARY_INPUT_MAX_CHARS: usize = 2_000;

/// What the summarizer is told.
pub const SUMMARY_INSTRUCTIONS: &str = "You compress the working history of an AI agent so that \
it can keep working without it. Write a concise summary of the conversation below: the task and \
the user's requirements, what has been done, what was found (facts, file paths, numbers, \
decisions), what failed and why, and what is still open. Keep every detail the agent would need \
to continue; drop chatter. Answer with the summary only.";

/// What a run's first request is built from (seed 003, step 7), in tokens: the
/// persona's or base system prompt, the tool definitions, known facts and memories (none until
/// keel has memory), the conversation's summary, the windowed history and the new message. It
/// is reported with `agent_run.started`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextPieces {
    /// The system prompt (the persona's, else the base one).
    pub system_prompt_tokens: u64,
    /// The tool definitions offered.
    pub tools_tokens: u64,
    /// Known facts and retrieved memories.
    pub facts_tokens: u64,
    /// The latest compaction summary of the conversation, when it has one.
    pub summary_tokens: u64,
    /// Earlier messages sent verbatim.
    pub history_messages: usize,
    /// Their tokens.
    pub history_tokens: u64,
    /// The new message.
    pub message_tokens: u64,
    /// Everything together: the first request's estimate.
    pub total_tokens: u64,
}

/// How the context is kept under its budget: the built-in strategies (see
/// [`crate::context_strategy`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Summarize older messages with a model call (R1), then deep-prune (R2), then ask a
    /// human (R3).
    #[default]
    Compact,
    /// Drop the oldest messages, keeping the first user message; no model call.
    SlidingWindow,
}

/// Context windows by model, looked up by the longest matching name prefix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowTable {
    windows: BTreeMap<String, u32>,
}

impl Default for WindowTable {
    /// Windows of common models (input tokens) at the time of writing.
    fn default() -> Self {
        let known = [
            ("gpt-3.5-turbo", 16_385),
            ("gpt-4", 8_192),
            ("gpt-4-turbo", 128_000),
            ("gpt-4o", 128_000),
            ("gpt-4.1", 1_047_576),
            ("gpt-5", 400_000),
            ("o1", 200_000),
            ("o3", 200_000),
            ("o4-mini", 200_000),
            ("claude", 200_000),
        ];
        WindowTable {
            windows: known
                .into_iter()
                .map(|(model, window)| (model.to_string(), window))
                .collect(),
        }
    }
}

impl WindowTable {
    /// Adds or replaces a model's window.
    pub fn set(&mut self, model: impl Into<String>, window: u32) {
        self.windows.insert(model.into(), window);
    }

    /// The window of `model`: an exact entry, else the longest entry that prefixes it, else
    /// [`DEFAULT_WINDOW`].
    pub fn window(&self, model: &str) -> u32 {
        self.windows.get(model).copied().unwrap_or_else(|| {
            self.windows
                .iter()
                .filter(|(name, _)| model.starts_with(name.as_str()))
                .max_by_key(|(name, _)| name.len())
                .map_or(DEFAULT_WINDOW, |(_, window)| *window)
        })
    }
}

/// How a run keeps its context under the model's window (`[context]` in keel.toml).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContextSettings {
    /// Compaction (default) or a sliding window.
    pub strategy: Strategy,
    /// A window that overrides the table (`--context-window`).
    pub window: Option<u32>,
    /// Windows by model.
    pub windows: WindowTable,
    /// The fraction of the window at which recovery starts (0.70).
    pub compact_threshold: f64,
    /// Messages kept verbatim by compaction (R1).
    pub keep_last: usize,
    /// Messages kept verbatim by a deep prune (R2).
    pub deep_keep: usize,
    /// A recovery within this many iterations of the previous one climbs the ladder.
    pub recovery_gap: u32,
    /// Recoveries allowed in one turn; after that the loop runs on without.
    pub max_recoveries: u32,
    /// The model that writes summaries (default: the run's current model).
    pub summary_model: Option<ModelTarget>,
    /// Output tokens a summary may use.
    pub summary_max_tokens: u32,
    /// A strategy of the library user's own, which decides instead of `strategy` (see
    /// [`crate::context_strategy`]); checkpoints name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<crate::context_strategy::CustomStrategy>,
}

impl Default for ContextSettings {
    fn default() -> Self {
        ContextSettings {
            strategy: Strategy::Compact,
            window: None,
            windows: WindowTable::default(),
            compact_threshold: 0.70,
            keep_last: 10,
            deep_keep: 4,
            recovery_gap: 20,
            max_recoveries: 4,
            summary_model: None,
            summary_max_tokens: 1024,
            custom: None,
        }
    }
}

impl ContextSettings {
    /// The window for `model`.
    pub fn window_for(&self, model: &str) -> u32 {
        self.window.unwrap_or_else(|| self.windows.window(model))
    }
}

/// True for a stored compaction summary.
pub fn is_summary(message: &Message) -> bool {
    message.meta.internal == Some(InternalReason::CompactionSummary)
}

/// Where to cut `messages[start..]` so that at most `keep` messages stay verbatim after the cut,
/// never separating a tool result from the call it answers: the cut moves back to the assistant
/// message whose calls the first kept results answer. Returns `start` when nothing can go.
pub fn cut_point<M: Borrow<Message>>(messages: &[M], start: usize, keep: usize) -> usize {
    let mut cut = messages.len().saturating_sub(keep).max(start);
    while cut > start
        && messages
            .get(cut)
            .is_some_and(|m| m.borrow().role == Role::Tool)
    {
        cut -= 1;
    }
    cut
}

/// The indices in `range` of the messages a pin keeps verbatim through compaction: each
/// message marked `pinned` with the rest of its tool-call exchange (the assistant message that
/// made the calls and every result that answers them), so a pinned call never goes without its
/// results, nor a pinned result without its call. In order. Compaction summaries are never kept
/// this way: a newer summary stands for them.
pub fn pinned_exchanges<M: Borrow<Message>>(
    messages: &[M],
    range: std::ops::Range<usize>,
) -> Vec<usize> {
    let end = range.end.min(messages.len());
    let mut kept = Vec::new();
    let mut i = range.start;
    while i < end {
        // One exchange: an assistant message and the tool results right after it, or any
        // other single message (a result without its call stands alone).
        let mut next = i + 1;
        if messages[i].borrow().role == Role::Assistant {
            while next < end && messages[next].borrow().role == Role::Tool {
                next += 1;
            }
        }
        let exchange = i..next;
        if exchange.clone().any(|j| {
            let message = messages[j].borrow();
            message.meta.pinned && !is_summary(message)
        }) {
            kept.extend(exchange);
        }
        i = next;
    }
    kept
}

/// The seq a session's context starts from when the latest summary replaced the messages up
/// to `summary_last`: the first message after them, or, when some of them are pinned, the
/// start of the first pinned message's exchange (see [`pinned_exchanges`]): a run loads what
/// lies between too, and sends only the pinned ones. `messages` are the session's stored
/// messages up to `summary_last` (or at least from that exchange on), in order.
pub fn context_start_seq(messages: &[crate::message::StoredMessage], summary_last: u64) -> u64 {
    let replaced: Vec<&crate::message::StoredMessage> = messages
        .iter()
        .take_while(|stored| stored.seq <= summary_last)
        .collect();
    let bodies: Vec<&Message> = replaced.iter().map(|stored| &stored.message).collect();
    pinned_exchanges(&bodies, 0..bodies.len())
        .first()
        .map_or(summary_last + 1, |&i| replaced[i].seq)
}

/// The latest successful result of each tool among `messages`, as (tool, arguments, result),
/// in the order the tools were first used. Failed results are never pinned: pinning an error
/// would tell the next turn "this is what you know".
pub fn pinned_results(messages: &[&Message]) -> Vec<(String, String, String)> {
    let mut calls: HashMap<&str, (&str, &str)> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut latest: HashMap<String, (String, String)> = HashMap::new();
    for message in messages {
        for call in &message.tool_calls {
            calls.insert(&call.id, (&call.name, &call.arguments));
        }
        if message.role != Role::Tool || is_error_result(&message.content) {
            continue;
        }
        let Some((name, arguments)) = message.tool_call_id.as_deref().and_then(|id| calls.get(id))
        else {
            continue;
        };
        if !latest.contains_key(*name) {
            order.push(name.to_string());
        }
        latest.insert(
            name.to_string(),
            (
                arguments.to_string(),
                clip(&message.content, PINNED_RESULT_MAX_CHARS),
            ),
        );
    }
    order
        .into_iter()
        .filter_map(|name| {
            let (arguments, result) = latest.remove(&name)?;
            Some((name, arguments, result))
        })
        .collect()
}

/// True for a tool result that reports a failure (keel writes them as `Error: ...`).
pub fn is_error_result(content: &str) -> bool {
    let trimmed = content.trim_start();
    trimmed.is_empty() || trimmed.starts_with("Error")
}

/// The pinned results as a section of a summary.
pub fn pinned_section(pinned: &[(String, String, String)]) -> String {
    if pinned.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n\nPinned results (the latest successful result of each tool):");
    for (tool, arguments, result) in pinned {
        out.push_str(&format!("\n- {tool} {arguments}:\n{result}"));
    }
    out
}

/// The text the summarizer gets: the previous summary, then each message on its own lines,
/// then the pinned results.
pub fn summary_input(
    previous: Option<&Message>,
    messages: &[&Message],
    pinned: &[(String, String, String)],
) -> String {
    let mut out = String::new();
    if let Some(previous) = previous {
        out.push_str("Summary of what came before:\n");
        out.push_str(&previous.content);
        out.push_str("\n\n");
    }
    out.push_str("Conversation:\n");
    for message in messages {
        let who = match (message.role, message.meta.internal) {
            (_, Some(_)) => "note",
            (Role::Tool, None) => "tool result",
            (role, None) => role.as_str(),
        };
        if !message.content.is_empty() {
            out.push_str(&format!(
                "[{who}] {}\n",
                clip(&message.content, SUMMARY_INPUT_MAX_CHARS)
            ));
        }
        for call in &message.tool_calls {
            out.push_str(&format!(
                "[tool call] {} {}\n",
                call.name,
                clip(&call.arguments, 500)
            ));
        }
    }
    out.push_str(&pinned_section(pinned));
    out
}

/// The fewest characters a tool call's arguments, or a tool result, keep in a request.
pub const SENT_MIN_CHARS: usize = 200;

/// The most characters the tool-call arguments of one answer may take together in a request
/// to a model with a `window`-token context, and likewise its results: half the window (in
/// characters, so a few tokens each), shared evenly among its `calls`, never below
/// [`SENT_MIN_CHARS`] each. One huge batch so cannot fill the window, whatever compaction does.
pub fn sent_share(window: u32, calls: usize) -> usize {
    (window as usize / 2 / calls.max(1)).max(SENT_MIN_CHARS)
}

/// `message` as a request carries it, or `None` when it goes whole: each tool call's arguments
/// and a tool result over `limit` characters are cut (see [`sent_share`]). Cut arguments become
/// a short JSON object that says so, so every API still gets valid JSON. The stored message
/// stays whole; the call ran with its full arguments.
pub fn clip_for_request(message: &Message, limit: usize) -> Option<Message> {
    let long_result = message.role == Role::Tool && over_chars(&message.content, limit);
    let long_call = message
        .tool_calls
        .iter()
        .any(|call| over_chars(&call.arguments, limit));
    if !long_result && !long_call {
        return None;
    }
    let mut sent = message.clone();
    sent.meta.tokens = None;
    if long_result {
        sent.content = crate::tool::truncate_output(&message.content, limit).0;
    }
    for call in &mut sent.tool_calls {
        let total = call.arguments.chars().count();
        if total > limit {
            let head: String = call.arguments.chars().take(limit).collect();
            call.arguments = serde_json::json!({
                "truncated_arguments": head,
                "note": format!(
                    "keel cut these arguments from {total} to {limit} characters in this \
                     request; the call ran with all of them"
                ),
            })
            .to_string();
        }
    }
    Some(sent)
}

/// True when `text` has more than `limit` characters. A text of at most `limit` bytes cannot
/// (a character takes at least one byte), so most texts are never walked: each request asks
/// this of every message it carries.
fn over_chars(text: &str, limit: usize) -> bool {
    text.len() > limit && text.chars().nth(limit).is_some()
}

/// `text` cut to `max` characters with an ellipsis.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
#[path = "context_tests.rs"]
mod tests;
