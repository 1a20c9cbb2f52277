//! Request checks for OpenAI Responses: the body's shape, `input` items (messages with the
//! content parts their role allows, function calls and their outputs), tools and
//! `tool_choice`. Every `function_call_output` must answer an earlier `function_call` (unless
//! the calls live in a `previous_response_id`), and every `function_call` must be answered
//! before the next user message or the end of the input.

use serde_json::{Map, Value};

use crate::openai_common::{
    check_min_integer, element_path, empty_array, missing, object, optional_bool, parse_body,
    request_object, required_string, wrong_type,
};
use crate::wire::{Invalid, RequestInfo};

/// The smallest `max_output_tokens` the API accepts.
const MIN_OUTPUT_TOKENS: i64 = 16;

/// Request parameters the API echoes in its response object.
const ECHOED: [&str; 17] = [
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt_cache_key",
    "reasoning",
    "safety_identifier",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "user",
];

/// Input item types besides messages and function calls, passed through unchecked.
const OTHER_ITEMS: [&str; 14] = [
    "item_reference",
    "file_search_call",
    "web_search_call",
    "computer_call",
    "computer_call_output",
    "image_generation_call",
    "code_interpreter_call",
    "local_shell_call",
    "local_shell_call_output",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "mcp_call",
    "custom_tool_call_output",
];

/// Hosted tool types, passed through unchecked.
const HOSTED_TOOLS: [&str; 10] = [
    "file_search",
    "web_search",
    "web_search_preview",
    "computer_use_preview",
    "code_interpreter",
    "image_generation",
    "mcp",
    "local_shell",
    "custom",
    "allowed_tools",
];

/// Reads and checks a request body.
pub(super) fn read_request(body: &[u8]) -> Result<RequestInfo, Invalid> {
    let value = parse_body(body)?;
    let info = check(&value)?;
    Ok(RequestInfo {
        size: body.len(),
        turn_position: crate::turn_position::of_responses(value.get("input")),
        ..info
    })
}

/// Checks a request body (its `size` and `turn_position` are left 0).
pub(crate) fn check(value: &Value) -> Result<RequestInfo, Invalid> {
    let request = request_object(value)?;
    let model = required_string(request, "model", "")?.to_string();
    let stream = optional_bool(request, "stream", "stream")?.unwrap_or(false);
    match request.get("instructions") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(other) => return Err(wrong_type("instructions", "a string", other)),
    }
    check_min_integer(request, "max_output_tokens", MIN_OUTPUT_TOKENS)?;
    let tool_names = check_tools(request)?;
    check_tool_choice(request, &tool_names)?;
    let chained = matches!(request.get("previous_response_id"), Some(Value::String(_)));
    match request.get("input") {
        Some(Value::String(_)) => {}
        Some(Value::Array(items)) if items.is_empty() => return Err(empty_array("input")),
        Some(Value::Array(items)) => check_items(items, chained)?,
        None | Some(Value::Null) => return Err(missing("input")),
        Some(other) => return Err(wrong_type("input", "a string or an array", other)),
    }
    let echo = ECHOED
        .iter()
        .filter_map(|key| Some((key.to_string(), request.get(*key)?.clone())))
        .collect();
    Ok(RequestInfo {
        model,
        stream,
        echo,
        ..RequestInfo::default()
    })
}

fn check_items(items: &[Value], chained: bool) -> Result<(), Invalid> {
    // Calls waiting for their output, and calls already answered.
    let mut pending: Vec<String> = Vec::new();
    let mut answered: Vec<String> = Vec::new();
    let mut item_path = String::new();
    for (i, item) in items.iter().enumerate() {
        let path = element_path(&mut item_path, "input", i);
        let item = object(item, path)?;
        let kind = match item.get("type") {
            None | Some(Value::Null) => "message",
            Some(Value::String(kind)) => kind.as_str(),
            Some(other) => return Err(wrong_type(&format!("{path}.type"), "a string", other)),
        };
        match kind {
            "message" => {
                let role = check_message(item, path)?;
                if role == "user" {
                    no_unanswered_calls(&pending)?;
                }
            }
            "function_call" => {
                let call_id = required_string(item, "call_id", path)?;
                required_string(item, "name", path)?;
                required_string(item, "arguments", path)?;
                if pending
                    .iter()
                    .chain(&answered)
                    .any(|known| known == call_id)
                {
                    return Err(Invalid::new(
                        format!("Duplicate function call with call_id {call_id} in '{path}'."),
                        Some(&format!("{path}.call_id")),
                    ));
                }
                pending.push(call_id.to_string());
            }
            "function_call_output" => {
                let call_id = required_string(item, "call_id", path)?;
                match item.get("output") {
                    Some(Value::String(_)) | Some(Value::Array(_)) => {}
                    None | Some(Value::Null) => return Err(missing(&format!("{path}.output"))),
                    Some(other) => {
                        return Err(wrong_type(
                            &format!("{path}.output"),
                            "a string or an array",
                            other,
                        ));
                    }
                }
                match pending.iter().position(|p| p == call_id) {
                    Some(k) => answered.push(pending.remove(k)),
                    // The call may be part of the response this one continues.
                    None if chained && !answered.iter().any(|a| a == call_id) => {}
                    None => {
                        return Err(Invalid::new(
                            format!(
                                "No tool call found for function call output with call_id \
                                 {call_id}."
                            ),
                            Some("input"),
                        ));
                    }
                }
            }
            "reasoning" => match item.get("summary") {
                Some(Value::Array(_)) => {}
                None | Some(Value::Null) => return Err(missing(&format!("{path}.summary"))),
                Some(other) => {
                    return Err(wrong_type(&format!("{path}.summary"), "an array", other));
                }
            },
            other if OTHER_ITEMS.contains(&other) => {}
            other => {
                return Err(Invalid::new(
                    format!(
                        "Invalid value: '{other}'. Supported values are: 'message', \
                         'function_call', 'function_call_output', 'reasoning', {}.",
                        quoted(&OTHER_ITEMS)
                    ),
                    Some(&format!("{path}.type")),
                ));
            }
        }
    }
    no_unanswered_calls(&pending)
}

