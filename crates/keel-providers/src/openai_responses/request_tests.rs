use keel_core::{InternalReason, Reasoning, ToolCall};
use serde_json::json;

use super::*;

fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest {
        model: "o4-mini".into(),
        messages: messages.into_iter().map(std::sync::Arc::new).collect(),
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
