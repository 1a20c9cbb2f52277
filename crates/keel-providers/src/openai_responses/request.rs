//! `ChatRequest` → the JSON body of `POST /responses`, in stateless mode (`store: false`):
//! the whole conversation is sent as input items on every call, and reasoning is carried from
//! turn to turn as encrypted reasoning items the adapter stored in [`Reasoning::replay`].
//!
//! [`Reasoning::replay`]: keel_core::Reasoning::replay

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use keel_core::{ChatRequest, Message, Role, ToolChoice, ToolSpec};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// Whether reasoning is kept across turns as encrypted reasoning items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncryptedReasoning {
    /// Ask for `reasoning.encrypted_content` and send stored reasoning items back: what
    /// reasoning models (o-series, gpt-5) need to keep their reasoning in stateless mode.
    On,
    /// Neither ask for it nor send reasoning items back: for models that reject
    /// `reasoning.encrypted_content` (gpt-4o, gpt-4.1 and other non-reasoning models).
    Off,
}

/// The smallest `max_output_tokens` the API accepts; a smaller limit is raised to it.
pub const MIN_OUTPUT_TOKENS: u32 = 16;

/// The request body for `request`.
///
/// System messages become the top-level `instructions`; user, assistant and tool messages
/// become input items. Every `function_call_output` follows its `function_call` within the
/// same user turn: an output whose call is not before it is dropped, and so is a call that no
/// output answers before the next user message. Loop metadata is never sent. `tools` and
/// `tool_choice` are sent only when there are tools (`Auto` is the API's default and is never
/// sent, nor is a choice of a tool that is not among them). `max_output_tokens` is at least
/// [`MIN_OUTPUT_TOKENS`].
pub fn build_request_body(request: &ChatRequest, reasoning: EncryptedReasoning) -> Value {
    let tools = (!request.tools.is_empty()).then(|| tools_json(&request.tools));
    crate::wire_json::to_value(&wire_body(request, reasoning, tools.as_deref()))
}

/// The tools array of a request that offers `tools`.
pub(super) fn tools_json(tools: &[ToolSpec]) -> Box<RawValue> {
    crate::wire_json::raw_json(&tools.iter().map(WireTool::new).collect::<Vec<_>>())
}

/// The request body for `request`, with `tools` the [`tools_json`] of its tools (`None` when it
/// has none).
pub(super) fn wire_body<'a>(
    request: &'a ChatRequest,
    reasoning: EncryptedReasoning,
    tools: Option<&'a RawValue>,
) -> WireBody<'a> {
    let instructions: Vec<&str> = request
        .messages
        .iter()
        .filter(|message| message.role == Role::System && !message.content.is_empty())
        .map(|message| message.content.as_str())
        .collect();
    WireBody {
        model: &request.model,
        instructions: (!instructions.is_empty()).then(|| instructions.join("\n\n")),
        input: input_items(&request.messages, reasoning),
        tools,
        tool_choice: tools.and_then(|_| wire_tool_choice(&request.tool_choice, &request.tools)),
        max_output_tokens: request
            .max_tokens
            .map(|max_tokens| max_tokens.max(MIN_OUTPUT_TOKENS)),
        temperature: crate::api::wire_temperature(request),
        store: false,
        include: (reasoning == EncryptedReasoning::On).then_some(["reasoning.encrypted_content"]),
        stream: request.stream.then_some(true),
    }
}

/// The body of `POST /responses`.
#[derive(Serialize)]
pub(super) struct WireBody<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<String>,
    input: Vec<Item<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    store: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    include: Option<[&'static str; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
}

/// One input item.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item<'a> {
    /// An assistant message (`role: assistant`).
    Message {
        role: Role,
        content: [Text<'a>; 1],
    },
    FunctionCall {
        call_id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
    FunctionCallOutput {
        call_id: &'a str,
        output: &'a str,
    },
    /// A user message: `role` and `content`, without a `type`.
    #[serde(untagged)]
    User {
        role: Role,
        content: [Text<'a>; 1],
    },
    /// A stored reasoning item, sent back verbatim.
    #[serde(untagged)]
    Replay(&'a Value),
}

/// A message's text part.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Text<'a> {
    InputText { text: &'a str },
    OutputText { text: &'a str },
}

/// The conversation (without its system messages) as input items.
fn input_items(messages: &[Arc<Message>], reasoning: EncryptedReasoning) -> Vec<Item<'_>> {
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
                items.push(Item::User {
                    role: Role::User,
                    content: [Text::InputText {
                        text: &message.content,
                    }],
                });
            }
            Role::Assistant => {
                if reasoning == EncryptedReasoning::On {
                    items.extend(replayable_reasoning(message).map(Item::Replay));
                }
                if !message.content.is_empty() {
                    items.push(Item::Message {
                        role: Role::Assistant,
                        content: [Text::OutputText {
                            text: &message.content,
                        }],
                    });
                }
                for call in &message.tool_calls {
                    if answered(&call.id, position) && sent_calls.insert(&call.id) {
                        open_calls.insert(&call.id);
                        items.push(Item::FunctionCall {
                            call_id: &call.id,
                            name: &call.name,
                            arguments: &call.arguments,
                        });
                    }
                }
            }
            Role::Tool => {
                let call_id = message.tool_call_id.as_deref().unwrap_or_default();
                // Only the first result of a call that was sent is kept.
                if open_calls.remove(call_id) {
                    items.push(Item::FunctionCallOutput {
                        call_id,
                        output: &message.content,
                    });
                }
            }
        }
    }
    items
}

/// The reasoning items this adapter stored with an assistant message, to be sent back
/// verbatim. Only items carrying `encrypted_content` are replayable: in stateless mode the
/// server cannot look up an item by its id, and rejects one that has nothing else.
fn replayable_reasoning(message: &Message) -> impl Iterator<Item = &Value> {
    let items = match message
        .reasoning
        .as_ref()
        .and_then(|reasoning| reasoning.replay.as_ref())
    {
        Some(Value::Array(items)) => items.as_slice(),
        _ => &[],
    };
    items
        .iter()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("reasoning"))
        .filter(|item| {
            item.get("encrypted_content")
                .and_then(Value::as_str)
                .is_some_and(|content| !content.is_empty())
        })
}

/// A function tool. `strict` is sent as `false`: the Responses API defaults it to `true`,
/// which rejects any schema with optional properties.
#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
    strict: bool,
}

impl<'a> WireTool<'a> {
    fn new(tool: &'a ToolSpec) -> Self {
        WireTool {
            kind: "function",
            name: &tool.name,
            description: &tool.description,
            parameters: &tool.parameters,
            strict: false,
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
        name: &'a str,
    },
}

fn wire_tool_choice<'a>(choice: &'a ToolChoice, tools: &[ToolSpec]) -> Option<WireToolChoice<'a>> {
    match choice {
        ToolChoice::Auto => None,
        ToolChoice::None => Some(WireToolChoice::Mode("none")),
        ToolChoice::Required => Some(WireToolChoice::Mode("required")),
        ToolChoice::Tool(name) if tools.iter().any(|tool| &tool.name == name) => {
            Some(WireToolChoice::Function {
                kind: "function",
                name,
            })
        }
        ToolChoice::Tool(name) => {
            tracing::debug!(tool = %name, "the chosen tool is not offered; the model chooses");
            None
        }
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
