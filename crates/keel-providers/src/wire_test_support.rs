//! Requests with hostile text for the adapters' wire tests: quotes, backslashes, line breaks,
//! U+2028/U+2029, NUL and other control characters, emoji, and tool arguments that are broken
//! or unusual JSON. Each adapter's `request_reference` tests check that its wire body reads back
//! as the JSON tree the adapter used to build.

use std::sync::Arc;

use keel_core::{ChatRequest, Message, Reasoning, ToolCall, ToolChoice, ToolSpec};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Text that is hard to escape.
pub(crate) const HOSTILE_TEXTS: &[&str] = &[
    "",
    " ",
    "  \n\t",
    "plain",
    "quote \" and backslash \\ and slash /",
    "line\nbreak\r\nand tab\t",
    "separators \u{2028} and \u{2029}",
    "nul \0 bell \u{7} escape \u{1b} del \u{7f}",
    "emoji 🦀🧪 and 日本語 and e\u{301}",
    "{\"looks\": \"like json\"}",
    "</script><!-- ]]> '\" `",
    "trailing space \n ",
];

/// Tool arguments as a model may write them.
pub(crate) const HOSTILE_ARGUMENTS: &[&str] = &[
    r#"{"path":"a"}"#,
    "",
    "{not json",
    r#"{"a":"#,
    "[1, 2]",
    "null",
    r#""just a string""#,
    "  {\"padded\": true}\n",
    r#"{"a":1,"a":2}"#,
    r#"{"big": 18446744073709551616, "neg": -9223372036854775809, "f": 1.0e2}"#,
    r#"{"huge": 1e400}"#,
    r#"{"esc": "\u0000\u2028\ud83e\udd80\"\\\/"}"#,
    "{\"raw\": \"line\u{2028}sep\"}",
    r#"{"nested": {"deep": [[[{"x": null}]]]}}"#,
    r#"{"trailing": 1} extra"#,
];

/// Tool-call ids, some only another provider would mint.
pub(crate) const HOSTILE_IDS: &[&str] = &["call_1", "functions.read:0", "id \"q\" 🦀", "", "a-b_c"];

/// A tool whose name, description and schema carry hostile text.
pub(crate) fn hostile_tool(i: usize) -> ToolSpec {
    let text = HOSTILE_TEXTS[i % HOSTILE_TEXTS.len()];
    ToolSpec::new(
        format!("tool_{i}"),
        text,
        json!({
            "type": "object",
            "properties": {
                text: {"type": "string", "description": text},
                "n": {"type": "number", "default": 0.1, "maximum": 1e300},
            },
        }),
    )
}

/// Stored reasoning of either adapter that replays it (thinking blocks and reasoning items,
/// signed or not), with hostile text.
pub(crate) fn hostile_replay(text: &str) -> Reasoning {
    Reasoning {
        text: text.into(),
        replay: Some(json!([
            {"type": "thinking", "thinking": text, "signature": "sig\u{2028}=="},
            {"type": "thinking", "thinking": text, "signature": ""},
            {"type": "redacted_thinking", "data": text},
            {"type": "reasoning", "id": "rs_1", "encrypted_content": text, "summary": []},
            {"type": "reasoning", "id": "rs_2", "encrypted_content": "gAAA\"\0"},
        ])),
    }
}

fn request(messages: Vec<Message>, tools: Arc<[ToolSpec]>) -> ChatRequest {
    ChatRequest {
        model: "model \"x\"\u{2028}".into(),
        messages: messages.into_iter().map(std::sync::Arc::new).collect(),
        tools,
        tool_choice: ToolChoice::Auto,
        max_tokens: None,
        temperature: None,
        stream: false,
    }
}

