use keel_core::InternalReason;
use serde_json::json;

use super::*;

const NO_CACHE: BodyOptions = BodyOptions {
    default_max_tokens: 4096,
    prompt_caching: false,
};
const CACHE: BodyOptions = BodyOptions {
    default_max_tokens: 4096,
    prompt_caching: true,
};

fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest {
        model: "claude-test".into(),
        messages: messages.into_iter().map(std::sync::Arc::new).collect(),
        tools: Vec::new().into(),
        tool_choice: ToolChoice::Auto,
        max_tokens: None,
        temperature: None,
        stream: false,
    }
}

fn messages_of(messages: Vec<Message>) -> Value {
    build_request_body(&request(messages), NO_CACHE)["messages"].clone()
}

fn call(id: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "read_file".into(),
        arguments: arguments.into(),
    }
}

fn echo_tool(name: &str) -> ToolSpec {
    ToolSpec::new(name, "Echoes", json!({"type": "object"}))
}

fn text(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn count_cache_marks(value: &Value) -> usize {
    match value {
        Value::Object(map) => {
            usize::from(map.contains_key("cache_control"))
                + map.values().map(count_cache_marks).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(count_cache_marks).sum(),
        _ => 0,
    }
}

#[test]
fn every_system_message_joins_the_system_field() {
    let body = build_request_body(
        &request(vec![
            Message::system("Be brief."),
            Message::user("hi"),
            Message::system("  "),
            Message::assistant("hello"),
            Message::system("Answer in French."),
        ]),
        NO_CACHE,
    );
    assert_eq!(
        body["system"],
        json!([text("Be brief."), text("Answer in French.")])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [text("hi")]},
            {"role": "assistant", "content": [text("hello")]},
        ])
    );
    let without = build_request_body(&request(vec![Message::user("hi")]), NO_CACHE);
    assert!(without.get("system").is_none(), "{without}");
}

#[test]
fn defaults_model_max_tokens_and_stream() {
    let mut req = request(vec![Message::user("hi")]);
    let body = build_request_body(&req, NO_CACHE);
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["max_tokens"], 4096);
    assert!(body.get("stream").is_none());
    assert!(body.get("tools").is_none());
    assert!(
        body.get("temperature").is_none(),
        "the provider's default unless set"
    );
    req.max_tokens = Some(50);
    req.temperature = Some(0.2);
    req.stream = true;
    let body = build_request_body(&req, NO_CACHE);
    assert_eq!(body["max_tokens"], 50);
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["stream"], true);
}

#[test]
fn tool_calls_follow_the_text_and_bad_arguments_become_an_empty_object() {
    let messages = messages_of(vec![
        Message::user("read both"),
        Message::assistant_with_calls(
            "Reading.",
            vec![
                call("toolu_1", r#"{"path":"a"}"#),
                call("toolu_2", "{not json"),
                call("toolu_3", "[1, 2]"),
                call("toolu_4", ""),
            ],
        ),
    ]);
    assert_eq!(
        messages[1]["content"],
        json!([
            text("Reading."),
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}},
            {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {}},
            {"type": "tool_use", "id": "toolu_3", "name": "read_file", "input": {}},
            {"type": "tool_use", "id": "toolu_4", "name": "read_file", "input": {}},
        ])
    );
}

#[test]
fn empty_text_blocks_are_never_sent() {
    let messages = messages_of(vec![
        Message::user("go"),
        Message::assistant_with_calls("  \n", vec![call("toolu_1", "{}")]),
        Message::tool_result("toolu_1", ""),
    ]);
    assert_eq!(
        messages,
        json!([
            {"role": "user", "content": [text("go")]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}},
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
        ])
    );
}

#[test]
fn tool_results_merge_into_one_user_turn_with_the_following_user_text() {
    let messages = messages_of(vec![
        Message::user("read both"),
        Message::assistant_with_calls("", vec![call("a", "{}"), call("b", "{}")]),
        Message::tool_result("a", "one"),
        Message::tool_result("b", "two"),
        Message::internal_user("Continue.", InternalReason::LoopNudge),
    ]);
    assert_eq!(
        messages[2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "one"},
            {"type": "tool_result", "tool_use_id": "b", "content": "two"},
            text("Continue."),
        ]})
    );
    assert_eq!(messages.as_array().unwrap().len(), 3);
}

