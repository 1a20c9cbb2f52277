//! The request body as this adapter built it before it had wire structs: a `serde_json::Value`
//! tree, kept (in tests only) as the reference its wire body must read back as, for hostile
//! text and random histories alike.

use keel_core::{ChatRequest, Message, Role, ToolCall, ToolChoice, ToolSpec};

use super::request::TokenLimitField;
use serde_json::{Map, Value, json};

/// The request body for `request`. Loop metadata and reasoning are never sent; `tools` only
/// when there are some; `tool_choice` omitted when there are no tools to choose from and the
/// choice is `Auto` or `None` (OpenAI rejects a `tool_choice` without `tools`).
pub(super) fn reference_body(request: &ChatRequest, limit: TokenLimitField) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert(
        "messages".into(),
        request.messages.iter().map(|m| wire_message(m)).collect(),
    );
    let has_tools = !request.tools.is_empty();
    if has_tools {
        body.insert(
            "tools".into(),
            request.tools.iter().map(wire_tool).collect(),
        );
    }
    if let Some(choice) = wire_tool_choice(&request.tool_choice, has_tools) {
        body.insert("tool_choice".into(), choice);
    }
    if let Some(max_tokens) = request.max_tokens {
        body.insert(limit.as_str().into(), json!(max_tokens));
    }
    insert_temperature(&mut body, request);
    if request.stream {
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(body)
}

fn wire_message(message: &Message) -> Value {
    match message.role {
        Role::System | Role::User => json!({
            "role": message.role.as_str(),
            "content": message.content,
        }),
        Role::Assistant => {
            let content = if message.content.is_empty() {
                Value::Null
            } else {
                json!(message.content)
            };
            let mut wire = json!({"role": "assistant", "content": content});
            if !message.tool_calls.is_empty() {
                wire["tool_calls"] = message.tool_calls.iter().map(wire_tool_call).collect();
            }
            wire
        }
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": message.tool_call_id.as_deref().unwrap_or_default(),
            "content": message.content,
        }),
    }
}

fn wire_tool_call(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    })
}

fn wire_tool(tool: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    })
}

fn wire_tool_choice(choice: &ToolChoice, has_tools: bool) -> Option<Value> {
    match choice {
        ToolChoice::Auto | ToolChoice::None if !has_tools => None,
        ToolChoice::Auto => Some(json!("auto")),
        ToolChoice::None => Some(json!("none")),
        ToolChoice::Required => Some(json!("required")),
        ToolChoice::Tool(name) => Some(json!({"type": "function", "function": {"name": name}})),
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
    use crate::openai_chat::request::{build_request_body, tools_json, wire_body};
    use crate::openai_chat::{OpenAiChat, OpenAiConfig};
    use crate::wire_json::json_bytes;
    use crate::wire_test_support::{arbitrary_request, hostile_requests, parse};

    const LIMITS: [TokenLimitField; 2] = [
        TokenLimitField::MaxTokens,
        TokenLimitField::MaxCompletionTokens,
    ];

    #[test]
    fn hostile_requests_read_back_as_the_reference_tree() {
        let adapters = ["http://127.0.0.1:9/v1", "https://api.openai.com/v1"]
            .map(|url| OpenAiChat::new(OpenAiConfig::new(url)).unwrap());
        for request in hostile_requests() {
            for adapter in &adapters {
                let want = reference_body(&request, adapter.token_limit);
                assert_eq!(build_request_body(&request, adapter.token_limit), want);
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
            for limit in LIMITS {
                let want = reference_body(&request, limit);
                let tools = (!request.tools.is_empty()).then(|| tools_json(&request.tools));
                let bytes = json_bytes(&wire_body(&request, limit, tools.as_deref()));
                prop_assert_eq!(parse(&bytes), want.clone());
                prop_assert_eq!(build_request_body(&request, limit), want);
            }
        }
    }
}