/// A set of requests covering every message kind, hostile text in every field, every tool
/// choice, limits, temperatures (also non-finite) and streaming.
pub(crate) fn hostile_requests() -> Vec<ChatRequest> {
    let tools: Arc<[ToolSpec]> = (0..4).map(hostile_tool).collect();
    let mut requests = Vec::new();
    for (i, text) in HOSTILE_TEXTS.iter().enumerate() {
        let calls: Vec<ToolCall> = HOSTILE_ARGUMENTS
            .iter()
            .enumerate()
            .map(|(n, arguments)| ToolCall {
                id: format!("{}{n}", HOSTILE_IDS[(i + n) % HOSTILE_IDS.len()]),
                name: format!("tool_{}", n % 4),
                arguments: (*arguments).into(),
            })
            .collect();
        let mut thinking = Message::assistant_with_calls(*text, calls.clone());
        thinking.reasoning = Some(hostile_replay(text));
        let mut messages = vec![Message::system(*text), Message::user(*text), thinking];
        messages.extend(
            calls
                .iter()
                .map(|call| Message::tool_result(call.id.clone(), *text)),
        );
        messages.push(Message::assistant(*text));
        messages.push(Message::user(format!("{text} again")));
        let mut last = Message::assistant(format!("prefill {text}"));
        last.reasoning = Some(hostile_replay(text));
        messages.push(last);
        let mut req = request(messages, Arc::clone(&tools));
        req.tool_choice = match i % 5 {
            0 => ToolChoice::Auto,
            1 => ToolChoice::None,
            2 => ToolChoice::Required,
            3 => ToolChoice::Tool("tool_1".into()),
            _ => ToolChoice::Tool(format!("missing {text}")),
        };
        req.max_tokens = [None, Some(0), Some(7), Some(u32::MAX)][i % 4];
        req.temperature = [
            None,
            Some(0.2),
            Some(f32::NAN),
            Some(f32::INFINITY),
            Some(1.0),
        ][i % 5];
        req.stream = i % 2 == 0;
        if i % 3 == 0 {
            req.tools = Vec::new().into();
        }
        requests.push(req);
    }
    // Edge shapes: nothing at all, only a system prompt, a tool result without an id.
    requests.push(request(Vec::new(), Arc::clone(&tools)));
    requests.push(request(vec![Message::system("sys")], Vec::new().into()));
    let mut orphan = Message::tool_result("x", "out");
    orphan.tool_call_id = None;
    requests.push(request(vec![Message::user("u"), orphan], tools));
    requests
}

/// A random message built from the hostile texts, arguments and ids.
fn message() -> impl Strategy<Value = Message> {
    let text = prop::sample::select(HOSTILE_TEXTS);
    let id = prop::sample::select(HOSTILE_IDS);
    let arguments = prop::sample::select(HOSTILE_ARGUMENTS);
    let call = (id.clone(), arguments).prop_map(|(id, arguments)| ToolCall {
        id: id.into(),
        name: "tool_0".into(),
        arguments: arguments.into(),
    });
    prop_oneof![
        text.clone().prop_map(Message::system),
        text.clone().prop_map(Message::user),
        (
            text.clone(),
            prop::collection::vec(call, 0..3),
            any::<bool>()
        )
            .prop_map(|(text, calls, replay)| {
                let mut message = Message::assistant_with_calls(text, calls);
                if replay {
                    message.reasoning = Some(hostile_replay(text));
                }
                message
            }),
        (id, text).prop_map(|(id, text)| Message::tool_result(id, text)),
    ]
}

/// Random requests: histories of hostile messages, with or without tools, any choice.
pub(crate) fn arbitrary_request() -> impl Strategy<Value = ChatRequest> {
    let choice = prop_oneof![
        Just(ToolChoice::Auto),
        Just(ToolChoice::None),
        Just(ToolChoice::Required),
        Just(ToolChoice::Tool("tool_0".into())),
        Just(ToolChoice::Tool("other".into())),
    ];
    (
        prop::collection::vec(message(), 0..12),
        0..3usize,
        choice,
        prop::option::of(any::<u32>()),
        any::<bool>(),
    )
        .prop_map(|(messages, tools, tool_choice, max_tokens, stream)| {
            let mut req = request(messages, (0..tools).map(hostile_tool).collect());
            req.tool_choice = tool_choice;
            req.max_tokens = max_tokens;
            req.stream = stream;
            req
        })
}

/// `bytes` as a JSON tree, failing the test with the text when it is not JSON.
pub(crate) fn parse(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(bytes)))
}
