//! A streamed Messages answer: `message_start`, `content_block_*`, `message_delta` and
//! `message_stop` events accumulated into a `ChatResponse`, with deltas sent to the sink as
//! they arrive.

use std::collections::BTreeMap;

use eventsource_stream::Event;
use keel_core::{ChatResponse, DeltaSink, ProviderError, StreamDelta};
use serde::Deserialize;
use serde_json::Value;

use super::response::{AnswerParts, WireUsage, stop_reason, tool_call};
use crate::answer::malformed;
use crate::classify::{ErrorDetails, error_kind};
use crate::sse::{self, SseAccumulator, SseFlow, cut_short};

sse::public_parse_stream!(MessageAccumulator, "a Messages");

/// One event of the stream, by its `type`.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    MessageStart {
        message: WireStartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: WireBlockStart,
    },
    ContentBlockDelta {
        index: usize,
        delta: WireBlockDelta,
    },
    ContentBlockStop {},
    MessageDelta {
        #[serde(default)]
        delta: WireMessageDelta,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop {},
    Ping {},
    Error {
        error: Value,
    },
    /// An event type this adapter does not know (the API may add some): ignored.
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct WireStartMessage {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlockStart {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        #[serde(default)]
        id: String,
        #[serde(default)]
        name: String,
        #[serde(default)]
        input: Value,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: String,
    },
    RedactedThinking {
        #[serde(default)]
        data: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Default, Deserialize)]
struct WireMessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

/// A content block being assembled.
#[derive(Debug)]
enum Block {
    Text(String),
    ToolUse {
        /// Position of the call among the answer's tool calls (keel's delta index).
        call: usize,
        id: String,
        name: String,
        /// The `partial_json` fragments so far.
        json: String,
        /// The input given in `content_block_start` (`{}` from the API; used only when no
        /// fragment follows).
        start_input: Value,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    RedactedThinking(String),
    Other,
}

/// The state of one Messages stream.
#[derive(Debug, Default)]
pub(super) struct MessageAccumulator {
    model: String,
    usage: WireUsage,
    /// Content blocks by their wire `index`.
    blocks: BTreeMap<usize, Block>,
    tool_calls: usize,
    stop_reason: Option<String>,
    events: usize,
    saw_message_stop: bool,
}

impl MessageAccumulator {
    fn on_block_start(&mut self, index: usize, start: WireBlockStart, sink: &dyn DeltaSink) {
        let block = match start {
            WireBlockStart::Text { text } => {
                if !text.is_empty() {
                    sink.delta(&StreamDelta::Text { text: text.clone() });
                }
                Block::Text(text)
            }
            WireBlockStart::ToolUse { id, name, input } => {
                let call = self.tool_calls;
                self.tool_calls += 1;
                let id = if id.is_empty() {
                    format!("toolu_{call}")
                } else {
                    id
                };
                sink.delta(&StreamDelta::ToolCallStarted {
                    index: call,
                    id: id.clone(),
                    name: name.clone(),
                });
                Block::ToolUse {
                    call,
                    id,
                    name,
                    json: String::new(),
                    start_input: input,
                }
            }
            WireBlockStart::Thinking {
                thinking,
                signature,
            } => {
                if !thinking.is_empty() {
                    sink.delta(&StreamDelta::Reasoning {
                        text: thinking.clone(),
                    });
                }
                Block::Thinking {
                    thinking,
                    signature,
                }
            }
            WireBlockStart::RedactedThinking { data } => Block::RedactedThinking(data),
            WireBlockStart::Other => Block::Other,
        };
        self.blocks.insert(index, block);
    }

    fn on_block_delta(&mut self, index: usize, delta: WireBlockDelta, sink: &dyn DeltaSink) {
        // A delta for a block that never started is read as the start of one, where its kind
        // says enough.
        let block = self.blocks.entry(index).or_insert_with(|| match &delta {
            WireBlockDelta::TextDelta { .. } => Block::Text(String::new()),
            WireBlockDelta::ThinkingDelta { .. } => Block::Thinking {
                thinking: String::new(),
                signature: String::new(),
            },
            _ => Block::Other,
        });
        match (block, delta) {
            (Block::Text(text), WireBlockDelta::TextDelta { text: piece }) => {
                if !piece.is_empty() {
                    text.push_str(&piece);
                    sink.delta(&StreamDelta::Text { text: piece });
                }
            }
            (
                Block::ToolUse { call, json, .. },
                WireBlockDelta::InputJsonDelta { partial_json },
            ) => {
                // Every fragment is passed on, the empty first one included.
                json.push_str(&partial_json);
                sink.delta(&StreamDelta::ToolCallArguments {
                    index: *call,
                    fragment: partial_json,
                });
            }
            (
                Block::Thinking { thinking, .. },
                WireBlockDelta::ThinkingDelta { thinking: piece },
            ) => {
                if !piece.is_empty() {
                    thinking.push_str(&piece);
                    sink.delta(&StreamDelta::Reasoning { text: piece });
                }
            }
            (
                Block::Thinking { signature, .. },
                WireBlockDelta::SignatureDelta { signature: piece },
            ) => {
                signature.push_str(&piece);
            }
            (block, _) => tracing::debug!(index, ?block, "stream delta skipped"),
        }
    }

    /// The answer so far, in block order.
    fn into_parts(self) -> AnswerParts {
        let mut parts = AnswerParts {
            model: self.model,
            usage: self.usage,
            ..AnswerParts::default()
        };
        for block in self.blocks.into_values() {
            match block {
                Block::Text(text) => parts.text.push_str(&text),
                Block::ToolUse {
                    call,
                    id,
                    name,
                    json,
                    start_input,
                } => {
                    let arguments = if json.trim().is_empty() && !is_empty_input(&start_input) {
                        start_input.to_string()
                    } else {
                        json
                    };
                    parts.tool_calls.push(tool_call(call, id, name, arguments));
                }
                Block::Thinking {
                    thinking,
                    signature,
                } => parts.add_thinking(thinking, signature),
                Block::RedactedThinking(data) => parts.add_redacted_thinking(data),
                Block::Other => {}
            }
        }
        parts
    }
}

fn is_empty_input(input: &Value) -> bool {
    match input {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

impl SseAccumulator for MessageAccumulator {
    fn on_event(&mut self, event: &Event, sink: &dyn DeltaSink) -> Result<SseFlow, ProviderError> {
        let data = event.data.trim();
        let wire: WireEvent = sse::event_json(data, "event")?;
        self.events += 1;
        match wire {
            WireEvent::MessageStart { message } => {
                if let Some(model) = message.model.filter(|model| !model.is_empty()) {
                    self.model = model;
                }
                if let Some(usage) = message.usage {
                    self.usage.merge(usage);
                }
            }
            WireEvent::ContentBlockStart {
                index,
                content_block,
            } => self.on_block_start(index, content_block, sink),
            WireEvent::ContentBlockDelta { index, delta } => {
                self.on_block_delta(index, delta, sink)
            }
            WireEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.stop_reason {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = usage {
                    self.usage.merge(usage);
                }
            }
            WireEvent::MessageStop {} => {
                self.saw_message_stop = true;
                return Ok(SseFlow::Done);
            }
            WireEvent::Error { error } => {
                let details = ErrorDetails::from_error_value(&error);
                return Err(ProviderError::new(
                    error_kind(None, &details),
                    format!("the stream reported an error: {}", details.message),
                ));
            }
            WireEvent::ContentBlockStop {} | WireEvent::Ping {} => {}
            WireEvent::Unknown => tracing::debug!(event = %event.event, "stream event skipped"),
        }
        Ok(SseFlow::Continue)
    }

    fn finish(self, sink: &dyn DeltaSink) -> Result<ChatResponse, ProviderError> {
        if self.events == 0 {
            return Err(malformed(
                "the stream ended before its first event".to_string(),
            ));
        }
        if !self.saw_message_stop {
            return Err(cut_short("message_stop"));
        }
        let wire_stop = self.stop_reason.clone();
        let parts = self.into_parts();
        if wire_stop.is_none() {
            let inferred = stop_reason(None, !parts.tool_calls.is_empty());
            sink.delta(&StreamDelta::Warning {
                message: format!(
                    "the stream ended without a stop reason; assuming {}",
                    inferred.as_str()
                ),
            });
        }
        Ok(parts.into_response(wire_stop.as_deref()))
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
