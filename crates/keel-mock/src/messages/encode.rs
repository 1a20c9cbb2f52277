//! Anthropic answers: the whole `message` body and its SSE stream. Content comes as blocks in
//! order — `thinking` (with a made-up signature), `text`, then one `tool_use` per call; a
//! stream opens and closes each block, sends a `ping` after the first delta, and ends with
//! `message_delta` (stop reason, output tokens) and `message_stop`.

use keel_core::Usage;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::answer::{Answer, argument_fragments, split_words};
use crate::script::FinishReason;
use crate::wire::{Events, fresh_id, named_frame, to_json};

/// The service tier the mock reports.
const SERVICE_TIER: &str = "standard";

/// A whole answer.
pub(super) fn whole_body(answer: &Answer) -> String {
    let mut content = Vec::new();
    if let Some(reasoning) = &answer.reasoning {
        content.push(Block::Thinking {
            thinking: reasoning.clone(),
            signature: signature(),
        });
    }
    if let Some(text) = &answer.text {
        content.push(Block::Text { text: text.clone() });
    }
    for call in &answer.calls {
        // The real API always sends parsed input; raw arguments that are not JSON (scripted to
        // test malformed answers) go out as a JSON string.
        let input = serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| Value::String(call.arguments.clone()));
        content.push(Block::ToolUse {
            id: call.id.clone(),
            name: call.name.clone(),
            input,
        });
    }
    to_json(&WireMessage {
        model: &answer.model,
        id: fresh_id("msg_"),
        kind: "message",
        role: "assistant",
        content,
        stop_reason: Some(stop_reason(answer.finish)),
        stop_sequence: None,
        usage: WireUsage::new(answer.usage, answer.usage.output_tokens),
    })
}

/// A streamed answer.
pub(super) fn stream_events(answer: &Answer) -> Events {
    let mut stream = Stream::default();
    stream.event(
        "message_start",
        &MessageStart {
            kind: "message_start",
            message: WireMessage {
                model: &answer.model,
                id: fresh_id("msg_"),
                kind: "message",
                role: "assistant",
                content: Vec::new(),
                stop_reason: None,
                stop_sequence: None,
                usage: WireUsage::new(answer.usage, 1),
            },
        },
    );
    if let Some(reasoning) = &answer.reasoning {
        let block = stream.start_block(Block::Thinking {
            thinking: String::new(),
            signature: String::new(),
        });
        for word in split_words(reasoning) {
            stream.delta(block, Delta::Thinking { thinking: word });
        }
        stream.delta(
            block,
            Delta::Signature {
                signature: signature(),
            },
        );
        stream.stop_block(block);
    }
    if let Some(text) = &answer.text {
        let block = stream.start_block(Block::Text {
            text: String::new(),
        });
        for word in split_words(text) {
            stream.delta(block, Delta::Text { text: word });
        }
        stream.stop_block(block);
    }
    for call in &answer.calls {
        let block = stream.start_block(Block::ToolUse {
            id: call.id.clone(),
            name: call.name.clone(),
            input: Value::Object(Map::new()),
        });
        // As the real API does: an empty fragment first, then the JSON in pieces.
        let fragments = std::iter::once(String::new()).chain(argument_fragments(&call.arguments));
        for partial_json in fragments {
            stream.delta(block, Delta::InputJson { partial_json });
        }
        stream.stop_block(block);
    }
    if !stream.pinged {
        stream.ping();
    }
    let content = stream.frames.len();
    stream.event(
        "message_delta",
        &MessageDelta {
            kind: "message_delta",
            delta: StopDelta {
                stop_reason: stop_reason(answer.finish),
                stop_sequence: None,
            },
            usage: DeltaUsage::from(answer.usage),
        },
    );
    stream.event(
        "message_stop",
        &TypeOnly {
            kind: "message_stop",
        },
    );
    Events {
        frames: stream.frames,
        content,
    }
}

/// Builds the frames of a stream, numbering blocks and placing the one `ping`.
#[derive(Default)]
struct Stream {
    frames: Vec<String>,
    blocks: usize,
    pinged: bool,
}

impl Stream {
    fn event(&mut self, name: &str, data: &impl Serialize) {
        self.frames.push(named_frame(name, &to_json(data)));
    }

