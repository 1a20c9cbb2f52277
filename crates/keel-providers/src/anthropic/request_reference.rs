//! The request body as this adapter built it before it had wire structs: a `serde_json::Value`
//! tree, kept (in tests only) as the reference its wire body must read back as, for hostile
//! text and random histories alike.

use keel_core::{ChatRequest, Message, Reasoning, Role, ToolCall, ToolChoice, ToolSpec};
use serde_json::{Map, Value, json};
use std::sync::Arc;

use super::request::{BodyOptions, MAX_CACHE_BREAKPOINTS, PLACEHOLDER_USER_TEXT};

/// The request body for `request`. Every system message joins the top-level `system` field;
/// tool results become `tool_result` blocks of a user turn; turns are merged so roles alternate
/// and the first is `user`; loop metadata is never sent; reasoning is sent only as the thinking
/// blocks this adapter stored for replay.
pub(super) fn reference_body(request: &ChatRequest, options: BodyOptions) -> Value {
    let mut system: Vec<Value> = request
        .messages
        .iter()
        .filter(|message| message.role == Role::System)
        .filter_map(|message| text_block(&message.content))
        .collect();
    let mut tools: Vec<Value> = request.tools.iter().map(wire_tool).collect();
    let mut turns = build_turns(&request.messages);
    if options.prompt_caching {
        mark_cache_breakpoints(&mut system, &mut tools, &mut turns);
    }

    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert(
        "max_tokens".into(),
        json!(request.max_tokens.unwrap_or(options.default_max_tokens)),
    );
    insert_temperature(&mut body, request);
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert(
        "messages".into(),
        turns.into_iter().map(Turn::into_json).collect(),
    );
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = wire_tool_choice(&request.tool_choice) {
            body.insert("tool_choice".into(), choice);
        }
    }
    if request.stream {
        body.insert("stream".into(), json!(true));
    }
    Value::Object(body)
}

/// One `messages` entry being assembled.
#[derive(Debug)]
struct Turn {
    /// `User` or `Assistant`.
    role: Role,
    blocks: Vec<Value>,
}

impl Turn {
    fn user_placeholder() -> Self {
        Turn {
            role: Role::User,
            blocks: vec![text_value(PLACEHOLDER_USER_TEXT)],
        }
    }

    /// Adds a block. Blocks the API wants first (tool results in a user turn, thinking in an
    /// assistant turn) go after the leading ones already there, before any other block.
    fn push(&mut self, block: Value) {
        if leads(&block) {
            let at = self.blocks.iter().take_while(|block| leads(block)).count();
            self.blocks.insert(at, block);
        } else {
            self.blocks.push(block);
        }
    }

    fn into_json(self) -> Value {
        json!({"role": self.role.as_str(), "content": self.blocks})
    }
}

fn leads(block: &Value) -> bool {
    matches!(
        block_type(block),
        Some("tool_result" | "thinking" | "redacted_thinking")
    )
}

fn block_type(block: &Value) -> Option<&str> {
    block.get("type").and_then(Value::as_str)
}

/// The conversation (system messages aside) as alternating user/assistant turns.
fn build_turns(messages: &[Arc<Message>]) -> Vec<Turn> {
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
        .retain(|block| !matches!(block_type(block), Some("thinking" | "redacted_thinking")));
    let Some(block) = last.blocks.last_mut() else {
        return;
    };
    if block_type(block) != Some("text") {
        return;
    }
    // Never empty: text blocks are only made from text with a non-space character.
    let trimmed = block["text"]
        .as_str()
        .map(|text| text.trim_end().to_string());
    if let Some(text) = trimmed {
        block["text"] = json!(text);
    }
}

