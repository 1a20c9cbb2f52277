//! A streamed chat-completions answer: `chat.completion.chunk` events accumulated into a
//! `ChatResponse`, with deltas sent to the sink as they arrive.

use std::collections::BTreeMap;

use eventsource_stream::Event;
use keel_core::{ChatResponse, DeltaSink, ProviderError, StreamDelta};
use serde::Deserialize;
use serde_json::Value;

use super::response::{AnswerParts, NO_CHOICES, WireUsage, reasoning_text, stop_reason, tool_call};
use crate::answer::{argument_text, malformed};
use crate::classify::{ErrorDetails, error_kind};
use crate::sse::{self, SseAccumulator, SseFlow, cut_short};

sse::public_parse_stream!(ChunkAccumulator, "a chat-completions");

#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Option<Vec<WireChunkChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChunkChoice {
    #[serde(default)]
    index: usize,
    #[serde(default)]
    delta: Option<WireDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    reasoning_content: Option<Value>,
    #[serde(default)]
    reasoning: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCallDelta>>,
}

#[derive(Deserialize)]
struct WireToolCallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunctionDelta>,
}

#[derive(Deserialize)]
struct WireFunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

/// A tool call being assembled from its fragments.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// The state of one chat-completions stream.
#[derive(Debug, Default)]
pub(super) struct ChunkAccumulator {
    parts: AnswerParts,
    /// Tool calls by their wire `index`.
    calls: BTreeMap<usize, PartialCall>,
    finish_reason: Option<String>,
    chunks: usize,
    /// A chunk carried a choice (index 0); a stream without one has no answer at all.
    saw_choice: bool,
    saw_done: bool,
}

