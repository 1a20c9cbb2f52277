//! The wire adapters writing one request: each adapter's `request_body` (the bytes it posts)
//! for a conversation of 41 messages — a system prompt, a user question, 19 rounds of an
//! assistant message with one tool call and that call's result, and a final user message —
//! with 20 tools whose JSON schemas have a few properties each.
//!
//! The same request (the same `Arc` of tools) goes to the adapter on every iteration, as every
//! call of one run sends the same tool list: after the first, the tools' JSON comes from the
//! adapter's cache and only the messages are written. Each body is checked once to parse as JSON and to
//! hold the 20 tools before anything is measured.
//!
//! Group `request_body`, one case per adapter; criterion's throughput line is bytes of body
//! per second. Group `mock_reads_request`: what `keel mock-provider` does with each of those
//! bodies before it answers (parse it, check it against its API's rules), the mock's share of
//! every call in `keel bench --http`, where it runs on the same cores as keel.
//!
//! `cargo bench -p keel-providers --bench request_body -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use keel_core::{ChatRequest, Message, ToolCall, ToolChoice, ToolSpec};
use keel_providers::openai_responses::EncryptedReasoning;
use keel_providers::{Anthropic, AnthropicConfig, OpenAiChat, OpenAiConfig, OpenAiResponses};
use serde_json::{Value, json};

/// Tools offered with the request.
const TOOLS: usize = 20;
/// Rounds of assistant call + tool result between the first and the last user message.
const ROUNDS: usize = 19;

/// A tool whose schema has a few typed, described properties, one of them an enum.
fn tool(i: usize) -> ToolSpec {
    ToolSpec::new(
        format!("tool_{i:02}"),
        format!("Does task {i}: reads the named file or directory and reports what it finds."),
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File or directory, relative to the workspace."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 2000, "description": "Most lines to return."},
                "recursive": {"type": "boolean", "description": "Descend into subdirectories."},
                "mode": {"type": "string", "enum": ["text", "bytes", "summary"]},
            },
            "required": ["path"],
            "additionalProperties": false,
        }),
    )
}

/// A tool result of ~600 bytes: source lines with quotes, tabs and a little non-ASCII.
fn tool_output(round: usize) -> String {
    (0..12)
        .map(|line| {
            format!(
                "{round:>3}:{line:<3}\tlet value = config.get(\"key_{line}\").unwrap_or(\"naïve → default\");\n"
            )
        })
        .collect()
}

fn conversation() -> ChatRequest {
    let mut messages = vec![
        Message::system(
            "You are a careful coding agent. Read before you write, keep changes small, and say \
             what you changed and why.",
        ),
        Message::user("Find where the config loader handles a missing file and fix its error."),
    ];
    for round in 0..ROUNDS {
        let id = format!("call_{round:02}_sKC7OABqf2A2PTLCm0CLeRWV");
        let arguments = json!({"path": format!("src/config/part_{round}.rs"), "limit": 200});
        messages.push(Message::assistant_with_calls(
            format!("Reading part {round} of the loader."),
            vec![ToolCall {
                id: id.clone(),
                name: format!("tool_{:02}", round % TOOLS),
                arguments: arguments.to_string(),
            }],
        ));
        messages.push(Message::tool_result(id, tool_output(round)));
    }
    messages.push(Message::user("Good. Now write the fix."));
    let tools: Arc<[ToolSpec]> = (0..TOOLS).map(tool).collect();
    ChatRequest {
        model: "gpt-4o-2024-08-06".into(),
        messages: messages.into_iter().map(std::sync::Arc::new).collect(),
        tools,
        tool_choice: ToolChoice::Auto,
        max_tokens: Some(4096),
        temperature: Some(0.2),
        stream: true,
    }
}

/// The body parses as JSON and holds every tool.
fn check(name: &str, body: &[u8]) {
    let value: Value = serde_json::from_slice(body).expect("the body is JSON");
    let tools = value["tools"].as_array().map_or(0, Vec::len);
    assert_eq!(tools, TOOLS, "{name}: tools in the body");
}

fn bench(c: &mut Criterion) {
    let request = conversation();
    // Never contacted: the adapters only write bodies here.
    let chat = OpenAiChat::new(OpenAiConfig::new("http://127.0.0.1:9/v1")).expect("chat");
    let anthropic = Anthropic::new(AnthropicConfig::new("http://127.0.0.1:9")).expect("anth");
    let responses =
        OpenAiResponses::new(OpenAiConfig::new("http://127.0.0.1:9/v1")).expect("responses");
    type Write<'a> = Box<dyn Fn(&ChatRequest) -> Vec<u8> + 'a>;
    let cases: [(&str, Write); 3] = [
        ("openai_chat", Box::new(|r| chat.request_body(r))),
        ("anthropic", Box::new(|r| anthropic.request_body(r))),
        (
            "openai_responses",
            Box::new(|r| responses.request_body(r, EncryptedReasoning::On)),
        ),
    ];
    let mut group = c.benchmark_group("request_body");
    for (name, write) in &cases {
        let body = write(&request);
        check(name, &body);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(BenchmarkId::new(*name, "41_messages_20_tools"), |b| {
            b.iter(|| write(black_box(&request)))
        });
    }
    group.finish();

    type Check = fn(&Value) -> Result<(), String>;
    let checks: [Check; 3] = [
        keel_mock::validate::chat_completions,
        keel_mock::validate::messages,
        keel_mock::validate::responses,
    ];
    let mut group = c.benchmark_group("mock_reads_request");
    for ((name, write), check) in cases.iter().zip(checks) {
        let body = write(&request);
        let read = |body: &[u8]| check(&serde_json::from_slice(body).expect("the body is JSON"));
        read(&body).unwrap_or_else(|e| panic!("{name}: the mock refuses the body: {e}"));
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(BenchmarkId::new(*name, "41_messages_20_tools"), |b| {
            b.iter(|| read(black_box(&body)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