#[test]
fn tool_results_always_lead_their_user_turn() {
    // A user message that slipped in between a call and its result must not put text before
    // the tool_result block: the API rejects that.
    let messages = messages_of(vec![
        Message::user("read"),
        Message::assistant_with_calls("", vec![call("a", "{}")]),
        Message::user("also, hurry"),
        Message::tool_result("a", "one"),
    ]);
    assert_eq!(
        messages[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "a", "content": "one"},
            text("also, hurry"),
        ])
    );
}

#[test]
fn roles_alternate_and_the_first_turn_is_user() {
    let messages = messages_of(vec![
        Message::system("sys"),
        Message::assistant("I was here first."),
        Message::assistant("And again."),
        Message::user("one"),
        Message::user("two"),
        Message::assistant(""),
        Message::user("three"),
    ]);
    assert_eq!(
        messages,
        json!([
            {"role": "user", "content": [text(PLACEHOLDER_USER_TEXT)]},
            {"role": "assistant", "content": [text("I was here first."), text("And again.")]},
            {"role": "user", "content": [text("one"), text("two"), text("three")]},
        ])
    );
}

#[test]
fn a_user_turn_is_never_empty() {
    let messages = messages_of(vec![
        Message::user("hi"),
        Message::assistant("yes?"),
        Message::user(" "),
    ]);
    assert_eq!(
        messages[2],
        json!({"role": "user", "content": [text(PLACEHOLDER_USER_TEXT)]})
    );
    // Only system messages: the API still needs one user turn.
    let messages = messages_of(vec![Message::system("sys")]);
    assert_eq!(
        messages,
        json!([{"role": "user", "content": [text(PLACEHOLDER_USER_TEXT)]}])
    );
}

#[test]
fn a_final_assistant_turn_loses_its_trailing_whitespace() {
    let messages = messages_of(vec![Message::user("hi"), Message::assistant("Sure: \n")]);
    assert_eq!(messages[1]["content"], json!([text("Sure:")]));
    let messages = messages_of(vec![
        Message::user("hi"),
        Message::assistant("Sure: \n"),
        Message::user("go on"),
    ]);
    assert_eq!(messages[1]["content"], json!([text("Sure: \n")]));
}

#[test]
fn stored_thinking_blocks_are_replayed_first_and_verbatim() {
    let thinking = json!({"type": "thinking", "thinking": "Let me see.", "signature": "sig=="});
    let redacted = json!({"type": "redacted_thinking", "data": "opaque"});
    let mut answer = Message::assistant_with_calls("Looking.", vec![call("t1", "{}")]);
    answer.reasoning = Some(Reasoning {
        text: "Let me see.".into(),
        replay: Some(json!([
            thinking,
            redacted,
            // Not blocks this adapter stores: left out.
            {"type": "thinking", "thinking": "unsigned", "signature": ""},
            {"type": "reasoning", "encrypted_content": "from another provider"},
        ])),
    });
    let messages = messages_of(vec![
        Message::user("q"),
        answer,
        Message::tool_result("t1", "done"),
    ]);
    assert_eq!(
        messages[1]["content"],
        json!([
            thinking,
            redacted,
            text("Looking."),
            {"type": "tool_use", "id": "t1", "name": "read_file", "input": {}},
        ])
    );
}

#[test]
fn thinking_is_never_sent_alone_or_in_a_final_assistant_turn() {
    let with_thinking = |content: &str| {
        let mut message = Message::assistant(content);
        message.reasoning = Some(Reasoning {
            text: "hm".into(),
            replay: Some(json!([{"type": "thinking", "thinking": "hm", "signature": "s"}])),
        });
        message
    };
    // Cut off while thinking: nothing else to send, so the message is left out.
    let messages = messages_of(vec![
        Message::user("q"),
        with_thinking(""),
        Message::user("go on"),
    ]);
    assert_eq!(
        messages,
        json!([{"role": "user", "content": [text("q"), text("go on")]}])
    );
    // A final (prefilled) assistant turn keeps its text only.
    let messages = messages_of(vec![Message::user("q"), with_thinking("The answer is")]);
    assert_eq!(messages[1]["content"], json!([text("The answer is")]));
}