impl ChunkAccumulator {
    fn on_chunk(&mut self, chunk: WireChunk, sink: &dyn DeltaSink) {
        self.chunks += 1;
        if let Some(model) = chunk.model.filter(|model| !model.is_empty()) {
            self.parts.model = model;
        }
        if let Some(usage) = &chunk.usage {
            self.parts.usage = usage.to_usage();
        }
        // keel asks for one choice; any other index is not part of the answer.
        let choices = chunk.choices.unwrap_or_default().into_iter();
        for choice in choices.filter(|choice| choice.index == 0) {
            self.saw_choice = true;
            if let Some(delta) = choice.delta {
                self.on_delta(delta, sink);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
    }

    fn on_delta(&mut self, delta: WireDelta, sink: &dyn DeltaSink) {
        let reasoning = reasoning_text(delta.reasoning_content.as_ref(), delta.reasoning.as_ref());
        if let Some(text) = reasoning.filter(|text| !text.is_empty()) {
            self.parts.reasoning.push_str(&text);
            sink.delta(&StreamDelta::Reasoning { text });
        }
        if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
            self.parts.text.push_str(&text);
            sink.delta(&StreamDelta::Text { text });
        }
        if let Some(text) = delta.refusal.filter(|text| !text.is_empty()) {
            self.parts.refusal.push_str(&text);
            sink.delta(&StreamDelta::Text { text });
        }
        for call in delta.tool_calls.unwrap_or_default() {
            self.on_tool_call(call, sink);
        }
    }

    fn on_tool_call(&mut self, call: WireToolCallDelta, sink: &dyn DeltaSink) {
        let index = call
            .index
            .unwrap_or_else(|| self.index_without_one(call.id.as_deref()));
        let (name, arguments) = match call.function {
            Some(function) => (function.name, function.arguments),
            None => (None, None),
        };
        let id = call.id.unwrap_or_default();
        let partial = self.calls.entry(index).or_insert_with(|| {
            let started = PartialCall {
                id: id.clone(),
                name: name.clone().unwrap_or_default(),
                arguments: String::new(),
            };
            sink.delta(&StreamDelta::ToolCallStarted {
                index,
                id: started.id.clone(),
                name: started.name.clone(),
            });
            started
        });
        // Some servers repeat the id and name on every fragment: keep the first.
        if partial.id.is_empty() {
            partial.id = id;
        }
        if let Some(name) = name.filter(|_| partial.name.is_empty()) {
            partial.name = name;
        }
        if let Some(arguments) = arguments {
            let fragment = argument_text(arguments);
            partial.arguments.push_str(&fragment);
            sink.delta(&StreamDelta::ToolCallArguments { index, fragment });
        }
    }

    /// The index of a tool-call fragment that came without one (some compatible servers): a
    /// new id starts the next call, anything else continues the last.
    fn index_without_one(&self, id: Option<&str>) -> usize {
        match (id, self.calls.last_key_value()) {
            (_, None) => 0,
            (Some(id), Some((&last, call))) if !id.is_empty() && call.id != id => last + 1,
            (_, Some((&last, _))) => last,
        }
    }
}

impl SseAccumulator for ChunkAccumulator {
    fn on_event(&mut self, event: &Event, sink: &dyn DeltaSink) -> Result<SseFlow, ProviderError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.saw_done = true;
            return Ok(SseFlow::Done);
        }
        let chunk: WireChunk = sse::event_json(data, "chunk")?;
        if let Some(error) = &chunk.error {
            let details = ErrorDetails::from_error_value(error);
            return Err(ProviderError::new(
                error_kind(None, &details),
                format!("the stream reported an error: {}", details.message),
            ));
        }
        self.on_chunk(chunk, sink);
        Ok(SseFlow::Continue)
    }

    fn finish(self, sink: &dyn DeltaSink) -> Result<ChatResponse, ProviderError> {
        if self.chunks == 0 {
            return Err(malformed(
                "the stream ended before its first chunk".to_string(),
            ));
        }
        if !self.saw_choice {
            // As for a whole answer with `choices: []`.
            return Err(malformed(NO_CHOICES.to_string()));
        }
        let mut parts = self.parts;
        parts.tool_calls = self
            .calls
            .into_iter()
            .map(|(index, call)| tool_call(index, call.id, call.name, call.arguments))
            .collect();
        let stop = stop_reason(self.finish_reason.as_deref(), !parts.tool_calls.is_empty());
        if self.finish_reason.is_none() {
            if !self.saw_done {
                return Err(cut_short("[DONE] or a finish reason"));
            }
            sink.delta(&StreamDelta::Warning {
                message: format!(
                    "the stream ended without a finish reason; assuming {}",
                    stop.as_str()
                ),
            });
        } else if !self.saw_done {
            tracing::debug!("the stream closed after its finish reason but without [DONE]");
        }
        Ok(parts.into_response(stop))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream_test_support::{finished_count, read_through};
    use keel_core::{ProviderErrorKind, StopReason};

    fn run(body: &str) -> (Result<ChatResponse, ProviderError>, Vec<StreamDelta>) {
        read_through::<ChunkAccumulator>(body)
    }

    #[test]
    fn tool_calls_without_index_are_told_apart_by_id() {
        let body = concat!(
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"x\",\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"b\",\"function\":{\"name\":\"y\",\"arguments\":\"{\\\"k\\\":1}\"}}]},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (result, deltas) = run(body);
        let response = result.unwrap();
        let names: Vec<_> = response
            .message
            .tool_calls
            .iter()
            .map(|c| &c.name)
            .collect();
        assert_eq!(names, ["x", "y"]);
        assert_eq!(response.message.tool_calls[1].arguments, r#"{"k":1}"#);
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(finished_count(&deltas), 1);
    }

    #[test]
    fn reasoning_deltas_are_forwarded_and_kept() {
        let body = concat!(
            "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hmm\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (result, deltas) = run(body);
        let response = result.unwrap();
        assert_eq!(response.message.reasoning.unwrap().text, "hmm");
        assert_eq!(response.message.content, "ok");
        assert_eq!(deltas[0], StreamDelta::Reasoning { text: "hmm".into() });
    }

    #[test]
    fn a_malformed_reasoning_field_is_skipped_and_the_stream_goes_on() {
        let body = concat!(
            "data: {\"choices\":[{\"delta\":{\"reasoning_content\":{\"odd\":1}}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"reasoning\":\"fine\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (result, deltas) = run(body);
        let response = result.unwrap();
        assert_eq!(response.message.content, "ok");
        assert_eq!(response.message.reasoning.unwrap().text, "fine");
        assert_eq!(
            deltas[0],
            StreamDelta::Reasoning {
                text: "fine".into()
            }
        );
    }

    #[test]
    fn an_error_event_ends_the_stream_classified() {
        let body = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n",
            "data: {\"error\":{\"message\":\"model overloaded\",\"type\":\"overloaded_error\"}}\n\n",
        );
        let (result, deltas) = run(body);
        let error = result.unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::Overloaded);
        assert!(error.message.contains("model overloaded"));
        assert_eq!(
            deltas.last(),
            Some(&StreamDelta::Finished { stop_reason: None })
        );
        assert_eq!(finished_count(&deltas), 1);
    }

    #[test]
    fn a_stream_that_closes_before_its_finish_reason_is_cut_short() {
        // Cut mid-arguments: the call must never run.
        let body = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"one two\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\",\"function\":{\"name\":\"write_file\",\"arguments\":\"{\\\"pa\"}}]}}]}\n\n",
        );
        let (result, deltas) = run(body);
        let error = result.unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::Network);
        assert!(
            error.message.contains("[DONE] or a finish reason"),
            "{error}"
        );
        assert_eq!(
            deltas.last(),
            Some(&StreamDelta::Finished { stop_reason: None })
        );
        assert_eq!(finished_count(&deltas), 1);
    }

    #[test]
    fn a_finish_reason_or_done_ends_a_stream() {
        // Some compatible servers omit [DONE]: the finish reason is the end.
        let body =
            "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n";
        let (result, _) = run(body);
        assert_eq!(result.unwrap().message.content, "ok");

        // [DONE] without a finish reason: the server said it is over; the reason is inferred.
        let body = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (result, deltas) = run(body);
        assert_eq!(result.unwrap().stop_reason, StopReason::EndTurn);
        assert!(matches!(
            &deltas[deltas.len() - 2],
            StreamDelta::Warning { .. }
        ));
    }

    #[test]
    fn a_stream_without_choices_is_the_same_error_as_a_whole_answer_without_them() {
        let body = "data: {\"choices\":[]}\n\ndata: [DONE]\n\n";
        let (result, _) = run(body);
        let error = result.unwrap_err();
        let whole = crate::openai_chat::parse_completion(br#"{"choices": []}"#).unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::MalformedResponse);
        assert_eq!(error.message, whole.message);
    }

    #[test]
    fn an_empty_stream_is_malformed() {
        let (result, deltas) = run("");
        assert_eq!(
            result.unwrap_err().kind,
            ProviderErrorKind::MalformedResponse
        );
        assert_eq!(deltas, [StreamDelta::Finished { stop_reason: None }]);
    }
}
