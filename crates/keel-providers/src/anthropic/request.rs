//! `ChatRequest` → the JSON body of `POST /v1/messages`.
//!
//! The Messages API is stricter than keel's OpenAI-style transcript: system text is a
//! top-level field, tool results are blocks of a `user` turn, roles must alternate starting with
//! `user`, and empty text is rejected. This module bridges the two without ever failing.

use std::borrow::Cow;
use std::sync::Arc;

use keel_core::{ChatRequest, Message, Reasoning, Role, ToolCall, ToolChoice, ToolSpec};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Text of a user turn the API needs where keel's transcript has none: before a conversation
/// that starts with the assistant, or in place of an empty user message.
pub const PLACEHOLDER_USER_TEXT: &str = "(conversation continues)";

/// The most `cache_control` breakpoints one request may carry (the API's limit).
pub const MAX_CACHE_BREAKPOINTS: usize = 4;

/// Request settings that come from the adapter's configuration, not from the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyOptions {
    /// Sent as `max_tokens` when the request has no limit (the API requires one).
    pub default_max_tokens: u32,
    /// Mark prompt-cache breakpoints (`cache_control`) on the system prompt, the tools and the
    /// last two user turns.
    pub prompt_caching: bool,
}

/// The request body for `request`. Every system message joins the top-level `system` field;
/// tool results become `tool_result` blocks of a user turn; turns are merged so roles alternate
/// and the first is `user`; loop metadata is never sent; reasoning is sent only as the thinking
/// blocks this adapter stored for replay.
pub fn build_request_body(request: &ChatRequest, options: BodyOptions) -> Value {
    let tools = (!request.tools.is_empty()).then(|| tools_json(&request.tools, options));
    crate::wire_json::to_value(&wire_body(request, options, tools.as_deref()))
}

/// The tools array of a request that offers `tools` (its last tool marked as a cache
/// breakpoint when `options` ask for prompt caching).
pub(super) fn tools_json(tools: &[ToolSpec], options: BodyOptions) -> Box<RawValue> {
    let last = tools.len().saturating_sub(1);
    let wire: Vec<WireTool> = tools
        .iter()
        .enumerate()
        .map(|(i, tool)| WireTool {
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.parameters,
            cache_control: (options.prompt_caching && i == last).then_some(CacheControl::Ephemeral),
        })
        .collect();
    crate::wire_json::raw_json(&wire)
}

/// The request body for `request`, with `tools` the [`tools_json`] of its tools for the same
/// `options` (`None` when it has none).
pub(super) fn wire_body<'a>(
    request: &'a ChatRequest,
    options: BodyOptions,
    tools: Option<&'a RawValue>,
) -> WireBody<'a> {
    let mut system: Vec<Block> = request
        .messages
        .iter()
        .filter(|message| message.role == Role::System)
        .filter_map(|message| text_block(&message.content))
        .collect();
    let mut turns = build_turns(&request.messages);
    if options.prompt_caching {
        mark_cache_breakpoints(&mut system, &mut turns);
    }
    WireBody {
        model: &request.model,
        max_tokens: request.max_tokens.unwrap_or(options.default_max_tokens),
        temperature: crate::api::wire_temperature(request),
        system,
        messages: turns,
        tools,
        tool_choice: tools.and_then(|_| WireToolChoice::new(&request.tool_choice)),
        stream: request.stream.then_some(true),
    }
}

/// The body of `POST /v1/messages`.
#[derive(Serialize)]
pub(super) struct WireBody<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
}

/// A prompt-cache breakpoint: the prefix up to the block that carries it is cached.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum CacheControl {
    Ephemeral,
}

