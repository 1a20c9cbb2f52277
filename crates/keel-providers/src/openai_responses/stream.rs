//! A streamed Responses API answer: typed events (`response.output_text.delta`,
//! `response.output_item.done`, `response.completed`, …) accumulated into a `ChatResponse`,
//! with deltas sent to the sink as they arrive.
//!
//! Output items are kept by their `output_index`. Deltas build them up; the item of
//! `response.output_item.done` replaces what the deltas built (it is the source of truth), and
//! whatever it adds that no delta carried is sent to the sink then, so the deltas always add up
//! to the final answer. The terminal event's `output` fills in any item the stream never
//! finished.

use std::collections::{BTreeMap, HashMap};

use eventsource_stream::Event;
use keel_core::{ChatResponse, DeltaSink, ProviderError, StreamDelta, ToolCall};
use serde_json::Value;

use super::response::{Answer, OutputItem, PARAGRAPH, WireResponse, failure};
use crate::answer::malformed;
use crate::classify::{ErrorDetails, error_kind};
use crate::sse::{self, SseAccumulator, SseFlow, cut_short};

sse::public_parse_stream!(EventAccumulator, "a Responses API");

/// One output item of the stream, as far as it has arrived.
#[derive(Debug)]
struct StreamItem {
    item: OutputItem,
    /// For a function call: its position among the answer's calls (the deltas' `index`).
    call_index: Option<usize>,
    /// For reasoning: the summary (or content) part the last delta belonged to.
    reasoning_part: Option<u64>,
    /// `response.output_item.done` arrived: the item is final.
    done: bool,
}

/// The state of one Responses API stream.
#[derive(Debug, Default)]
pub(super) struct EventAccumulator {
    model: String,
    /// Output items by `output_index`.
    items: BTreeMap<usize, StreamItem>,
    /// `output_index` by item id, for events that name only the item.
    indexes: HashMap<String, usize>,
    /// Function calls started so far.
    calls: usize,
    /// Some reasoning text has been sent (the next reasoning item starts a new paragraph).
    reasoning_sent: bool,
    /// The `response` of `response.completed` / `response.incomplete`.
    terminal: Option<WireResponse>,
    events: usize,
}

impl SseAccumulator for EventAccumulator {
    fn on_event(&mut self, event: &Event, sink: &dyn DeltaSink) -> Result<SseFlow, ProviderError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(SseFlow::Done);
        }
        let json: Value = sse::event_json(data, "event")?;
        self.events += 1;
        let kind = json
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        match kind {
            "response.created" | "response.in_progress" | "response.queued" => {
                self.take_model(json.pointer("/response/model").and_then(Value::as_str));
            }
            "response.output_item.added" => self.on_item(&json, false, sink),
            "response.output_item.done" => self.on_item(&json, true, sink),
            "response.output_text.delta" => self.on_text(&json, false, sink),
            "response.refusal.delta" => self.on_text(&json, true, sink),
            "response.function_call_arguments.delta" => self.on_arguments(&json, sink),
            "response.function_call_arguments.done" => self.on_arguments_done(&json, sink),
            "response.reasoning_summary_text.delta" => {
                self.on_reasoning(&json, "summary_index", sink);
            }
            "response.reasoning_text.delta" => self.on_reasoning(&json, "content_index", sink),
            "response.completed" | "response.incomplete" => {
                self.on_terminal(&json, kind, sink)?;
                return Ok(SseFlow::Done);
            }
            "response.failed" => return Err(failure(json.pointer("/response/error"))),
            "error" => return Err(error_event(&json)),
            _ => {}
        }
        Ok(SseFlow::Continue)
    }

    fn finish(self, _sink: &dyn DeltaSink) -> Result<ChatResponse, ProviderError> {
        if self.events == 0 {
            return Err(malformed(
                "the stream ended before its first event".to_string(),
            ));
        }
        let mut answer = Answer::default();
        for (_, streamed) in self.items {
            answer.add(streamed.item);
        }
        let Some(terminal) = &self.terminal else {
            return Err(cut_short("response.completed"));
        };
        let stop = terminal.stop_reason(answer.has_tool_calls());
        let usage = terminal.usage();
        Ok(answer.into_response(stop, usage, self.model))
    }
}

impl EventAccumulator {
    fn take_model(&mut self, model: Option<&str>) {
        if let Some(model) = model.filter(|model| !model.is_empty()) {
            self.model = model.to_string();
        }
    }

    /// The `output_index` an event refers to: its own, else its item's, else the last item's.
    fn index_of(&self, json: &Value) -> usize {
        if let Some(index) = output_index(json) {
            return index;
        }
        json.get("item_id")
            .and_then(Value::as_str)
            .and_then(|id| self.indexes.get(id).copied())
            .or_else(|| self.items.last_key_value().map(|(&index, _)| index))
            .unwrap_or(0)
    }

