//! `ChatRequest` → the JSON body of `POST /responses`, in stateless mode (`store: false`):
//! the whole conversation is sent as input items on every call, and reasoning is carried from
//! turn to turn as encrypted reasoning items the adapter stored in [`Reasoning::replay`].
//!
//! [`Reasoning::replay`]: keel_core::Reasoning::replay

use std::collections::{HashMap, HashSet};

use keel_core::{ChatRequest, Message, Role, ToolChoice, ToolSpec};
use serde_json::{Map, Value, json};

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
    crate::api::insert_temperature(&mut body, request);
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
fn input_items(messages: &[Message], reasoning: EncryptedReasoning) -> Vec<Value> {
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

#[cfg(test)]
mod tests {
    use keel_core::{InternalReason, Reasoning, ToolCall};

    use super::*;

    fn request(messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            model: "o4-mini".into(),
            messages,
            tools: Vec::new().into(),
            tool_choice: ToolChoice::Auto,
            max_tokens: None,
            temperature: None,
            stream: false,
        }
    }

    fn body(request: &ChatRequest) -> Value {
        build_request_body(request, EncryptedReasoning::On)
    }

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "ls".into(),
            arguments: r#"{"path": "."}"#.into(),
        }
    }

    fn echo_tool() -> ToolSpec {
        ToolSpec::new("echo", "Echoes", json!({"type": "object"}))
    }

    fn input_types(body: &Value) -> Vec<String> {
        body["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| {
                let kind = item
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("message");
                match item.get("call_id").and_then(Value::as_str) {
                    Some(id) => format!("{kind}:{id}"),
                    None => kind.to_string(),
                }
            })
            .collect()
    }

    #[test]
    fn system_messages_become_instructions_and_the_rest_input_items() {
        let mut internal = Message::internal_user("Continue.", InternalReason::LoopNudge);
        internal.meta.pinned = true;
        let req = request(vec![
            Message::system("Be brief."),
            Message::user("hi"),
            Message::system("Answer in French."),
            Message::assistant("Bonjour."),
            internal,
            Message::assistant(""),
        ]);
        let body = body(&req);
        assert_eq!(body["instructions"], "Be brief.\n\nAnswer in French.");
        assert_eq!(
            body["input"],
            json!([
                {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Bonjour."}]},
                {"role": "user", "content": [{"type": "input_text", "text": "Continue."}]},
            ])
        );
        assert_eq!(body["store"], false);
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        for absent in ["tools", "tool_choice", "max_output_tokens", "stream"] {
            assert!(body.get(absent).is_none(), "{absent}: {body}");
        }
    }

    #[test]
    fn without_system_messages_there_are_no_instructions() {
        let body = body(&request(vec![Message::user("hi")]));
        assert!(body.get("instructions").is_none(), "{body}");
    }

    #[test]
    fn calls_and_results_become_function_items_with_raw_arguments() {
        let req = request(vec![
            Message::user("list"),
            Message::assistant_with_calls("Looking.", vec![call("c1"), call("c2")]),
            Message::tool_result("c1", "a.txt"),
            Message::tool_result("c2", "b.txt"),
        ]);
        let body = body(&req);
        assert_eq!(
            body["input"][2],
            json!({"type": "function_call", "call_id": "c1", "name": "ls",
                   "arguments": "{\"path\": \".\"}"})
        );
        assert_eq!(
            body["input"][4],
            json!({"type": "function_call_output", "call_id": "c1", "output": "a.txt"})
        );
        assert_eq!(
            input_types(&body),
            [
                "message",
                "message",
                "function_call:c1",
                "function_call:c2",
                "function_call_output:c1",
                "function_call_output:c2",
            ]
        );
    }

    #[test]
    fn orphan_results_and_unanswered_calls_are_dropped() {
        let req = request(vec![
            Message::user("go"),
            // A result before any call, and a result for a call that never existed.
            Message::tool_result("c1", "too early"),
            Message::assistant_with_calls("", vec![call("c1"), call("c2"), call("c3")]),
            Message::tool_result("c1", "ok"),
            Message::tool_result("c1", "a duplicate"),
            Message::tool_result("ghost", "no call"),
            // c2 is answered only after the next user message; c3 never.
            Message::user("and?"),
            Message::tool_result("c2", "late"),
        ]);
        let body = body(&req);
        assert_eq!(
            input_types(&body),
            [
                "message",
                "function_call:c1",
                "function_call_output:c1",
                "message",
            ]
        );
        assert_eq!(body["input"][2]["output"], "ok");
    }

    #[test]
    fn results_after_more_assistant_text_in_the_same_turn_still_count() {
        let req = request(vec![
            Message::user("go"),
            Message::assistant_with_calls("", vec![call("c1")]),
            Message::assistant("Waiting for the listing."),
            Message::tool_result("c1", "ok"),
        ]);
        assert_eq!(
            input_types(&body(&req)),
            [
                "message",
                "function_call:c1",
                "message",
                "function_call_output:c1"
            ]
        );
    }

    #[test]
    fn a_result_before_its_call_drops_both() {
        let req = request(vec![
            Message::user("go"),
            Message::tool_result("c1", "early"),
            Message::assistant_with_calls("", vec![call("c1")]),
        ]);
        assert_eq!(input_types(&body(&req)), ["message"]);
    }

    #[test]
    fn a_repeated_call_id_is_sent_once() {
        let req = request(vec![
            Message::assistant_with_calls("", vec![call("c1"), call("c1")]),
            Message::tool_result("c1", "ok"),
        ]);
        assert_eq!(
            input_types(&body(&req)),
            ["function_call:c1", "function_call_output:c1"]
        );
    }

    fn reasoning_item(id: &str, encrypted: Option<&str>) -> Value {
        let mut item = json!({
            "id": id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "thinking"}],
        });
        if let Some(content) = encrypted {
            item["encrypted_content"] = json!(content);
        }
        item
    }

    fn with_replay(mut message: Message, replay: Value) -> Message {
        message.reasoning = Some(Reasoning {
            text: "thinking".into(),
            replay: Some(replay),
        });
        message
    }

    #[test]
    fn stored_reasoning_items_go_back_verbatim_before_the_assistant_items() {
        let kept = reasoning_item("rs_1", Some("gAAA"));
        let replay = json!([
            kept,
            reasoning_item("rs_2", None),
            {"type": "thinking", "thinking": "from another adapter", "encrypted_content": "x"},
        ]);
        let req = request(vec![
            Message::user("list"),
            with_replay(
                Message::assistant_with_calls("Looking.", vec![call("c1")]),
                replay,
            ),
            Message::tool_result("c1", "a.txt"),
        ]);
        let body = body(&req);
        assert_eq!(
            input_types(&body),
            [
                "message",
                "reasoning",
                "message",
                "function_call:c1",
                "function_call_output:c1"
            ]
        );
        assert_eq!(body["input"][1], kept);

        let off = build_request_body(&req, EncryptedReasoning::Off);
        assert!(off.get("include").is_none(), "{off}");
        assert_eq!(off["store"], false);
        assert!(!input_types(&off).contains(&"reasoning".to_string()));
    }

    #[test]
    fn reasoning_without_replay_or_from_other_adapters_is_not_sent() {
        let plain = with_replay(Message::assistant("ok"), json!({"signature": "abc"}));
        let mut no_replay = Message::assistant("ok");
        no_replay.reasoning = Some(Reasoning {
            text: "hmm".into(),
            replay: None,
        });
        let body = body(&request(vec![plain, no_replay]));
        assert_eq!(input_types(&body), ["message", "message"]);
    }

    #[test]
    fn tools_are_flat_function_tools_and_choices_map() {
        let mut req = request(vec![Message::user("hi")]);
        req.tools = vec![echo_tool()].into();
        let cases = [
            (ToolChoice::Auto, None),
            (ToolChoice::None, Some(json!("none"))),
            (ToolChoice::Required, Some(json!("required"))),
            (
                ToolChoice::Tool("echo".into()),
                Some(json!({"type": "function", "name": "echo"})),
            ),
        ];
        for (choice, wire) in cases {
            req.tool_choice = choice;
            let body = body(&req);
            assert_eq!(body.get("tool_choice"), wire.as_ref(), "{body}");
            assert_eq!(
                body["tools"],
                json!([{"type": "function", "name": "echo", "description": "Echoes",
                        "parameters": {"type": "object"}, "strict": false}])
            );
        }
    }

    #[test]
    fn a_chosen_tool_that_is_not_offered_is_not_forced() {
        let mut req = request(vec![Message::user("hi")]);
        req.tools = vec![echo_tool()].into();
        req.tool_choice = ToolChoice::Tool("missing".into());
        let body = body(&req);
        assert!(body.get("tool_choice").is_none(), "{body}");
        assert_eq!(body["tools"][0]["name"], "echo");
    }

    #[test]
    fn no_tool_choice_without_tools() {
        for choice in [
            ToolChoice::Auto,
            ToolChoice::None,
            ToolChoice::Required,
            ToolChoice::Tool("echo".into()),
        ] {
            let mut req = request(vec![Message::user("hi")]);
            req.tool_choice = choice;
            let body = body(&req);
            assert!(body.get("tool_choice").is_none(), "{body}");
            assert!(body.get("tools").is_none(), "{body}");
        }
    }

    #[test]
    fn max_tokens_and_stream_map() {
        let mut req = request(vec![Message::user("hi")]);
        req.max_tokens = Some(50);
        req.stream = true;
        let body = body(&req);
        assert_eq!(body["max_output_tokens"], 50);
        assert_eq!(body["stream"], true);
        assert!(body.get("max_tokens").is_none());

        req.max_tokens = Some(5);
        assert_eq!(
            super::build_request_body(&req, EncryptedReasoning::On)["max_output_tokens"],
            MIN_OUTPUT_TOKENS
        );
    }
}