/// One content block (of a turn, or of the `system` field).
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: Cow<'a, str>,
        name: &'a str,
        /// The call's arguments, parsed: the API wants an object, not text.
        input: Value,
    },
    ToolResult {
        tool_use_id: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    /// A stored `thinking` or `redacted_thinking` block, sent back verbatim.
    #[serde(untagged)]
    Replay(&'a Value),
}

impl Block<'_> {
    /// Blocks the API wants first: tool results in a user turn, thinking in an assistant turn.
    fn leads(&self) -> bool {
        matches!(self, Block::ToolResult { .. } | Block::Replay(_))
    }

    /// Sets a cache breakpoint on the block. Only text and tool results are ever marked (the
    /// last block of the system field or of a user turn); a block that takes no mark keeps none.
    fn mark(&mut self) {
        match self {
            Block::Text { cache_control, .. } | Block::ToolResult { cache_control, .. } => {
                *cache_control = Some(CacheControl::Ephemeral);
            }
            Block::ToolUse { .. } | Block::Replay(_) => {}
        }
    }
}

/// One `messages` entry being assembled.
#[derive(Debug, Serialize)]
struct Turn<'a> {
    /// `User` or `Assistant`.
    role: Role,
    #[serde(rename = "content")]
    blocks: Vec<Block<'a>>,
}

impl<'a> Turn<'a> {
    fn user_placeholder() -> Self {
        Turn {
            role: Role::User,
            blocks: vec![text_value(PLACEHOLDER_USER_TEXT)],
        }
    }

    /// Adds a block. Blocks the API wants first (tool results in a user turn, thinking in an
    /// assistant turn) go after the leading ones already there, before any other block.
    fn push(&mut self, block: Block<'a>) {
        if block.leads() {
            let at = self.blocks.iter().take_while(|block| block.leads()).count();
            self.blocks.insert(at, block);
        } else {
            self.blocks.push(block);
        }
    }
}

/// The conversation (system messages aside) as alternating user/assistant turns.
fn build_turns(messages: &[Arc<Message>]) -> Vec<Turn<'_>> {
    let mut turns: Vec<Turn> = Vec::new();
    for message in messages {
        let (role, blocks) = match message.role {
            Role::System => continue,
            Role::User => (
                Role::User,
                text_block(&message.content).into_iter().collect(),
            ),
            Role::Tool => (Role::User, vec![tool_result_block(message)]),
            Role::Assistant => (Role::Assistant, assistant_blocks(message)),
        };
        // An assistant message with nothing to send is left out; an empty user message still
        // marks a user turn (filled in below).
        if role == Role::Assistant && blocks.is_empty() {
            continue;
        }
        if turns.last().is_none_or(|last| last.role != role) {
            turns.push(Turn {
                role,
                blocks: Vec::new(),
            });
        }
        if let Some(turn) = turns.last_mut() {
            for block in blocks {
                turn.push(block);
            }
        }
    }
    if turns.first().is_none_or(|turn| turn.role != Role::User) {
        turns.insert(0, Turn::user_placeholder());
    }
    for turn in &mut turns {
        if turn.blocks.is_empty() {
            turn.blocks.push(text_value(PLACEHOLDER_USER_TEXT));
        }
    }
    tidy_final_assistant_turn(&mut turns);
    turns
}

/// A final (prefilled) assistant turn may hold no thinking blocks (keel does not enable
/// thinking, and the API then rejects them there) and its text may not end in whitespace.
fn tidy_final_assistant_turn(turns: &mut [Turn]) {
    let Some(last) = turns.last_mut().filter(|turn| turn.role == Role::Assistant) else {
        return;
    };
    // Never empties the turn: thinking is only sent beside text or a tool call.
    last.blocks
        .retain(|block| !matches!(block, Block::Replay(_)));
    // Never empty: text blocks are only made from text with a non-space character.
    if let Some(Block::Text { text, .. }) = last.blocks.last_mut() {
        *text = text.trim_end();
    }
}

/// Thinking blocks to replay, then the text, then one `tool_use` block per call. Thinking
/// alone (an answer cut off while thinking) is not sent: the API rejects an assistant message
/// whose last block is thinking.
fn assistant_blocks(message: &Message) -> Vec<Block<'_>> {
    let mut content: Vec<Block> = text_block(&message.content).into_iter().collect();
    content.extend(message.tool_calls.iter().map(tool_use_block));
    if content.is_empty() {
        return content;
    }
    let mut blocks = replay_blocks(message.reasoning.as_ref());
    blocks.extend(content);
    blocks
}

