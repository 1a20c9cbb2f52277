//! The conversation checks of Anthropic Messages: roles (`user`/`assistant` only, the first
//! from the user, strictly alternating), content blocks and where each may appear, and tool
//! pairing — every `tool_use` of an assistant turn answered by a `tool_result` in the very next
//! user turn, and every `tool_result` answering a `tool_use` of the turn just before.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::validate::{as_object, check_text, count_cache_control, field_required, invalid};
use crate::wire::Invalid;

/// Block types the mock knows; anything else is rejected as the real API does.
const KNOWN_BLOCKS: [&str; 12] = [
    "text",
    "image",
    "document",
    "search_result",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "container_upload",
];

/// Block types only an assistant turn may hold.
const ASSISTANT_ONLY: [&str; 6] = [
    "tool_use",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
];

/// Tool-related blocks of one message, with the path of each.
#[derive(Default)]
struct ToolBlocks {
    uses: Vec<(String, String)>,
    results: Vec<(String, String)>,
}

/// Checks the `messages` array (known to be non-empty), counting `cache_control` breakpoints.
pub(super) fn check_messages(messages: &[Value], breakpoints: &mut usize) -> Result<(), Invalid> {
    let mut previous: Option<(&str, Vec<String>)> = None;
    let mut use_ids: HashSet<String> = HashSet::new();
    let last = messages.len().saturating_sub(1);
    for (i, message) in messages.iter().enumerate() {
        let path = format!("messages.{i}");
        let message = as_object(message, &path)?;
        let role = check_role(message, &path)?;
        if i == 0 && role != "user" {
            return Err(invalid(
                "messages",
                "first message must use the \"user\" role",
            ));
        }
        if previous.as_ref().is_some_and(|(before, _)| *before == role) {
            return Err(invalid(
                "messages",
                &format!(
                    "roles must alternate between \"user\" and \"assistant\", but found \
                     multiple \"{role}\" roles in a row"
                ),
            ));
        }
        let final_assistant = i == last && role == "assistant";
        let blocks = check_content(message, &path, role, final_assistant, breakpoints)?;

        // The tool uses of the turn before must all be answered here.
        let mut pending = previous.take().map(|(_, ids)| ids).unwrap_or_default();
        for (id, block_path) in &blocks.results {
            match pending.iter().position(|p| p == id) {
                Some(k) => {
                    pending.remove(k);
                }
                None => {
                    return Err(invalid(
                        block_path,
                        &format!(
                            "unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each \
                             `tool_result` block must have a corresponding `tool_use` block in \
                             the previous message."
                        ),
                    ));
                }
            }
        }
        if !pending.is_empty() {
            return Err(unanswered(i - 1, &pending));
        }
        let mut ids = Vec::new();
        for (id, block_path) in blocks.uses {
            if !use_ids.insert(id.clone()) {
                return Err(invalid(&block_path, "`tool_use` ids must be unique"));
            }
            ids.push(id);
        }
        previous = Some((role, ids));
    }
    match previous {
        Some((_, ids)) if !ids.is_empty() => Err(unanswered(last, &ids)),
        _ => Ok(()),
    }
}

fn unanswered(assistant: usize, ids: &[String]) -> Invalid {
    invalid(
        &format!("messages.{assistant}"),
        &format!(
            "`tool_use` ids were found without `tool_result` blocks immediately after: {}. Each \
             `tool_use` block must have a corresponding `tool_result` block in the next message.",
            ids.join(", ")
        ),
    )
}

fn check_role<'a>(message: &'a Map<String, Value>, path: &str) -> Result<&'a str, Invalid> {
    match message.get("role") {
        None => Err(field_required(&format!("{path}.role"))),
        Some(Value::String(role)) if role == "user" || role == "assistant" => Ok(role),
        Some(Value::String(role)) if role == "system" => Err(invalid(
            "messages",
            "Unexpected role \"system\". The Messages API accepts a top-level `system` \
             parameter, not \"system\" as an input message role.",
        )),
        Some(_) => Err(invalid(
            &format!("{path}.role"),
            "Input should be 'user' or 'assistant'",
        )),
    }
}

