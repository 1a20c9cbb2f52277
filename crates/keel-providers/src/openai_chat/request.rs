//! `ChatRequest` → the JSON body of `POST /chat/completions`.

use keel_core::{ChatRequest, Message, Role, ToolCall, ToolChoice, ToolSpec};
use serde_json::{Map, Value, json};

/// Which JSON field carries the output-token limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenLimitField {
    /// `max_completion_tokens`: what api.openai.com wants (its reasoning models reject
    /// `max_tokens`).
    MaxCompletionTokens,
    /// `max_tokens`: what compatible servers (Ollama, vLLM, llama.cpp, proxies) read.
    MaxTokens,
}

impl TokenLimitField {
    /// The field for a server at `host`: `max_completion_tokens` for api.openai.com only.
    pub fn for_host(host: Option<&str>) -> Self {
        match host {
            Some(host) if host.eq_ignore_ascii_case("api.openai.com") => {
                TokenLimitField::MaxCompletionTokens
            }
            _ => TokenLimitField::MaxTokens,
        }
    }

    /// The JSON field name.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenLimitField::MaxCompletionTokens => "max_completion_tokens",
            TokenLimitField::MaxTokens => "max_tokens",
        }
    }
}

/// The request body for `request`. Loop metadata and reasoning are never sent; `tools` only
/// when there are some; `tool_choice` omitted when there are no tools to choose from and the
/// choice is `Auto` or `None` (OpenAI rejects a `tool_choice` without `tools`).
pub fn build_request_body(request: &ChatRequest, limit: TokenLimitField) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert(
        "messages".into(),
        request.messages.iter().map(wire_message).collect(),
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
    crate::api::insert_temperature(&mut body, request);
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

#[cfg(test)]
mod tests {
    use keel_core::InternalReason;

    use super::*;

    fn request(tools: Vec<ToolSpec>, tool_choice: ToolChoice) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![Message::user("hi")],
            tools: tools.into(),
            tool_choice,
            max_tokens: None,
            temperature: None,
            stream: false,
        }
    }

    fn echo_tool() -> ToolSpec {
        ToolSpec::new("echo", "Echoes", json!({"type": "object"}))
    }

    #[test]
    fn tool_choice_maps_and_is_omitted_without_tools() {
        let cases = [
            (ToolChoice::Auto, json!("auto")),
            (ToolChoice::None, json!("none")),
            (ToolChoice::Required, json!("required")),
            (
                ToolChoice::Tool("echo".into()),
                json!({"type": "function", "function": {"name": "echo"}}),
            ),
        ];
        for (choice, wire) in cases {
            let body = build_request_body(
                &request(vec![echo_tool()], choice),
                TokenLimitField::MaxTokens,
            );
            assert_eq!(body["tool_choice"], wire);
        }
        for choice in [ToolChoice::Auto, ToolChoice::None] {
            let body = build_request_body(&request(vec![], choice), TokenLimitField::MaxTokens);
            assert!(body.get("tool_choice").is_none(), "{body}");
            assert!(body.get("tools").is_none(), "{body}");
        }
    }

    #[test]
    fn token_limit_field_depends_on_the_host() {
        let mut req = request(vec![], ToolChoice::Auto);
        req.max_tokens = Some(50);
        let openai = TokenLimitField::for_host(Some("api.openai.com"));
        let local = TokenLimitField::for_host(Some("localhost"));
        assert_eq!(
            build_request_body(&req, openai)["max_completion_tokens"],
            50
        );
        assert!(build_request_body(&req, openai).get("max_tokens").is_none());
        assert_eq!(build_request_body(&req, local)["max_tokens"], 50);
        assert!(build_request_body(&req, local).get("stream").is_none());
    }

    #[test]
    fn metadata_and_reasoning_are_never_sent() {
        let mut answer = Message::assistant("thought about it");
        answer.reasoning = Some(keel_core::Reasoning {
            text: "secret".into(),
            replay: None,
        });
        answer.meta.pinned = true;
        let mut req = request(vec![], ToolChoice::Auto);
        req.messages = vec![
            Message::internal_user("continue", InternalReason::MaxTokensRecovery),
            answer,
        ];
        let body = build_request_body(&req, TokenLimitField::MaxTokens);
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": "continue"},
                {"role": "assistant", "content": "thought about it"},
            ])
        );
    }
}
