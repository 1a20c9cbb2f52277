//! The request body as this adapter built it before it had wire structs: a `serde_json::Value`
//! tree, kept (in tests only) as the reference its wire body must read back as, for hostile
//! text and random histories alike.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use keel_core::{ChatRequest, Message, Role, ToolChoice, ToolSpec};
use serde_json::{Map, Value, json};

use super::request::{EncryptedReasoning, MIN_OUTPUT_TOKENS};

/// The request body for `request`.
///
/// System messages become the top-level `instructions`; user, assistant and tool messages
/// become input items. Every `function_call_output` follows its `function_call` within the
/// same user turn: an output whose call is not before it is dropped, and so is a call that no
/// output answers before the next user message. Loop metadata is never sent. `tools` and
/// `tool_choice` are sent only when there are tools (`Auto` is the API's default and is never
/// sent, nor is a choice of a tool that is not among them). `max_output_tokens` is at least
/// [`MIN_OUTPUT_TOKENS`].
pub(super) fn reference_body(request: &ChatRequest, reasoning: EncryptedReasoning) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    let instructions: Vec<&str> = request
        .messages
        .iter()
        .filter(|message| message.role == Role::System && !message.content.is_empty())
        .map(|message| message.content.as_str())
        .collect();
    if !instructions.is_empty() {
        body.insert("instructions".into(), json!(instructions.join("\n\n")));
    }
    body.insert(
        "input".into(),
        Value::Array(input_items(&request.messages, reasoning)),
    );
    if !request.tools.is_empty() {
        body.insert(
            "tools".into(),
            request.tools.iter().map(wire_tool).collect(),
        );
        if let Some(choice) = wire_tool_choice(&request.tool_choice, &request.tools) {
            body.insert("tool_choice".into(), choice);
        }
    }
    if let Some(max_tokens) = request.max_tokens {
        body.insert(
            "max_output_tokens".into(),
            json!(max_tokens.max(MIN_OUTPUT_TOKENS)),
        );
    }
    insert_temperature(&mut body, request);
    body.insert("store".into(), json!(false));
    if reasoning == EncryptedReasoning::On {
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if request.stream {
        body.insert("stream".into(), json!(true));
    }
    Value::Object(body)
}

/// The conversation (without its system messages) as input items.
fn input_items(messages: &[Arc<Message>], reasoning: EncryptedReasoning) -> Vec<Value> {
    // The user turn of each message (a user message starts a new one), and where the results
    // of each call are: a call is only sent when a result follows it in the same turn.
    let turns: Vec<usize> = messages
        .iter()
        .scan(0, |turn, message| {
            *turn += usize::from(message.role == Role::User);
            Some(*turn)
        })
        .collect();
    let mut results: HashMap<&str, Vec<usize>> = HashMap::new();
    for (position, message) in messages.iter().enumerate() {
        if let (Role::Tool, Some(id)) = (message.role, message.tool_call_id.as_deref()) {
            results.entry(id).or_default().push(position);
        }
    }
    let answered = |id: &str, call_position: usize| {
        results.get(id).is_some_and(|positions| {
            positions
                .iter()
                .any(|&p| p > call_position && turns[p] == turns[call_position])
        })
    };
    let mut sent_calls: HashSet<&str> = HashSet::new();
    let mut open_calls: HashSet<&str> = HashSet::new();
    let mut items = Vec::new();
    for (position, message) in messages.iter().enumerate() {
        match message.role {
            Role::System => {}
            Role::User => {
                // Calls of earlier turns can no longer be answered.
                open_calls.clear();
                items.push(json!({
                    "role": "user",
                    "content": [{"type": "input_text", "text": message.content}],
                }));
            }
            Role::Assistant => {
                if reasoning == EncryptedReasoning::On {
                    items.extend(replayable_reasoning(message));
                }
                if !message.content.is_empty() {
                    items.push(json!({
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": message.content}],
                    }));
                }
                for call in &message.tool_calls {
                    if answered(&call.id, position) && sent_calls.insert(&call.id) {
                        open_calls.insert(&call.id);
                        items.push(json!({
                            "type": "function_call",
                            "call_id": call.id,
                            "name": call.name,
                            "arguments": call.arguments,
                        }));
                    }
                }
            }
            Role::Tool => {
                let call_id = message.tool_call_id.as_deref().unwrap_or_default();
                // Only the first result of a call that was sent is kept.
                if open_calls.remove(call_id) {
                    items.push(json!({
                        "type": "function_call_output",
                        "call_id": call_id,
                        "output": message.content,
                    }));
                }
            }
        }
    }
    items
}

/// The reasoning items this adapter stored with an assistant message, to be sent back
/// verbatim. Only items carrying `encrypted_content` are replayable: in stateless mode the
/// server cannot look up an item by its id, and rejects one that has nothing else.
fn replayable_reasoning(message: &Message) -> Vec<Value> {
    let Some(Value::Array(items)) = message
        .reasoning
        .as_ref()
        .and_then(|reasoning| reasoning.replay.as_ref())
    else {
        return Vec::new();
    };
    items
        .iter()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("reasoning"))
        .filter(|item| {
            item.get("encrypted_content")
                .and_then(Value::as_str)
                .is_some_and(|content| !content.is_empty())
        })
        .cloned()
        .collect()
}

/// A function tool. `strict` is sent as `false`: the Responses API defaults it to `true`,
/// which rejects any schema with optional properties.
fn wire_tool(tool: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": false,
    })
}

fn wire_tool_choice(choice: &ToolChoice, tools: &[ToolSpec]) -> Option<Value> {
    match choice {
        ToolChoice::Auto => None,
        ToolChoice::None => Some(json!("none")),
        ToolChoice::Required => Some(json!("required")),
        ToolChoice::Tool(name) if tools.iter().any(|tool| &tool.name == name) => {
            Some(json!({"type": "function", "name": name}))
        }
        ToolChoice::Tool(name) => {
            tracing::debug!(tool = %name, "the chosen tool is not offered; the model chooses");
            None
        }
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
    use crate::openai_chat::OpenAiConfig;
    use crate::openai_responses::OpenAiResponses;
    use crate::openai_responses::request::{build_request_body, tools_json, wire_body};
    use crate::wire_json::json_bytes;
    use crate::wire_test_support::{arbitrary_request, hostile_requests, parse};

    const REASONING: [EncryptedReasoning; 2] = [EncryptedReasoning::On, EncryptedReasoning::Off];

    #[test]
    fn hostile_requests_read_back_as_the_reference_tree() {
        let adapter = OpenAiResponses::new(OpenAiConfig::new("http://127.0.0.1:9/v1")).unwrap();
        for request in hostile_requests() {
            for reasoning in REASONING {
                let want = reference_body(&request, reasoning);
                assert_eq!(build_request_body(&request, reasoning), want);
                // Twice: the second body takes the tools from the adapter's cache.
                for _ in 0..2 {
                    assert_eq!(parse(&adapter.request_body(&request, reasoning)), want);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn random_requests_read_back_as_the_reference_tree(request in arbitrary_request()) {
            for reasoning in REASONING {
                let want = reference_body(&request, reasoning);
                let tools = (!request.tools.is_empty()).then(|| tools_json(&request.tools));
                let bytes = json_bytes(&wire_body(&request, reasoning, tools.as_deref()));
                prop_assert_eq!(parse(&bytes), want.clone());
                prop_assert_eq!(build_request_body(&request, reasoning), want);
            }
        }
    }
}