fn check_content(
    message: &Map<String, Value>,
    path: &str,
    role: &str,
    final_assistant: bool,
    breakpoints: &mut usize,
) -> Result<ToolBlocks, Invalid> {
    let empty = || {
        invalid(
            path,
            "all messages must have non-empty content except for the optional final assistant \
             message",
        )
    };
    let trailing = || {
        invalid(
            "messages",
            "final assistant content cannot end with trailing whitespace",
        )
    };
    let blocks = match message.get("content") {
        None => return Err(field_required(&format!("{path}.content"))),
        Some(Value::String(text)) => {
            if text.is_empty() && !final_assistant {
                return Err(empty());
            }
            if final_assistant && text.ends_with(char::is_whitespace) {
                return Err(trailing());
            }
            return Ok(ToolBlocks::default());
        }
        Some(Value::Array(blocks)) => blocks,
        Some(_) => {
            return Err(invalid(
                &format!("{path}.content"),
                "Input should be a valid string or a list of content blocks",
            ));
        }
    };
    if blocks.is_empty() && !final_assistant {
        return Err(empty());
    }
    let mut tools = ToolBlocks::default();
    for (j, block) in blocks.iter().enumerate() {
        let block_path = format!("{path}.content.{j}");
        let block = as_object(block, &block_path)?;
        let kind = block_type(block, &block_path)?;
        if ASSISTANT_ONLY.contains(&kind) && role != "assistant" {
            return Err(invalid(
                &block_path,
                &format!("`{kind}` blocks may only appear in `assistant` messages"),
            ));
        }
        if kind == "tool_result" && role != "user" {
            return Err(invalid(
                &block_path,
                "`tool_result` blocks may only appear in `user` messages",
            ));
        }
        count_cache_control(block, &block_path, breakpoints)?;
        match kind {
            "text" => {
                check_text(block, &block_path)?;
                let last_block = j + 1 == blocks.len();
                let ends_blank = block
                    .get("text")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.ends_with(char::is_whitespace));
                if final_assistant && last_block && ends_blank {
                    return Err(trailing());
                }
            }
            "image" | "document" => {
                required(block, "source", &format!("{block_path}.{kind}"))?;
            }
            "tool_use" => {
                let id = tool_use_id(block, &block_path)?;
                required_str(block, "name", &format!("{block_path}.tool_use"))?;
                match block.get("input") {
                    None => return Err(field_required(&format!("{block_path}.tool_use.input"))),
                    Some(Value::Object(_)) => {}
                    Some(_) => {
                        return Err(invalid(
                            &format!("{block_path}.tool_use.input"),
                            "Input should be a valid dictionary",
                        ));
                    }
                }
                tools.uses.push((id, block_path));
            }
            "tool_result" => {
                let result_path = format!("{block_path}.tool_result");
                let id = required_str(block, "tool_use_id", &result_path)?.to_string();
                check_tool_result_content(block, &result_path, breakpoints)?;
                match block.get("is_error") {
                    None | Some(Value::Null) | Some(Value::Bool(_)) => {}
                    Some(_) => {
                        return Err(invalid(
                            &format!("{result_path}.is_error"),
                            "Input should be a valid boolean",
                        ));
                    }
                }
                tools.results.push((id, block_path));
            }
            "thinking" => {
                required_str(block, "thinking", &format!("{block_path}.thinking"))?;
                required_str(block, "signature", &format!("{block_path}.thinking"))?;
            }
            "redacted_thinking" => {
                required_str(block, "data", &format!("{block_path}.redacted_thinking"))?;
            }
            _ => {}
        }
    }
    Ok(tools)
}

fn block_type<'a>(block: &'a Map<String, Value>, path: &str) -> Result<&'a str, Invalid> {
    match block.get("type") {
        None => Err(field_required(&format!("{path}.type"))),
        Some(Value::String(kind)) if KNOWN_BLOCKS.contains(&kind.as_str()) => Ok(kind),
        Some(Value::String(kind)) => Err(invalid(
            path,
            &format!(
                "Input tag '{kind}' found using 'type' does not match any of the expected tags: \
                 {}",
                KNOWN_BLOCKS
                    .iter()
                    .map(|k| format!("'{k}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        Some(_) => Err(invalid(
            &format!("{path}.type"),
            "Input should be a valid string",
        )),
    }
}

fn tool_use_id(block: &Map<String, Value>, path: &str) -> Result<String, Invalid> {
    let id = required_str(block, "id", &format!("{path}.tool_use"))?;
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(invalid(
            &format!("{path}.tool_use.id"),
            "String should match pattern '^[a-zA-Z0-9_-]+$'",
        ));
    }
    Ok(id.to_string())
}

fn check_tool_result_content(
    block: &Map<String, Value>,
    path: &str,
    breakpoints: &mut usize,
) -> Result<(), Invalid> {
    let parts = match block.get("content") {
        None | Some(Value::Null) | Some(Value::String(_)) => return Ok(()),
        Some(Value::Array(parts)) => parts,
        Some(_) => {
            return Err(invalid(
                &format!("{path}.content"),
                "Input should be a valid string or a list of content blocks",
            ));
        }
    };
    for (k, part) in parts.iter().enumerate() {
        let part_path = format!("{path}.content.{k}");
        let part = as_object(part, &part_path)?;
        match block_type(part, &part_path)? {
            "text" => check_text(part, &part_path)?,
            "image" | "document" | "search_result" => {}
            other => {
                return Err(invalid(
                    &part_path,
                    &format!("`{other}` blocks are not allowed inside a `tool_result`"),
                ));
            }
        }
        count_cache_control(part, &part_path, breakpoints)?;
    }
    Ok(())
}

fn required<'a>(
    block: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a Value, Invalid> {
    match block.get(key) {
        None | Some(Value::Null) => Err(field_required(&format!("{path}.{key}"))),
        Some(value) => Ok(value),
    }
}

fn required_str<'a>(
    block: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a str, Invalid> {
    required(block, key, path)?
        .as_str()
        .ok_or_else(|| invalid(&format!("{path}.{key}"), "Input should be a valid string"))
}
