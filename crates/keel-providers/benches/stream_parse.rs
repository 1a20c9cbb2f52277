//! The wire adapters reading a long streamed answer: each adapter's public `parse_stream` (SSE
//! decoding, JSON parsing of every event, accumulating the `ChatResponse`, a delta to the sink
//! for every piece) over one answer of ~2,000 text deltas (~8 KB of text) followed by one tool
//! call whose arguments (~1.5 KB) arrive in 50 fragments.
//!
//! The bodies are built here in each API's wire format, with the fields the real servers send
//! (ids, `obfuscation`, `sequence_number`, Anthropic's `ping`, the Responses API's whole-text
//! `.done` events and `response.completed`), and handed to the adapter as a byte stream in
//! chunks of 1–4 KB cut at arbitrary byte positions (through UTF-8 characters too), as a
//! socket delivers them. No network, no runtime: the streams are ready, so the measurement is
//! the adapter's own work. The sink drops every delta. Each body is checked once to parse to
//! the expected text and tool call before anything is measured.
//!
//! Group `stream_parse`, two cases per adapter; criterion's throughput line is bytes of SSE
//! body per second:
//!
//! - `<adapter>/chunks_1-4KB`: the body in chunks as above, what a remote server's stream
//!   looks like;
//! - `<adapter>/one_chunk`: the whole body in one chunk, as a fast local server (or a reader
//!   that fell behind) hands it over. The SSE decoder copies the rest of its buffer after
//!   every line, so this costs far more than the same bytes in small chunks.
//!
//! `cargo bench -p keel-providers --bench stream_parse -- --warm-up-time 1 --measurement-time 2`

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures::executor::block_on;
use keel_core::{
    ChatResponse, DeltaSink, NoDeltas, ProviderError, StopReason, StreamDelta, ToolCall,
};
use keel_providers::{anthropic, openai_chat, openai_responses};
use serde_json::json;

/// Text deltas in the answer.
const TEXT_DELTAS: usize = 2_000;
/// Fragments the tool call's arguments arrive in.
const ARGUMENT_FRAGMENTS: usize = 50;
/// Bounds of the chunks the body is delivered in, in bytes.
const CHUNK_BYTES: (usize, usize) = (1_024, 4_096);

const MODEL: &str = "gpt-4o-2024-08-06";
const CALL_ID: &str = "call_sKC7OABqf2A2PTLCm0CLeRWV";
const TOOL: &str = "write_file";

/// Words the answer is drawn from: prose, code, markdown, quotes and a little non-ASCII, so
/// the JSON has escapes to undo and the chunks cut through multi-byte characters.
const VOCABULARY: &str = "\
the config loader returns an error when file is missing and retry policy backoff seconds \
src/main.rs crates/keel-core/src/run/mod.rs `parse_args()` Result<Config, Error> **note** \
timeout = 30 request failed with status 503 \"Service Unavailable\" user_id session 0x7f3a \
tokens window compaction summary let mut count += 1; assert_eq! warning: unused variable \
line 42 column 17 database migration applied 2024-05-17T10:32:11Z INFO DEBUG handler \
über naïve résumé → because however which means that we should check whether test passes \
SELECT * FROM messages WHERE seq > ? ORDER BY LIMIT 100 Ωmega 日本語 - 1. 2. \\ C:\\temp";

/// A small deterministic generator (xorshift), so every run builds the same bodies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }
}

/// What the stream carries: the text in its deltas, and the one tool call.
struct Answer {
    deltas: Vec<String>,
    arguments: Vec<String>,
}

impl Answer {
    /// ~`TEXT_DELTAS` token-sized pieces of text (a word with its leading space, long words
    /// cut in pieces of up to 5 characters, now and then a paragraph break) and arguments of
    /// ~1.5 KB cut in `ARGUMENT_FRAGMENTS` pieces at character boundaries.
    fn new() -> Answer {
        let words: Vec<&str> = VOCABULARY.split_whitespace().collect();
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let mut deltas = Vec::with_capacity(TEXT_DELTAS);
        while deltas.len() < TEXT_DELTAS {
            if rng.below(40) == 0 {
                deltas.push("\n\n".to_string());
                continue;
            }
            let chars: Vec<char> = words[rng.below(words.len())].chars().collect();
            let mut first = true;
            for piece in chars.chunks(5) {
                let mut delta = String::new();
                if first {
                    delta.push(' ');
                    first = false;
                }
                delta.extend(piece);
                deltas.push(delta);
            }
        }
        deltas.truncate(TEXT_DELTAS);

        let mut body = String::new();
        while body.len() < 1_400 {
            body.push_str(words[rng.below(words.len())]);
            body.push(if rng.below(10) == 0 { '\n' } else { ' ' });
        }
        let arguments = json!({"path": "docs/report.md", "content": body}).to_string();
        let chars: Vec<char> = arguments.chars().collect();
        let cut = |i: usize| i * chars.len() / ARGUMENT_FRAGMENTS;
        let arguments: Vec<String> = (0..ARGUMENT_FRAGMENTS)
            .map(|i| chars[cut(i)..cut(i + 1)].iter().collect())
            .collect();
        Answer { deltas, arguments }
    }