    fn ping(&mut self) {
        self.event("ping", &TypeOnly { kind: "ping" });
        self.pinged = true;
    }

    fn start_block(&mut self, content_block: Block) -> usize {
        let index = self.blocks;
        self.blocks += 1;
        self.event(
            "content_block_start",
            &BlockStart {
                kind: "content_block_start",
                index,
                content_block,
            },
        );
        index
    }

    fn delta(&mut self, index: usize, delta: Delta) {
        self.event(
            "content_block_delta",
            &BlockDelta {
                kind: "content_block_delta",
                index,
                delta,
            },
        );
        if !self.pinged {
            self.ping();
        }
    }

    fn stop_block(&mut self, index: usize) {
        self.event(
            "content_block_stop",
            &BlockStop {
                kind: "content_block_stop",
                index,
            },
        );
    }
}

fn stop_reason(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Stop => "end_turn",
        FinishReason::ToolCalls => "tool_use",
        FinishReason::Length => "max_tokens",
    }
}

/// A made-up thinking signature, opaque like the real one.
fn signature() -> String {
    fresh_id("EqkeelMockSignature")
}

#[derive(Serialize)]
struct WireMessage<'a> {
    model: &'a str,
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    content: Vec<Block>,
    stop_reason: Option<&'static str>,
    stop_sequence: Option<String>,
    usage: WireUsage,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Thinking {
        thinking: String,
        signature: String,
    },
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

/// A content-block delta; each variant is sent as `<name>_delta`.
#[derive(Serialize)]
#[serde(tag = "type")]
enum Delta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: String },
    #[serde(rename = "signature_delta")]
    Signature { signature: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
}

#[derive(Serialize)]
struct MessageStart<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: WireMessage<'a>,
}

#[derive(Serialize)]
struct BlockStart {
    #[serde(rename = "type")]
    kind: &'static str,
    index: usize,
    content_block: Block,
}

#[derive(Serialize)]
struct BlockDelta {
    #[serde(rename = "type")]
    kind: &'static str,
    index: usize,
    delta: Delta,
}

#[derive(Serialize)]
struct BlockStop {
    #[serde(rename = "type")]
    kind: &'static str,
    index: usize,
}

#[derive(Serialize)]
struct MessageDelta {
    #[serde(rename = "type")]
    kind: &'static str,
    delta: StopDelta,
    usage: DeltaUsage,
}

#[derive(Serialize)]
struct StopDelta {
    stop_reason: &'static str,
    stop_sequence: Option<String>,
}

#[derive(Serialize)]
struct TypeOnly {
    #[serde(rename = "type")]
    kind: &'static str,
}

/// Usage as Anthropic reports it: `input_tokens` counts only the uncached part of the prompt.
#[derive(Serialize)]
struct WireUsage {
    input_tokens: u64,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
    cache_creation: CacheCreation,
    output_tokens: u64,
    service_tier: &'static str,
}

#[derive(Serialize)]
struct CacheCreation {
    ephemeral_5m_input_tokens: u64,
    ephemeral_1h_input_tokens: u64,
}

impl WireUsage {
    fn new(usage: Usage, output_tokens: u64) -> WireUsage {
        WireUsage {
            input_tokens: uncached_input(usage),
            cache_creation_input_tokens: usage.cache_write_tokens,
            cache_read_input_tokens: usage.cache_read_tokens,
            cache_creation: CacheCreation {
                ephemeral_5m_input_tokens: usage.cache_write_tokens,
                ephemeral_1h_input_tokens: 0,
            },
            output_tokens,
            service_tier: SERVICE_TIER,
        }
    }
}

#[derive(Serialize)]
struct DeltaUsage {
    input_tokens: u64,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
    output_tokens: u64,
}

impl From<Usage> for DeltaUsage {
    fn from(usage: Usage) -> DeltaUsage {
        DeltaUsage {
            input_tokens: uncached_input(usage),
            cache_creation_input_tokens: usage.cache_write_tokens,
            cache_read_input_tokens: usage.cache_read_tokens,
            output_tokens: usage.output_tokens,
        }
    }
}

fn uncached_input(usage: Usage) -> u64 {
    usage
        .input_tokens
        .saturating_sub(usage.cache_read_tokens + usage.cache_write_tokens)
}
