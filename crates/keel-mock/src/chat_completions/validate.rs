//! Request checks for chat completions, as strict as the real API where it matters to an
//! adapter: the body's shape, the types of the common parameters, and that every tool call of an
//! assistant message is answered by tool results right after it. Each rejection names the
//! offending parameter (`messages[3].tool_call_id`) and why.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::openai_common::{
    check_min_integer, element_path, empty_array, expect_function_type, member_path, missing,
    object, optional_bool, parse_body, request_object, required_model, required_object,
    required_string, wrong_type,
};
use crate::wire::{Invalid, RequestInfo};

/// Reads and checks a request body.
pub(super) fn read_request(body: &[u8]) -> Result<RequestInfo, Invalid> {
    let value = parse_body(body)?;
    let info = check(&value)?;
    Ok(RequestInfo {
        size: body.len(),
        turn_position: crate::turn_position::of_chat_completions(messages_of(&value)),
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

/// Checks a request (its `size` and `turn_position` are left 0).
pub(crate) fn check(value: &Value) -> Result<RequestInfo, Invalid> {
    let request = request_object(value)?;
    let model = required_model(request)?;
    let messages = match request.get("messages") {
        Some(Value::Array(messages)) if !messages.is_empty() => messages,
        Some(Value::Array(_)) => return Err(empty_array("messages")),
        None | Some(Value::Null) => return Err(missing("messages")),
        Some(other) => return Err(wrong_type("messages", "an array", other)),
    };
    let stream = optional_bool(request, "stream", "stream")?.unwrap_or(false);
    let include_usage = match request.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(_) if !stream => {
            return Err(Invalid::new(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                Some("stream_options"),
            ));
        }
        Some(Value::Object(options)) => {
            optional_bool(options, "include_usage", "stream_options.include_usage")?
                .unwrap_or(false)
        }
        Some(other) => return Err(wrong_type("stream_options", "an object", other)),
    };
    for name in ["max_tokens", "max_completion_tokens"] {
        check_min_integer(request, name, 1)?;
    }
    check_tools(request)?;
    check_messages(messages)?;
    Ok(RequestInfo {
        model,
        stream,
        include_usage,
        ..RequestInfo::default()
    })
}

fn check_tools(request: &Map<String, Value>) -> Result<(), Invalid> {
    let tools = match request.get("tools") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(tools)) => tools.as_slice(),
        Some(other) => return Err(wrong_type("tools", "an array", other)),
    };
    let (mut tool_path, mut function_path) = (String::new(), String::new());
    for (i, tool) in tools.iter().enumerate() {
        let path = element_path(&mut tool_path, "tools", i);
        let tool = object(tool, path)?;
        expect_function_type(tool, path)?;
        let function = required_object(tool, "function", path)?;
        required_string(
            function,
            "name",
            member_path(&mut function_path, path, "function"),
        )?;
        match function.get("parameters") {
            None | Some(Value::Object(_)) => {}
            Some(other) => {
                return Err(wrong_type(
                    &format!("{path}.function.parameters"),
                    "an object",
                    other,
                ));
            }
        }
    }
    match request.get("tool_choice") {
        None | Some(Value::Null) => Ok(()),
        Some(_) if tools.is_empty() => Err(Invalid::new(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' \
             are specified.",
            Some("tool_choice"),
        )),
        Some(Value::String(choice)) if ["none", "auto", "required"].contains(&choice.as_str()) => {
            Ok(())
        }
        Some(Value::String(choice)) => Err(Invalid::new(
            format!(
                "Invalid value: '{choice}'. Supported values are: 'none', 'auto', and 'required'."
            ),
            Some("tool_choice"),
        )),
        Some(Value::Object(choice)) => {
            expect_function_type(choice, "tool_choice")?;
            let function = required_object(choice, "function", "tool_choice")?;
            required_string(function, "name", "tool_choice.function").map(|_| ())
        }
        Some(other) => Err(wrong_type("tool_choice", "a string or an object", other)),
    }
}

/// Tool calls of one assistant message still waiting for their results.
struct OpenCalls {
    assistant: usize,
    unanswered: Vec<String>,
}

