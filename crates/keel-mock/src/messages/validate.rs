//! Request checks for Anthropic Messages, in the API's own wording (`max_tokens: Field
//! required`): the top-level parameters, tools, `tool_choice`, `thinking` and the
//! `cache_control` budget here; the conversation itself in `turns`.

use serde_json::{Map, Value};

use super::turns::check_messages;
use crate::wire::{Invalid, RequestInfo};

/// The most `cache_control` breakpoints a request may set.
const MAX_CACHE_BREAKPOINTS: usize = 4;

/// The smallest thinking budget the API accepts.
const MIN_THINKING_BUDGET: i64 = 1024;

/// Reads and checks a request body.
pub(super) fn read_request(body: &[u8]) -> Result<RequestInfo, Invalid> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        Invalid::new(
            format!("There was an error parsing the body of your request as JSON: {e}"),
            None,
        )
    })?;
    let info = check(&value)?;
    Ok(RequestInfo {
        size: body.len(),
        turn_position: crate::turn_position::of_messages_api(messages_of(&value)),
        ..info
    })
}

/// The `messages` of a request that passed the checks.
fn messages_of(value: &Value) -> &[Value] {
    value
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Checks a request body (its `size` and `turn_position` are left 0).
pub(crate) fn check(value: &Value) -> Result<RequestInfo, Invalid> {
    let Value::Object(request) = value else {
        return Err(invalid(
            "body",
            "Input should be a valid dictionary or object to extract fields from",
        ));
    };
    let model = match request.get("model") {
        Some(Value::String(model)) if !model.is_empty() => model.clone(),
        Some(Value::String(_)) => {
            return Err(invalid("model", "String should have at least 1 character"));
        }
        None => return Err(field_required("model")),
        Some(_) => return Err(invalid("model", "Input should be a valid string")),
    };
    let max_tokens = match request.get("max_tokens") {
        None => return Err(field_required("max_tokens")),
        Some(value) => match value.as_i64() {
            Some(n) if n >= 1 => n,
            Some(_) => {
                return Err(invalid(
                    "max_tokens",
                    "Input should be greater than or equal to 1",
                ));
            }
            None => return Err(invalid("max_tokens", "Input should be a valid integer")),
        },
    };
    let stream = match request.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(stream)) => *stream,
        Some(_) => return Err(invalid("stream", "Input should be a valid boolean")),
    };
    let mut breakpoints = 0;
    check_system(request.get("system"), &mut breakpoints)?;
    let tool_names = check_tools(request.get("tools"), &mut breakpoints)?;
    check_tool_choice(request.get("tool_choice"), &tool_names)?;
    check_thinking(request.get("thinking"), max_tokens)?;
    let messages = match request.get("messages") {
        None => return Err(field_required("messages")),
        Some(Value::Array(messages)) if messages.is_empty() => {
            return Err(invalid("messages", "at least one message is required"));
        }
        Some(Value::Array(messages)) => messages,
        Some(_) => return Err(invalid("messages", "Input should be a valid list")),
    };
    check_messages(messages, &mut breakpoints)?;
    if breakpoints > MAX_CACHE_BREAKPOINTS {
        return Err(Invalid::new(
            format!(
                "A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. \
                 Found {breakpoints}."
            ),
            None,
        ));
    }
    Ok(RequestInfo {
        model,
        stream,
        ..RequestInfo::default()
    })
}

fn check_system(system: Option<&Value>, breakpoints: &mut usize) -> Result<(), Invalid> {
    match system {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(Value::Array(blocks)) => {
            for (i, block) in blocks.iter().enumerate() {
                let path = format!("system.{i}");
                let block = as_object(block, &path)?;
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {}
                    Some(other) => {
                        return Err(invalid(
                            &format!("{path}.type"),
                            &format!("Input should be 'text', not '{other}'"),
                        ));
                    }
                    None => return Err(field_required(&format!("{path}.type"))),
                }
                check_text(block, &path)?;
                count_cache_control(block, &path, breakpoints)?;
            }
            Ok(())
        }
        Some(_) => Err(invalid(
            "system",
            "Input should be a valid string or a list of text blocks",
        )),
    }
}

/// Checks the tools and returns their names.
fn check_tools(tools: Option<&Value>, breakpoints: &mut usize) -> Result<Vec<String>, Invalid> {
    let tools = match tools {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(invalid("tools", "Input should be a valid list")),
    };
    let mut names: Vec<String> = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let path = format!("tools.{i}");
        let tool = as_object(tool, &path)?;
        let name = match tool.get("name") {
            Some(Value::String(name)) => name,
            None => return Err(field_required(&format!("{path}.name"))),
            Some(_) => {
                return Err(invalid(
                    &format!("{path}.name"),
                    "Input should be a valid string",
                ));
            }
        };
        let name_ok = (1..=128).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !name_ok {
            return Err(invalid(
                &format!("{path}.name"),
                "String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
            ));
        }
        // A client tool (no `type`, or `custom`) describes its input; server tools
        // (`web_search_20250305`, `bash_20250124`, ...) are defined by Anthropic.
        let client_tool = match tool.get("type") {
            None | Some(Value::Null) => true,
            Some(kind) => kind == "custom",
        };
        if client_tool {
            match tool.get("input_schema") {
                None => return Err(field_required(&format!("{path}.input_schema"))),
                Some(Value::Object(schema)) => {
                    if let Some(kind) = schema.get("type")
                        && kind != "object"
                    {
                        return Err(invalid(
                            &format!("{path}.input_schema.type"),
                            "Input should be 'object'",
                        ));
                    }
                }
                Some(_) => {
                    return Err(invalid(
                        &format!("{path}.input_schema"),
                        "Input should be a valid dictionary",
                    ));
                }
            }
        }
        count_cache_control(tool, &path, breakpoints)?;
        if names.contains(name) {
            return Err(invalid("tools", "Tool names must be unique."));
        }
        names.push(name.clone());
    }
    Ok(names)
}