    /// `response.output_item.added` (`done` false) or `.done` (`done` true).
    fn on_item(&mut self, json: &Value, done: bool, sink: &dyn DeltaSink) {
        let Some(item) = json.get("item") else {
            return;
        };
        let id = item.get("id").and_then(Value::as_str);
        let known = id.and_then(|id| self.indexes.get(id).copied());
        let next = self
            .items
            .last_key_value()
            .map_or(0, |(&index, _)| index + 1);
        let index = output_index(json).or(known).unwrap_or(next);
        if let Some(id) = id {
            self.indexes.insert(id.to_string(), index);
        }
        self.apply(index, OutputItem::read(item), sink);
        if let Some(streamed) = self.items.get_mut(&index) {
            streamed.done |= done;
        }
    }

    /// Puts `item` at `index` in place of what was there (see [`EventAccumulator::merge`]).
    fn apply(&mut self, index: usize, item: OutputItem, sink: &dyn DeltaSink) {
        let old = self.items.remove(&index);
        let merged = self.merge(old, item, sink);
        self.items.insert(index, merged);
    }

    /// Takes the item at `index` out to be added to (put it back with `self.items.insert`);
    /// an item the stream never announced starts as `empty`.
    fn take(&mut self, index: usize, empty: OutputItem, sink: &dyn DeltaSink) -> StreamItem {
        match self.items.remove(&index) {
            Some(streamed) => streamed,
            None => self.merge(None, empty, sink),
        }
    }

    /// `item` in place of `old`, sending what it adds to what the sink already has: the start
    /// of a new function call, and the rest of its text, arguments or reasoning.
    fn merge(
        &mut self,
        old: Option<StreamItem>,
        item: OutputItem,
        sink: &dyn DeltaSink,
    ) -> StreamItem {
        let (old_item, mut call_index, reasoning_part, done) = match old {
            Some(old) => (old.item, old.call_index, old.reasoning_part, old.done),
            None => (OutputItem::Other, None, None, false),
        };
        match (&old_item, &item) {
            (old, OutputItem::Message { text, refusal }) => {
                let (old_text, old_refusal) = match old {
                    OutputItem::Message { text, refusal } => (text.as_str(), refusal.as_str()),
                    _ => ("", ""),
                };
                let rests = [rest_of(old_text, text), rest_of(old_refusal, refusal)];
                for rest in rests.into_iter().flatten() {
                    sink.delta(&StreamDelta::Text {
                        text: rest.to_string(),
                    });
                }
            }
            (old, OutputItem::FunctionCall(call)) => {
                let index = *call_index.get_or_insert_with(|| self.start_call(call, sink));
                let old_arguments = match old {
                    OutputItem::FunctionCall(old) => old.arguments.as_str(),
                    _ => "",
                };
                if let Some(rest) = rest_of(old_arguments, &call.arguments) {
                    sink.delta(&StreamDelta::ToolCallArguments {
                        index,
                        fragment: rest.to_string(),
                    });
                }
            }
            (old, OutputItem::Reasoning { text, .. }) => {
                let old_text = match old {
                    OutputItem::Reasoning { text, .. } => text.as_str(),
                    _ => "",
                };
                if let Some(rest) = rest_of(old_text, text) {
                    self.send_reasoning(old_text.is_empty(), rest.to_string(), sink);
                }
            }
            (_, OutputItem::Other) => {}
        }
        StreamItem {
            item,
            call_index,
            reasoning_part,
            done,
        }
    }

    /// Numbers a new function call and announces it.
    fn start_call(&mut self, call: &ToolCall, sink: &dyn DeltaSink) -> usize {
        let index = self.calls;
        self.calls += 1;
        let id = if call.id.is_empty() {
            format!("call_{index}")
        } else {
            call.id.clone()
        };
        sink.delta(&StreamDelta::ToolCallStarted {
            index,
            id,
            name: call.name.clone(),
        });
        index
    }

    fn on_text(&mut self, json: &Value, is_refusal: bool, sink: &dyn DeltaSink) {
        let Some(delta) = delta_of(json) else {
            return;
        };
        let index = self.index_of(json);
        let empty = OutputItem::Message {
            text: String::new(),
            refusal: String::new(),
        };
        let mut streamed = self.take(index, empty, sink);
        match &mut streamed.item {
            OutputItem::Message { text, refusal } => {
                let target = if is_refusal { refusal } else { text };
                target.push_str(delta);
                sink.delta(&StreamDelta::Text {
                    text: delta.to_string(),
                });
            }
            other => tracing::debug!(?other, "text delta for an item that is not a message"),
        }
        self.items.insert(index, streamed);
    }

