//! `ChatRequest` → the JSON body of `POST /chat/completions`.

use keel_core::{ChatRequest, Message, Role, ToolCall, ToolChoice, ToolSpec};
use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

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
    let tools = (!request.tools.is_empty()).then(|| tools_json(&request.tools));
    crate::wire_json::to_value(&wire_body(request, limit, tools.as_deref()))
}

/// The tools array of a request that offers `tools`.
pub(super) fn tools_json(tools: &[ToolSpec]) -> Box<RawValue> {
    crate::wire_json::raw_json(&tools.iter().map(WireTool::new).collect::<Vec<_>>())
}

/// The request body for `request`, with `tools` the [`tools_json`] of its tools (`None` when it
/// has none).
pub(super) fn wire_body<'a>(
    request: &'a ChatRequest,
    limit: TokenLimitField,
    tools: Option<&'a RawValue>,
) -> WireBody<'a> {
    let (max_completion_tokens, max_tokens) = match limit {
        TokenLimitField::MaxCompletionTokens => (request.max_tokens, None),
        TokenLimitField::MaxTokens => (None, request.max_tokens),
    };
    WireBody {
        model: &request.model,
        messages: request
            .messages
            .iter()
            .map(|m| WireMessage::new(m))
            .collect(),
        tools,
        tool_choice: WireToolChoice::new(&request.tool_choice, tools.is_some()),
        max_completion_tokens,
        max_tokens,
        temperature: crate::api::wire_temperature(request),
        stream: request.stream.then_some(true),
        stream_options: request.stream.then_some(StreamOptions {
            include_usage: true,
        }),
    }
}

/// The body of `POST /chat/completions`.
#[derive(Serialize)]
pub(super) struct WireBody<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// One `messages` entry.
#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        /// `null` when empty (a message that only calls tools).
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "WireToolCalls::is_empty")]
        tool_calls: WireToolCalls<'a>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

impl<'a> WireMessage<'a> {
    fn new(message: &'a Message) -> Self {
        let content = message.content.as_str();
        match message.role {
            Role::System => WireMessage::System { content },
            Role::User => WireMessage::User { content },
            Role::Assistant => WireMessage::Assistant {
                content: (!content.is_empty()).then_some(content),
                tool_calls: WireToolCalls(&message.tool_calls),
            },
            Role::Tool => WireMessage::Tool {
                tool_call_id: message.tool_call_id.as_deref().unwrap_or_default(),
                content,
            },
        }
    }
}

/// An assistant message's `tool_calls`, written straight from keel's calls.
struct WireToolCalls<'a>(&'a [ToolCall]);

impl WireToolCalls<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for WireToolCalls<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|call| WireToolCall {
            id: &call.id,
            kind: "function",
            function: WireFunctionCall {
                name: &call.name,
                arguments: &call.arguments,
            },
        }))
    }
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// One `tools` entry.
#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

impl<'a> WireTool<'a> {
    fn new(tool: &'a ToolSpec) -> Self {
        WireTool {
            kind: "function",
            function: WireFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.parameters,
            },
        }
    }
}

/// `tool_choice`: a mode, or the one function to call.
#[derive(Serialize)]
#[serde(untagged)]
enum WireToolChoice<'a> {
    Mode(&'static str),
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        function: WireFunctionName<'a>,
    },
}

#[derive(Serialize)]
struct WireFunctionName<'a> {
    name: &'a str,
}

impl<'a> WireToolChoice<'a> {
    fn new(choice: &'a ToolChoice, has_tools: bool) -> Option<Self> {
        match choice {
            ToolChoice::Auto | ToolChoice::None if !has_tools => None,
            ToolChoice::Auto => Some(WireToolChoice::Mode("auto")),
            ToolChoice::None => Some(WireToolChoice::Mode("none")),
            ToolChoice::Required => Some(WireToolChoice::Mode("required")),
            ToolChoice::Tool(name) => Some(WireToolChoice::Function {
                kind: "function",
                function: WireFunctionName { name },
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use keel_core::InternalReason;
    use serde_json::json;

    use super::*;

    fn request(tools: Vec<ToolSpec>, tool_choice: ToolChoice) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![Message::user("hi").into()],
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
            Message::internal_user("continue", InternalReason::MaxTokensRecovery).into(),
            answer.into(),
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