fn no_unanswered_calls(pending: &[String]) -> Result<(), Invalid> {
    match pending.first() {
        Some(call_id) => Err(Invalid::new(
            format!("No tool output found for function call {call_id}."),
            Some("input"),
        )),
        None => Ok(()),
    }
}

/// Checks a message item and returns its role.
fn check_message<'a>(item: &'a Map<String, Value>, path: &str) -> Result<&'a str, Invalid> {
    let role = required_string(item, "role", path)?;
    let allowed: &[&str] = match role {
        "user" | "system" | "developer" => &["input_text", "input_image", "input_file"],
        "assistant" => &["output_text", "refusal"],
        other => {
            return Err(Invalid::new(
                format!(
                    "Invalid value: '{other}'. Supported values are: 'assistant', 'system', \
                     'developer', and 'user'."
                ),
                Some(&format!("{path}.role")),
            ));
        }
    };
    let content_path = format!("{path}.content");
    let parts = match item.get("content") {
        Some(Value::String(_)) => return Ok(role),
        Some(Value::Array(parts)) => parts,
        None | Some(Value::Null) => return Err(missing(&content_path)),
        Some(other) => return Err(wrong_type(&content_path, "a string or an array", other)),
    };
    for (k, part) in parts.iter().enumerate() {
        let part_path = format!("{content_path}[{k}]");
        let part = object(part, &part_path)?;
        let kind = required_string(part, "type", &part_path)?;
        if !allowed.contains(&kind) {
            return Err(Invalid::new(
                format!(
                    "Invalid value: '{kind}'. Supported values are: {}.",
                    quoted(allowed)
                ),
                Some(&format!("{part_path}.type")),
            ));
        }
        match kind {
            "input_text" | "output_text" => text_field(part, "text", &part_path)?,
            "refusal" => text_field(part, "refusal", &part_path)?,
            _ => {}
        }
    }
    Ok(role)
}

/// A string member that may be empty.
fn text_field(part: &Map<String, Value>, key: &str, path: &str) -> Result<(), Invalid> {
    let full = format!("{path}.{key}");
    match part.get(key) {
        Some(Value::String(_)) => Ok(()),
        None | Some(Value::Null) => Err(missing(&full)),
        Some(other) => Err(wrong_type(&full, "a string", other)),
    }
}

/// Checks the tools and returns the names of the function tools.
fn check_tools(request: &Map<String, Value>) -> Result<Vec<String>, Invalid> {
    let tools = match request.get("tools") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(other) => return Err(wrong_type("tools", "an array", other)),
    };
    let mut names = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let path = format!("tools[{i}]");
        let tool = object(tool, &path)?;
        match required_string(tool, "type", &path)? {
            "function" => {
                let name = required_string(tool, "name", &path)?;
                match tool.get("parameters") {
                    Some(Value::Object(_)) | Some(Value::Null) => {}
                    None => return Err(missing(&format!("{path}.parameters"))),
                    Some(other) => {
                        return Err(wrong_type(
                            &format!("{path}.parameters"),
                            "an object",
                            other,
                        ));
                    }
                }
                optional_bool(tool, "strict", &format!("{path}.strict"))?;
                names.push(name.to_string());
            }
            hosted if HOSTED_TOOLS.contains(&hosted) => {}
            other => {
                return Err(Invalid::new(
                    format!(
                        "Invalid value: '{other}'. Supported values are: 'function', {}.",
                        quoted(&HOSTED_TOOLS)
                    ),
                    Some(&format!("{path}.type")),
                ));
            }
        }
    }
    Ok(names)
}

fn check_tool_choice(request: &Map<String, Value>, tool_names: &[String]) -> Result<(), Invalid> {
    match request.get("tool_choice") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(choice)) if ["none", "auto"].contains(&choice.as_str()) => Ok(()),
        Some(Value::String(choice)) if choice == "required" && tool_names.is_empty() => {
            Err(Invalid::new(
                "Tool choice 'required' must be specified with 'tools' parameter.",
                Some("tool_choice"),
            ))
        }
        Some(Value::String(choice)) if choice == "required" => Ok(()),
        Some(Value::String(choice)) => Err(Invalid::new(
            format!(
                "Invalid value: '{choice}'. Supported values are: 'none', 'auto', and 'required'."
            ),
            Some("tool_choice"),
        )),
        Some(Value::Object(choice)) => match required_string(choice, "type", "tool_choice")? {
            "function" => {
                let name = required_string(choice, "name", "tool_choice")?;
                if tool_names.iter().any(|n| n == name) {
                    Ok(())
                } else {
                    Err(Invalid::new(
                        format!("Tool choice '{name}' not found in 'tools' parameter."),
                        Some("tool_choice"),
                    ))
                }
            }
            hosted if HOSTED_TOOLS.contains(&hosted) => Ok(()),
            other => Err(Invalid::new(
                format!(
                    "Invalid value: '{other}'. Supported values are: 'function', {}.",
                    quoted(&HOSTED_TOOLS)
                ),
                Some("tool_choice.type"),
            )),
        },
        Some(other) => Err(wrong_type("tool_choice", "a string or an object", other)),
    }
}

fn quoted(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("'{v}'"))
        .collect::<Vec<_>>()
        .join(", ")
}