    fn on_arguments(&mut self, json: &Value, sink: &dyn DeltaSink) {
        let Some(delta) = delta_of(json) else {
            return;
        };
        let index = self.index_of(json);
        let empty = OutputItem::FunctionCall(ToolCall {
            id: String::new(),
            name: String::new(),
            arguments: String::new(),
        });
        let mut streamed = self.take(index, empty, sink);
        match (&mut streamed.item, streamed.call_index) {
            (OutputItem::FunctionCall(call), Some(call_index)) => {
                call.arguments.push_str(delta);
                sink.delta(&StreamDelta::ToolCallArguments {
                    index: call_index,
                    fragment: delta.to_string(),
                });
            }
            (other, _) => tracing::debug!(?other, "arguments for an item that is not a call"),
        }
        self.items.insert(index, streamed);
    }

    /// `response.function_call_arguments.done`: the whole arguments of one call.
    fn on_arguments_done(&mut self, json: &Value, sink: &dyn DeltaSink) {
        let Some(arguments) = json.get("arguments").and_then(Value::as_str) else {
            return;
        };
        let index = self.index_of(json);
        if let Some(OutputItem::FunctionCall(call)) = self.items.get(&index).map(|s| &s.item) {
            let complete = ToolCall {
                arguments: arguments.to_string(),
                ..call.clone()
            };
            self.apply(index, OutputItem::FunctionCall(complete), sink);
        }
    }

    /// A reasoning delta; `part_field` names the field that numbers its part. A new part
    /// starts a new paragraph.
    fn on_reasoning(&mut self, json: &Value, part_field: &str, sink: &dyn DeltaSink) {
        let Some(delta) = delta_of(json) else {
            return;
        };
        let index = self.index_of(json);
        let part = json.get(part_field).and_then(Value::as_u64).unwrap_or(0);
        let empty = OutputItem::Reasoning {
            text: String::new(),
            item: Value::Null,
        };
        let mut streamed = self.take(index, empty, sink);
        if let OutputItem::Reasoning { text, .. } = &mut streamed.item {
            let first = text.is_empty();
            let mut piece = String::new();
            if !first && streamed.reasoning_part != Some(part) {
                piece.push_str(PARAGRAPH);
            }
            piece.push_str(delta);
            text.push_str(&piece);
            streamed.reasoning_part = Some(part);
            self.send_reasoning(first, piece, sink);
        } else {
            tracing::debug!("reasoning delta for an item that is not reasoning");
        }
        self.items.insert(index, streamed);
    }

    /// Sends reasoning text; the first text of an item after another item's starts a new
    /// paragraph, as the items are joined in the answer.
    fn send_reasoning(&mut self, starts_item: bool, text: String, sink: &dyn DeltaSink) {
        let text = if starts_item && self.reasoning_sent {
            format!("{PARAGRAPH}{text}")
        } else {
            text
        };
        self.reasoning_sent = true;
        sink.delta(&StreamDelta::Reasoning { text });
    }

    /// `response.completed` or `response.incomplete`: the status and usage, and the final
    /// form of any item the stream did not finish.
    fn on_terminal(
        &mut self,
        json: &Value,
        kind: &str,
        sink: &dyn DeltaSink,
    ) -> Result<(), ProviderError> {
        let body = json.get("response").cloned().unwrap_or(Value::Null);
        let mut response = WireResponse::from_value(body)?;
        self.take_model(response.model.as_deref());
        for (index, item) in response.output.iter().flatten().enumerate() {
            if !self.items.get(&index).is_some_and(|streamed| streamed.done) {
                self.apply(index, OutputItem::read(item), sink);
            }
        }
        if response.status.is_none() {
            response.status = kind.strip_prefix("response.").map(str::to_string);
        }
        self.terminal = Some(response);
        Ok(())
    }
}

/// The text `complete` adds to `streamed`, when `streamed` is how it starts (else the two
/// disagree, and the complete form wins without further deltas).
fn rest_of<'a>(streamed: &str, complete: &'a str) -> Option<&'a str> {
    match complete.strip_prefix(streamed) {
        Some(rest) if !rest.is_empty() => Some(rest),
        Some(_) => None,
        None => {
            tracing::debug!("an item's final form disagrees with its deltas; keeping the final");
            None
        }
    }
}

fn output_index(json: &Value) -> Option<usize> {
    json.get("output_index")
        .and_then(Value::as_u64)
        .and_then(|index| usize::try_from(index).ok())
}

fn delta_of(json: &Value) -> Option<&str> {
    json.get("delta")
        .and_then(Value::as_str)
        .filter(|delta| !delta.is_empty())
}

/// A top-level `error` event: `{"type": "error", "code", "message"}`, or the error nested
/// under `error`.
fn error_event(json: &Value) -> ProviderError {
    let source = json
        .get("error")
        .filter(|error| !error.is_null())
        .unwrap_or(json);
    let mut details = ErrorDetails::from_error_value(source);
    if details.error_type.as_deref() == Some("error") {
        details.error_type = None;
    }
    let message = details.reason();
    ProviderError::new(
        error_kind(None, &details),
        format!("the stream reported an error: {message}"),
    )
}