fn check_messages(messages: &[Value]) -> Result<(), Invalid> {
    let mut open: Option<OpenCalls> = None;
    let mut answered: HashSet<String> = HashSet::new();
    let mut message_path = String::new();
    for (i, message) in messages.iter().enumerate() {
        let path = element_path(&mut message_path, "messages", i);
        let message = object(message, path)?;
        let role = required_string(message, "role", path)?;
        if !["system", "developer", "user", "assistant", "tool"].contains(&role) {
            return Err(Invalid::new(
                format!(
                    "Invalid value: '{role}'. Supported values are: 'system', 'assistant', \
                     'user', 'tool', and 'developer'."
                ),
                Some(&format!("{path}.role")),
            ));
        }
        if role != "assistant" && message.contains_key("tool_calls") {
            return Err(Invalid::new(
                format!(
                    "Invalid parameter: '{path}.tool_calls' is only allowed on messages with role 'assistant'."
                ),
                Some(&format!("{path}.tool_calls")),
            ));
        }
        if role != "tool" && message.contains_key("tool_call_id") {
            return Err(Invalid::new(
                format!(
                    "Invalid parameter: '{path}.tool_call_id' is only allowed on messages with role 'tool'."
                ),
                Some(&format!("{path}.tool_call_id")),
            ));
        }
        if role == "user" || role == "assistant" {
            close(open.take(), || format!("is followed by {path} ({role})"))?;
        }
        match role {
            "assistant" => {
                let calls = match message.get("tool_calls") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(calls) => check_tool_calls(calls, path)?,
                };
                check_content(message, path, calls.is_empty())?;
                if !calls.is_empty() {
                    open = Some(OpenCalls {
                        assistant: i,
                        unanswered: calls,
                    });
                }
            }
            "tool" => {
                check_content(message, path, true)?;
                let id = required_string(message, "tool_call_id", path)?;
                answer_call(&mut open, &mut answered, id, path)?;
            }
            _ => check_content(message, path, true)?,
        }
    }
    close(open, || "ends the conversation".to_string())
}

/// Matches a tool result to the call it answers, or says why it answers none. (A call of an
/// earlier assistant message is either answered already or was reported unanswered when the
/// next turn began, so those are the only two ways to miss.)
fn answer_call(
    open: &mut Option<OpenCalls>,
    answered: &mut HashSet<String>,
    id: &str,
    path: &str,
) -> Result<(), Invalid> {
    let pending = open
        .as_mut()
        .and_then(|calls| Some((calls.unanswered.iter().position(|c| c == id)?, calls)));
    if let Some((position, calls)) = pending {
        calls.unanswered.remove(position);
        answered.insert(id.to_string());
        return Ok(());
    }
    let param = Some(format!("{path}.tool_call_id"));
    let message = if answered.contains(id) {
        format!(
            "Invalid parameter: {path} is a second tool result for tool_call_id '{id}', which \
             an earlier tool message already answered."
        )
    } else {
        format!(
            "Invalid parameter: messages with role 'tool' must be a response to a preceding \
             message with 'tool_calls'. {path}.tool_call_id '{id}' answers no tool call of an \
             earlier assistant message."
        )
    };
    Err(Invalid { message, param })
}

/// Fails when tool calls are left unanswered; `what_follows` says where the results ran out.
fn close(open: Option<OpenCalls>, what_follows: impl FnOnce() -> String) -> Result<(), Invalid> {
    match open {
        Some(calls) if !calls.unanswered.is_empty() => Err(Invalid::new(
            format!(
                "An assistant message with 'tool_calls' must be followed by tool messages \
                 responding to each 'tool_call_id'. The following tool_call_ids did not have \
                 response messages: {} (messages[{}] {}).",
                calls.unanswered.join(", "),
                calls.assistant,
                what_follows()
            ),
            Some("messages"),
        )),
        _ => Ok(()),
    }
}

/// Checks an assistant message's `tool_calls` and returns their ids.
fn check_tool_calls(calls: &Value, path: &str) -> Result<Vec<String>, Invalid> {
    let list_path = format!("{path}.tool_calls");
    let calls = match calls {
        Value::Array(calls) if !calls.is_empty() => calls,
        Value::Array(_) => return Err(empty_array(&list_path)),
        other => return Err(wrong_type(&list_path, "an array", other)),
    };
    let mut ids = Vec::new();
    let (mut call_path, mut function_path) = (String::new(), String::new());
    for (j, call) in calls.iter().enumerate() {
        let call_path = element_path(&mut call_path, &list_path, j);
        let call = object(call, call_path)?;
        let id = required_string(call, "id", call_path)?;
        expect_function_type(call, call_path)?;
        let function_path = member_path(&mut function_path, call_path, "function");
        let function = required_object(call, "function", call_path)?;
        required_string(function, "name", function_path)?;
        required_string(function, "arguments", function_path)?;
        if ids.iter().any(|known| known == id) {
            return Err(Invalid::new(
                format!("Invalid '{list_path}': tool call id '{id}' appears twice."),
                Some(&list_path),
            ));
        }
        ids.push(id.to_string());
    }
    Ok(ids)
}

fn check_content(message: &Map<String, Value>, path: &str, required: bool) -> Result<(), Invalid> {
    let content_path = || format!("{path}.content");
    match message.get("content") {
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(parts)) => {
            for (k, part) in parts.iter().enumerate() {
                let part_path = format!("{}[{k}]", content_path());
                required_string(object(part, &part_path)?, "type", &part_path)?;
            }
            Ok(())
        }
        None | Some(Value::Null) if required => Err(missing(&content_path())),
        None | Some(Value::Null) => Ok(()),
        Some(other) => Err(wrong_type(&content_path(), "a string or an array", other)),
    }
}