/// Thinking blocks to replay, then the text, then one `tool_use` block per call. Thinking
/// alone (an answer cut off while thinking) is not sent: the API rejects an assistant message
/// whose last block is thinking.
fn assistant_blocks(message: &Message) -> Vec<Value> {
    let mut content: Vec<Value> = text_block(&message.content).into_iter().collect();
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
fn replay_blocks(reasoning: Option<&Reasoning>) -> Vec<Value> {
    let Some(Value::Array(stored)) = reasoning.and_then(|reasoning| reasoning.replay.as_ref())
    else {
        return Vec::new();
    };
    let is_text = |block: &Value, field: &str| block.get(field).is_some_and(Value::is_string);
    stored
        .iter()
        .filter(|block| match block_type(block) {
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
        .cloned()
        .collect()
}

/// A text block, unless the text is empty or blank (the API rejects those).
fn text_block(text: &str) -> Option<Value> {
    (!text.trim().is_empty()).then(|| text_value(text))
}

fn text_value(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// A `tool_result` block; empty output is sent without `content` (the API rejects blank text).
fn tool_result_block(message: &Message) -> Value {
    let call_id = message.tool_call_id.as_deref().unwrap_or_default();
    let mut block = json!({"type": "tool_result", "tool_use_id": wire_tool_id(call_id)});
    if !message.content.trim().is_empty() {
        block["content"] = json!(message.content);
    }
    block
}

/// A `tool_use` block. Its `input` must be a JSON object: arguments that are not one (the model
/// wrote broken JSON, which the loop already reported back to it) are sent as `{}`.
fn tool_use_block(call: &ToolCall) -> Value {
    let input = match serde_json::from_str::<Value>(&call.arguments) {
        Ok(object @ Value::Object(_)) => object,
        _ => json!({}),
    };
    json!({
        "type": "tool_use",
        "id": wire_tool_id(&call.id),
        "name": call.name,
        "input": input,
    })
}

/// A tool-call id the API accepts (`^[a-zA-Z0-9_-]+$`): ids minted by another provider before a
/// fallback may hold other characters, which become `_` (in the call and its result alike).
fn wire_tool_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn wire_tool(tool: &ToolSpec) -> Value {
    json!({
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.parameters,
    })
}

/// The `tool_choice` for a request that has tools; `Auto` is the API's default and is omitted.
fn wire_tool_choice(choice: &ToolChoice) -> Option<Value> {
    match choice {
        ToolChoice::Auto => None,
        ToolChoice::None => Some(json!({"type": "none"})),
        ToolChoice::Required => Some(json!({"type": "any"})),
        ToolChoice::Tool(name) => Some(json!({"type": "tool", "name": name})),
    }
}

/// Marks `cache_control` on the last system block, the last tool and the last block of each of
/// the last two user turns: the prefix up to each mark is cached, so the next call reads what
/// this one wrote. That is at most four marks, the API's limit.
fn mark_cache_breakpoints(system: &mut [Value], tools: &mut [Value], turns: &mut [Turn]) {
    let last_user_blocks = turns
        .iter_mut()
        .rev()
        .filter(|turn| turn.role == Role::User)
        .take(2)
        .filter_map(|turn| turn.blocks.last_mut());
    let marks = system
        .last_mut()
        .into_iter()
        .chain(tools.last_mut())
        .chain(last_user_blocks)
        .take(MAX_CACHE_BREAKPOINTS);
    for block in marks {
        block["cache_control"] = json!({"type": "ephemeral"});
    }
}

/// The old `crate::api::insert_temperature`.
fn insert_temperature(body: &mut Map<String, Value>, request: &ChatRequest) {
    if let Some(temperature) = request.temperature {
        let rounded = (f64::from(temperature) * 1000.0).round() / 1000.0;
        body.insert("temperature".into(), json!(rounded));
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::anthropic::request::{build_request_body, tools_json, wire_body};
    use crate::anthropic::{Anthropic, AnthropicConfig};
    use crate::wire_json::json_bytes;
    use crate::wire_test_support::{arbitrary_request, hostile_requests, parse};

    const OPTIONS: [BodyOptions; 2] = [
        BodyOptions {
            default_max_tokens: 4096,
            prompt_caching: true,
        },
        BodyOptions {
            default_max_tokens: 1,
            prompt_caching: false,
        },
    ];

    #[test]
    fn hostile_requests_read_back_as_the_reference_tree() {
        let adapters = OPTIONS.map(|options| {
            let mut config = AnthropicConfig::new("http://127.0.0.1:9");
            config.prompt_caching = options.prompt_caching;
            config.default_max_tokens = options.default_max_tokens;
            (Anthropic::new(config).unwrap(), options)
        });
        for request in hostile_requests() {
            for (adapter, options) in &adapters {
                let want = reference_body(&request, *options);
                assert_eq!(build_request_body(&request, *options), want);
                // Twice: the second body takes the tools from the adapter's cache.
                for _ in 0..2 {
                    assert_eq!(parse(&adapter.request_body(&request)), want);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn random_requests_read_back_as_the_reference_tree(request in arbitrary_request()) {
            for options in OPTIONS {
                let want = reference_body(&request, options);
                let tools =
                    (!request.tools.is_empty()).then(|| tools_json(&request.tools, options));
                let bytes = json_bytes(&wire_body(&request, options, tools.as_deref()));
                prop_assert_eq!(parse(&bytes), want.clone());
                prop_assert_eq!(build_request_body(&request, options), want);
            }
        }
    }
}