#[test]
fn reasoning_without_replay_is_not_sent() {
    let mut answer = Message::assistant("42");
    answer.reasoning = Some(Reasoning {
        text: "thought hard".into(),
        replay: None,
    });
    let messages = messages_of(vec![Message::user("q"), answer]);
    assert_eq!(messages[1]["content"], json!([text("42")]));
}

#[test]
fn foreign_tool_call_ids_are_made_acceptable() {
    let messages = messages_of(vec![
        Message::user("q"),
        Message::assistant_with_calls("", vec![call("functions.read:0", "{}")]),
        Message::tool_result("functions.read:0", "ok"),
    ]);
    assert_eq!(messages[1]["content"][0]["id"], "functions_read_0");
    assert_eq!(messages[2]["content"][0]["tool_use_id"], "functions_read_0");
}

#[test]
fn tools_and_tool_choice_map_per_variant() {
    let cases = [
        (ToolChoice::Auto, None),
        (ToolChoice::None, Some(json!({"type": "none"}))),
        (ToolChoice::Required, Some(json!({"type": "any"}))),
        (
            ToolChoice::Tool("echo".into()),
            Some(json!({"type": "tool", "name": "echo"})),
        ),
    ];
    for (choice, wire) in cases {
        let mut req = request(vec![Message::user("hi")]);
        req.tools = vec![echo_tool("echo")].into();
        req.tool_choice = choice.clone();
        let body = build_request_body(&req, NO_CACHE);
        assert_eq!(body.get("tool_choice"), wire.as_ref(), "{choice:?}");
        assert_eq!(
            body["tools"],
            json!([{"name": "echo", "description": "Echoes", "input_schema": {"type": "object"}}])
        );
        // Without tools there is no tool_choice either.
        req.tools = Vec::new().into();
        let body = build_request_body(&req, NO_CACHE);
        assert!(body.get("tool_choice").is_none(), "{choice:?}: {body}");
        assert!(body.get("tools").is_none());
    }
}

#[test]
fn cache_breakpoints_mark_system_tools_and_the_last_two_user_turns() {
    let mut req = request(vec![
        Message::system("one"),
        Message::system("two"),
        Message::user("first"),
        Message::assistant("a"),
        Message::user("second"),
        Message::assistant_with_calls("", vec![call("t1", "{}")]),
        Message::tool_result("t1", "result"),
        Message::user("third"),
    ]);
    req.tools = vec![echo_tool("x"), echo_tool("y")].into();
    let body = build_request_body(&req, CACHE);
    let mark = json!({"type": "ephemeral"});
    assert!(body["system"][0].get("cache_control").is_none());
    assert_eq!(body["system"][1]["cache_control"], mark);
    assert!(body["tools"][0].get("cache_control").is_none());
    assert_eq!(body["tools"][1]["cache_control"], mark);
    let messages = &body["messages"];
    assert!(messages[0]["content"][0].get("cache_control").is_none());
    assert_eq!(messages[2]["content"][0]["cache_control"], mark);
    // The last user turn is [tool_result, "third"]: the mark goes on its last block.
    assert!(messages[4]["content"][0].get("cache_control").is_none());
    assert_eq!(messages[4]["content"][1]["cache_control"], mark);
    assert_eq!(count_cache_marks(&body), MAX_CACHE_BREAKPOINTS);

    let body = build_request_body(&req, NO_CACHE);
    assert_eq!(count_cache_marks(&body), 0, "{body}");
}

#[test]
fn cache_breakpoints_never_exceed_the_limit() {
    for turns in 0..6 {
        for systems in 0..3 {
            for tools in 0..3 {
                let mut messages: Vec<Message> = (0..systems)
                    .map(|i| Message::system(format!("s{i}")))
                    .collect();
                for i in 0..turns {
                    messages.push(Message::user(format!("u{i}")));
                    messages.push(Message::assistant(format!("a{i}")));
                }
                let mut req = request(messages);
                req.tools = (0..tools).map(|i| echo_tool(&format!("t{i}"))).collect();
                let body = build_request_body(&req, CACHE);
                let expected =
                    usize::from(systems > 0) + usize::from(tools > 0) + turns.clamp(1, 2);
                assert_eq!(count_cache_marks(&body), expected, "{body}");
                assert!(expected <= MAX_CACHE_BREAKPOINTS);
            }
        }
    }
}