    fn text(&self) -> String {
        self.deltas.concat()
    }

    fn arguments(&self) -> String {
        self.arguments.concat()
    }
}

/// A JSON string literal.
fn quoted(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// A chat-completions stream: `data:` lines of `chat.completion.chunk`, as api.openai.com
/// sends them (one piece per chunk, `usage` in a last chunk of its own), ending in `[DONE]`.
fn openai_chat_body(answer: &Answer) -> String {
    let head = format!(
        r#"{{"id":"chatcmpl-Dx0XpqH8w09uBXwq1zFGYdETjtnEl","object":"chat.completion.chunk","created":1782955817,"model":"{MODEL}","service_tier":"default","system_fingerprint":"fp_d0469e1700","choices":"#
    );
    let chunk = |choices: String, obfuscation: &str| {
        format!("data: {head}{choices},\"usage\":null,\"obfuscation\":\"{obfuscation}\"}}\n\n")
    };
    let choice = |delta: String, finish: &str| {
        format!(r#"[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]"#)
    };
    let mut body = chunk(
        choice(
            r#"{"role":"assistant","content":"","refusal":null}"#.into(),
            "null",
        ),
        "nYdSaPIbhl6FsC",
    );
    for delta in &answer.deltas {
        let delta = format!(r#"{{"content":{}}}"#, quoted(delta));
        body.push_str(&chunk(choice(delta, "null"), "I7vgPNTGnEaEu"));
    }
    let start = format!(
        r#"{{"tool_calls":[{{"index":0,"id":"{CALL_ID}","type":"function","function":{{"name":"{TOOL}","arguments":""}}}}]}}"#
    );
    body.push_str(&chunk(choice(start, "null"), "C63r"));
    for fragment in &answer.arguments {
        let delta = format!(
            r#"{{"tool_calls":[{{"index":0,"function":{{"arguments":{}}}}}]}}"#,
            quoted(fragment)
        );
        body.push_str(&chunk(choice(delta, "null"), "qfQVOwfh62oUst"));
    }
    body.push_str(&chunk(
        choice("{}".into(), "\"tool_calls\""),
        "VskHzNI7KMRUodI",
    ));
    body.push_str(&format!(
        "data: {head}[],\"usage\":{{\"prompt_tokens\":1053,\"completion_tokens\":2415,\"total_tokens\":3468,\"prompt_tokens_details\":{{\"cached_tokens\":0,\"audio_tokens\":0}},\"completion_tokens_details\":{{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}},\"obfuscation\":\"khVgg3RsaN\"}}\n\n"
    ));
    body.push_str("data: [DONE]\n\n");
    body
}

/// A Messages stream: named events, a text block, a `tool_use` block of `input_json_delta`s,
/// `message_delta` and `message_stop`, with a `ping` now and then.
fn anthropic_body(answer: &Answer) -> String {
    let mut body = String::new();
    let mut event = |name: &str, data: String| {
        body.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    event(
        "message_start",
        r#"{"type":"message_start","message":{"model":"claude-sonnet-4-20250514","id":"msg_013zKrzHmx2EAPhcF2gQKQ4k","type":"message","role":"assistant","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1053,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard"}}}"#.into(),
    );
    event(
        "content_block_start",
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#
            .into(),
    );
    for (i, delta) in answer.deltas.iter().enumerate() {
        event(
            "content_block_delta",
            format!(
                r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{}}}}}"#,
                quoted(delta)
            ),
        );
        if i % 500 == 250 {
            event("ping", r#"{"type": "ping"}"#.into());
        }
    }
    event(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#.into(),
    );
    event(
        "content_block_start",
        format!(
            r#"{{"type":"content_block_start","index":1,"content_block":{{"type":"tool_use","id":"{CALL_ID}","name":"{TOOL}","input":{{}}}}}}"#
        ),
    );
    for fragment in std::iter::once("").chain(answer.arguments.iter().map(String::as_str)) {
        event(
            "content_block_delta",
            format!(
                r#"{{"type":"content_block_delta","index":1,"delta":{{"type":"input_json_delta","partial_json":{}}}}}"#,
                quoted(fragment)
            ),
        );
    }
    event(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":1}"#.into(),
    );
    event(
        "message_delta",
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":1053,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2415}}"#.into(),
    );
    event("message_stop", r#"{"type":"message_stop"}"#.into());
    body
}

/// A Responses API stream: typed events with sequence numbers, the message item's text in
/// `response.output_text.delta`s and again whole in its `.done` events, the function call's
/// arguments likewise, and `response.completed` carrying the whole output once more.
fn openai_responses_body(answer: &Answer) -> String {
    const RESPONSE_ID: &str = "resp_0360bd45725b0a010068f966a4c4a881959717ba17b93477ef";
    const MESSAGE_ID: &str = "msg_0360bd45725b0a010068f966a601b081958e95c4085b086532";
    const CALL_ITEM_ID: &str = "fc_0c3b09d20eedf2d30068f966bad8b88190af96d232f504ef1f";
    let text = answer.text();
    let arguments = answer.arguments();
    let message_item = |status: &str, content: &str| {
        format!(
            r#"{{"id":"{MESSAGE_ID}","type":"message","status":"{status}","content":{content},"role":"assistant"}}"#
        )
    };
    let text_part = format!(
        r#"{{"type":"output_text","annotations":[],"logprobs":[],"text":{}}}"#,
        quoted(&text)
    );
    let done_message = message_item("completed", &format!("[{text_part}]"));
    let call_item = |status: &str, arguments: &str| {
        format!(
            r#"{{"id":"{CALL_ITEM_ID}","type":"function_call","status":"{status}","arguments":{},"call_id":"{CALL_ID}","name":"{TOOL}"}}"#,
            quoted(arguments)
        )
    };
    let done_call = call_item("completed", &arguments);
    let response = |status: &str, output: &str, usage: &str| {
        format!(
            r#"{{"id":"{RESPONSE_ID}","object":"response","created_at":1761175204,"status":"{status}","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"max_tool_calls":null,"model":"{MODEL}","output":{output},"parallel_tool_calls":true,"previous_response_id":null,"prompt_cache_key":null,"reasoning":{{"effort":null,"summary":null}},"safety_identifier":null,"service_tier":"default","store":true,"temperature":1.0,"text":{{"format":{{"type":"text"}},"verbosity":"medium"}},"tool_choice":"auto","tools":[{{"type":"function","description":"Writes a UTF-8 text file.","name":"{TOOL}","parameters":{{"type":"object","properties":{{"path":{{"type":"string"}},"content":{{"type":"string"}}}},"required":["path","content"]}},"strict":false}}],"top_logprobs":0,"top_p":1.0,"truncation":"disabled","usage":{usage},"user":null,"metadata":{{}}}}"#
        )
    };

    let mut body = String::new();
    let mut sequence = 0;
    let mut event = |kind: &str, fields: String| {
        body.push_str(&format!(
            "event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{sequence},{fields}}}\n\n"
        ));
        sequence += 1;
    };
    let in_progress = response("in_progress", "[]", "null");
    event("response.created", format!(r#""response":{in_progress}"#));
    event(
        "response.in_progress",
        format!(r#""response":{in_progress}"#),
    );
    event(
        "response.output_item.added",
        format!(
            r#""output_index":0,"item":{}"#,
            message_item("in_progress", "[]")
        ),
    );
    event(
        "response.content_part.added",
        format!(
            r#""item_id":"{MESSAGE_ID}","output_index":0,"content_index":0,"part":{{"type":"output_text","annotations":[],"logprobs":[],"text":""}}"#
        ),
    );
    for delta in &answer.deltas {
        event(
            "response.output_text.delta",
            format!(
                r#""item_id":"{MESSAGE_ID}","output_index":0,"content_index":0,"delta":{},"logprobs":[],"obfuscation":"2WtQmJ0dTisGL""#,
                quoted(delta)
            ),
        );
    }
    event(
        "response.output_text.done",
        format!(
            r#""item_id":"{MESSAGE_ID}","output_index":0,"content_index":0,"text":{},"logprobs":[]"#,
            quoted(&text)
        ),
    );
    event(
        "response.content_part.done",
        format!(
            r#""item_id":"{MESSAGE_ID}","output_index":0,"content_index":0,"part":{text_part}"#
        ),
    );
    event(
        "response.output_item.done",
        format!(r#""output_index":0,"item":{done_message}"#),
    );
    event(
        "response.output_item.added",
        format!(
            r#""output_index":1,"item":{}"#,
            call_item("in_progress", "")
        ),
    );
    for fragment in &answer.arguments {
        event(
            "response.function_call_arguments.delta",
            format!(
                r#""item_id":"{CALL_ITEM_ID}","output_index":1,"delta":{},"obfuscation":"eMWlO7RB6LZnWas""#,
                quoted(fragment)
            ),
        );
    }
    event(
        "response.function_call_arguments.done",
        format!(
            r#""item_id":"{CALL_ITEM_ID}","output_index":1,"arguments":{}"#,
            quoted(&arguments)
        ),
    );
    event(
        "response.output_item.done",
        format!(r#""output_index":1,"item":{done_call}"#),
    );
    let completed = response(
        "completed",
        &format!("[{done_message},{done_call}]"),
        r#"{"input_tokens":1053,"input_tokens_details":{"cached_tokens":0},"output_tokens":2415,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":3468}"#,
    );
    event("response.completed", format!(r#""response":{completed}"#));
    body
}

/// `body` cut into chunks of `CHUNK_BYTES` at arbitrary byte positions.
fn chunked(body: &str, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed);
    let bytes = body.as_bytes();
    let mut chunks = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let end = (at + rng.between(CHUNK_BYTES.0, CHUNK_BYTES.1)).min(bytes.len());
        chunks.push(bytes[at..end].to_vec());
        at = end;
    }
    chunks
}

type Parse = fn(&[Vec<u8>], &dyn DeltaSink) -> Result<ChatResponse, ProviderError>;

/// The chunks as the byte stream an adapter reads.
fn stream(chunks: &[Vec<u8>]) -> impl futures::Stream<Item = Result<&[u8], Infallible>> {
    futures::stream::iter(chunks.iter().map(|chunk| Ok(chunk.as_slice())))
}

fn parse_openai_chat(
    chunks: &[Vec<u8>],
    sink: &dyn DeltaSink,
) -> Result<ChatResponse, ProviderError> {
    block_on(openai_chat::parse_stream(stream(chunks), sink))
}

fn parse_anthropic(
    chunks: &[Vec<u8>],
    sink: &dyn DeltaSink,
) -> Result<ChatResponse, ProviderError> {
    block_on(anthropic::parse_stream(stream(chunks), sink))
}

fn parse_openai_responses(
    chunks: &[Vec<u8>],
    sink: &dyn DeltaSink,
) -> Result<ChatResponse, ProviderError> {
    block_on(openai_responses::parse_stream(stream(chunks), sink))
}

/// Counts the deltas of the check run.
#[derive(Default)]
struct Counter {
    text: AtomicUsize,
    arguments: AtomicUsize,
}

impl DeltaSink for Counter {
    fn delta(&self, delta: &StreamDelta) {
        match delta {
            StreamDelta::Text { .. } => self.text.fetch_add(1, Ordering::Relaxed),
            StreamDelta::ToolCallArguments { .. } => self.arguments.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }
}

/// Asserts that the body parses to the answer it was built from.
fn check(name: &str, parse: Parse, chunks: &[Vec<u8>], answer: &Answer) {
    let sink = Counter::default();
    let response = parse(chunks, &sink).unwrap_or_else(|err| panic!("{name}: {err}"));
    assert_eq!(response.message.content, answer.text(), "{name}: text");
    assert_eq!(
        response.message.tool_calls,
        [ToolCall {
            id: CALL_ID.into(),
            name: TOOL.into(),
            arguments: answer.arguments(),
        }],
        "{name}: tool call"
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse, "{name}: stop");
    let text = sink.text.into_inner();
    let arguments = sink.arguments.into_inner();
    assert_eq!(text, TEXT_DELTAS, "{name}: text deltas");
    // chat-completions also forwards the empty `arguments` of the call's first chunk.
    assert!(
        (ARGUMENT_FRAGMENTS..=ARGUMENT_FRAGMENTS + 1).contains(&arguments),
        "{name}: {arguments} argument deltas"
    );
    let bytes: usize = chunks.iter().map(Vec::len).sum();
    eprintln!(
        "{name}: {bytes} bytes in {} chunks, {} bytes of text in {text} deltas, {} bytes of \
         arguments in {arguments} deltas",
        chunks.len(),
        response.message.content.len(),
        response.message.tool_calls[0].arguments.len(),
    );
}

fn bench(c: &mut Criterion) {
    let answer = Answer::new();
    let cases: [(&str, String, Parse); 3] = [
        ("openai_chat", openai_chat_body(&answer), parse_openai_chat),
        ("anthropic", anthropic_body(&answer), parse_anthropic),
        (
            "openai_responses",
            openai_responses_body(&answer),
            parse_openai_responses,
        ),
    ];
    let mut group = c.benchmark_group("stream_parse");
    for (seed, (name, body, parse)) in (1..).zip(&cases) {
        let chunks = chunked(body, seed);
        let whole = vec![body.as_bytes().to_vec()];
        check(name, *parse, &chunks, &answer);
        check(name, *parse, &whole, &answer);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(BenchmarkId::new(*name, "chunks_1-4KB"), |b| {
            b.iter(|| parse(&chunks, &NoDeltas).expect("parse"))
        });
        group.bench_function(BenchmarkId::new(*name, "one_chunk"), |b| {
            b.iter(|| parse(&whole, &NoDeltas).expect("parse"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