/// The stored thinking blocks of `reasoning`, verbatim. Only blocks this adapter could have
/// stored are sent (a signed `thinking` block or a `redacted_thinking` one): replay data from
/// another provider (after a fallback) or reasoning without replay data is not sent.
fn replay_blocks(reasoning: Option<&Reasoning>) -> Vec<Block<'_>> {
    let Some(Value::Array(stored)) = reasoning.and_then(|reasoning| reasoning.replay.as_ref())
    else {
        return Vec::new();
    };
    let is_text = |block: &Value, field: &str| block.get(field).is_some_and(Value::is_string);
    stored
        .iter()
        .filter(|block| match block.get("type").and_then(Value::as_str) {
            Some("thinking") => {
                is_text(block, "thinking")
                    && block
                        .get("signature")
                        .and_then(Value::as_str)
                        .is_some_and(|signature| !signature.is_empty())
            }
            Some("redacted_thinking") => is_text(block, "data"),
            _ => false,
        })
        .map(Block::Replay)
        .collect()
}

/// A text block, unless the text is empty or blank (the API rejects those).
fn text_block(text: &str) -> Option<Block<'_>> {
    (!text.trim().is_empty()).then(|| text_value(text))
}

fn text_value(text: &str) -> Block<'_> {
    Block::Text {
        text,
        cache_control: None,
    }
}

/// A `tool_result` block; empty output is sent without `content` (the API rejects blank text).
fn tool_result_block(message: &Message) -> Block<'_> {
    let call_id = message.tool_call_id.as_deref().unwrap_or_default();
    Block::ToolResult {
        tool_use_id: wire_tool_id(call_id),
        content: (!message.content.trim().is_empty()).then_some(message.content.as_str()),
        cache_control: None,
    }
}

/// A `tool_use` block. Its `input` must be a JSON object: arguments that are not one (the model
/// wrote broken JSON, which the loop already reported back to it) are sent as `{}`.
fn tool_use_block(call: &ToolCall) -> Block<'_> {
    let input = match serde_json::from_str::<Value>(&call.arguments) {
        Ok(object @ Value::Object(_)) => object,
        _ => Value::Object(Map::new()),
    };
    Block::ToolUse {
        id: wire_tool_id(&call.id),
        name: &call.name,
        input,
    }
}

/// A tool-call id the API accepts (`^[a-zA-Z0-9_-]+$`): ids minted by another provider before a
/// fallback may hold other characters, which become `_` (in the call and its result alike).
fn wire_tool_id(id: &str) -> Cow<'_, str> {
    let acceptable = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if id.chars().all(acceptable) {
        return Cow::Borrowed(id);
    }
    id.chars()
        .map(|c| if acceptable(c) { c } else { '_' })
        .collect()
}

/// One `tools` entry.
#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

/// `tool_choice` for a request that has tools.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum WireToolChoice<'a> {
    None,
    Any,
    Tool { name: &'a str },
}

impl<'a> WireToolChoice<'a> {
    /// The choice; `Auto` is the API's default and is omitted.
    fn new(choice: &'a ToolChoice) -> Option<Self> {
        match choice {
            ToolChoice::Auto => None,
            ToolChoice::None => Some(WireToolChoice::None),
            ToolChoice::Required => Some(WireToolChoice::Any),
            ToolChoice::Tool(name) => Some(WireToolChoice::Tool { name }),
        }
    }
}

/// One mark on the system field, one on the tools (in [`tools_json`]) and two on user turns:
/// within the API's limit.
const _: () = assert!(1 + 1 + 2 <= MAX_CACHE_BREAKPOINTS);

/// Marks `cache_control` on the last system block and the last block of each of the last two
/// user turns (the last tool is marked in [`tools_json`]): the prefix up to each mark is cached,
/// so the next call reads what this one wrote. That is at most four marks, the API's limit.
fn mark_cache_breakpoints<'a>(system: &mut [Block<'a>], turns: &mut [Turn<'a>]) {
    let last_user_blocks = turns
        .iter_mut()
        .rev()
        .filter(|turn| turn.role == Role::User)
        .take(2)
        .filter_map(|turn| turn.blocks.last_mut());
    for block in system.last_mut().into_iter().chain(last_user_blocks) {
        block.mark();
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