fn check_tool_choice(choice: Option<&Value>, tool_names: &[String]) -> Result<(), Invalid> {
    let choice = match choice {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(choice)) => choice,
        Some(_) => {
            return Err(invalid(
                "tool_choice",
                "Input should be a valid dictionary or object to extract fields from",
            ));
        }
    };
    let kind = match choice.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        None => return Err(field_required("tool_choice.type")),
        Some(_) => {
            return Err(invalid(
                "tool_choice.type",
                "Input should be a valid string",
            ));
        }
    };
    match kind {
        "auto" | "any" | "none" => {}
        "tool" => match choice.get("name") {
            Some(Value::String(name)) if tool_names.contains(name) => {}
            Some(Value::String(name)) => {
                return Err(invalid(
                    "tool_choice.name",
                    &format!("Tool '{name}' not found in the provided tools"),
                ));
            }
            None => return Err(field_required("tool_choice.tool.name")),
            Some(_) => {
                return Err(invalid(
                    "tool_choice.tool.name",
                    "Input should be a valid string",
                ));
            }
        },
        other => {
            return Err(invalid(
                "tool_choice",
                &format!(
                    "Input tag '{other}' found using 'type' does not match any of the expected \
                     tags: 'auto', 'any', 'tool', 'none'"
                ),
            ));
        }
    }
    match choice.get("disable_parallel_tool_use") {
        None | Some(Value::Null) | Some(Value::Bool(_)) => Ok(()),
        Some(_) => Err(invalid(
            &format!("tool_choice.{kind}.disable_parallel_tool_use"),
            "Input should be a valid boolean",
        )),
    }
}

fn check_thinking(thinking: Option<&Value>, max_tokens: i64) -> Result<(), Invalid> {
    let thinking = match thinking {
        None | Some(Value::Null) => return Ok(()),
        Some(value) => as_object(value, "thinking")?,
    };
    match thinking.get("type").and_then(Value::as_str) {
        Some("disabled") | Some("adaptive") => Ok(()),
        Some("enabled") => {
            let budget = match thinking.get("budget_tokens") {
                None => return Err(field_required("thinking.enabled.budget_tokens")),
                Some(value) => value.as_i64().ok_or_else(|| {
                    invalid(
                        "thinking.enabled.budget_tokens",
                        "Input should be a valid integer",
                    )
                })?,
            };
            if budget < MIN_THINKING_BUDGET {
                return Err(invalid(
                    "thinking.enabled.budget_tokens",
                    &format!("Input should be greater than or equal to {MIN_THINKING_BUDGET}"),
                ));
            }
            if max_tokens <= budget {
                return Err(Invalid::new(
                    "`max_tokens` must be greater than `thinking.budget_tokens`",
                    None,
                ));
            }
            Ok(())
        }
        Some(other) => Err(invalid(
            "thinking",
            &format!(
                "Input tag '{other}' found using 'type' does not match any of the expected \
                 tags: 'enabled', 'disabled', 'adaptive'"
            ),
        )),
        None => Err(field_required("thinking.type")),
    }
}

/// Checks a block's `text`: a non-empty string with something besides whitespace.
pub(super) fn check_text(block: &Map<String, Value>, path: &str) -> Result<(), Invalid> {
    match block.get("text") {
        None => Err(field_required(&format!("{path}.text"))),
        Some(Value::String(text)) if text.is_empty() => {
            Err(invalid(root(path), "text content blocks must be non-empty"))
        }
        Some(Value::String(text)) if text.trim().is_empty() => Err(invalid(
            root(path),
            "text content blocks must contain non-whitespace text",
        )),
        Some(Value::String(_)) => Ok(()),
        Some(_) => Err(invalid(
            &format!("{path}.text"),
            "Input should be a valid string",
        )),
    }
}

/// Counts a block's `cache_control` breakpoint, checking its shape.
pub(super) fn count_cache_control(
    block: &Map<String, Value>,
    path: &str,
    breakpoints: &mut usize,
) -> Result<(), Invalid> {
    match block.get("cache_control") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(control)) => {
            match control.get("type").and_then(Value::as_str) {
                Some("ephemeral") => {}
                _ => {
                    return Err(invalid(
                        &format!("{path}.cache_control.type"),
                        "Input should be 'ephemeral'",
                    ));
                }
            }
            *breakpoints += 1;
            Ok(())
        }
        Some(_) => Err(invalid(
            &format!("{path}.cache_control"),
            "Input should be a valid dictionary",
        )),
    }
}

/// The first segment of a dotted path (`messages.3.content.0` → `messages`).
fn root(path: &str) -> &str {
    path.split('.').next().unwrap_or(path)
}

/// `value` as an object, or the API's complaint about `path`.
pub(super) fn as_object<'a>(
    value: &'a Value,
    path: &str,
) -> Result<&'a Map<String, Value>, Invalid> {
    value.as_object().ok_or_else(|| {
        invalid(
            path,
            "Input should be a valid dictionary or object to extract fields from",
        )
    })
}

/// `path: Field required`.
pub(super) fn field_required(path: &str) -> Invalid {
    invalid(path, "Field required")
}

/// `path: problem`.
pub(super) fn invalid(path: &str, problem: &str) -> Invalid {
    Invalid::new(format!("{path}: {problem}"), None)
}
