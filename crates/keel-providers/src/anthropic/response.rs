//! A whole Messages answer (JSON) → `ChatResponse`, and the pieces the stream reader shares:
//! usage, stop reasons and the final assembly.

use keel_core::{ChatResponse, Message, ProviderError, Reasoning, StopReason, ToolCall, Usage};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::answer::malformed;
use crate::classify::{ErrorDetails, json_body};

#[derive(Deserialize)]
struct WireMessage {
    /// `"message"`, or `"error"` for an error document; any JSON, so that reading it never
    /// refuses a body the checks below would take.
    #[serde(default, rename = "type")]
    kind: Option<Value>,
    #[serde(default)]
    model: Option<String>,
    content: Vec<Value>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// Token usage as the Messages API reports it. In a stream, `message_start` carries the input
/// side and `message_delta` the (cumulative) output side, so fields are merged as they come.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Takes every field `newer` reports, keeping the others.
    pub(crate) fn merge(&mut self, newer: WireUsage) {
        let fields = [
            (&mut self.input_tokens, newer.input_tokens),
            (&mut self.output_tokens, newer.output_tokens),
            (
                &mut self.cache_creation_input_tokens,
                newer.cache_creation_input_tokens,
            ),
            (
                &mut self.cache_read_input_tokens,
                newer.cache_read_input_tokens,
            ),
        ];
        for (field, value) in fields {
            if value.is_some() {
                *field = value;
            }
        }
    }

    /// In keel's terms: keel's input tokens include the cached ones, which Anthropic counts
    /// apart.
    pub(crate) fn to_usage(self) -> Usage {
        let cache_read = self.cache_read_input_tokens.unwrap_or(0);
        let cache_write = self.cache_creation_input_tokens.unwrap_or(0);
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0) + cache_read + cache_write,
            output_tokens: self.output_tokens.unwrap_or(0),
            cache_read_tokens: cache_read,
            cache_write_tokens: cache_write,
        }
    }
}

/// Reads a whole Messages answer. A body that is not a message becomes a `MalformedResponse`
/// naming what was wrong; an error document (`{"type": "error", …}`, which a proxy may send
/// with status 200) is classified like an HTTP error of its type.
pub fn parse_message(body: &[u8]) -> Result<ChatResponse, ProviderError> {
    // A message straight from the bytes, unless it says it is an error; anything else takes
    // the tree, which says what is wrong (and keeps the last of duplicate keys, which this
    // refuses).
    let message = match serde_json::from_slice::<WireMessage>(body) {
        Ok(message) if message.kind.as_ref().and_then(Value::as_str) != Some("error") => message,
        _ => message_from_tree(body)?,
    };
    let mut parts = AnswerParts {
        model: message.model.unwrap_or_default(),
        usage: message.usage.unwrap_or_default(),
        ..AnswerParts::default()
    };
    for block in message.content {
        parts.add_block(block);
    }
    Ok(parts.into_response(message.stop_reason.as_deref()))
}

/// A message read through a JSON tree: an error document is classified like an HTTP error of
/// its type, and anything else that is not a message says what is wrong.
fn message_from_tree(body: &[u8]) -> Result<WireMessage, ProviderError> {
    let json = json_body(body)?;
    if json.get("type").and_then(Value::as_str) == Some("error") {
        return Err(ErrorDetails::from_json(&json).into_answer_error());
    }
    serde_json::from_value(json)
        .map_err(|err| malformed(format!("the answer is not a message: {err}")))
}

/// The pieces of an answer, however they arrived.
#[derive(Debug, Default)]
pub(crate) struct AnswerParts {
    pub(crate) text: String,
    pub(crate) tool_calls: Vec<ToolCall>,
    /// The text of each thinking block.
    pub(crate) thinking: Vec<String>,
    /// The thinking and redacted-thinking blocks, verbatim, for replay on later turns.
    pub(crate) replay: Vec<Value>,
    pub(crate) usage: WireUsage,
    pub(crate) model: String,
}

impl AnswerParts {
    /// Adds one content block of a whole answer. Block types keel has no use for (server
    /// tools' blocks, for instance) are skipped.
    fn add_block(&mut self, block: Value) {
        let field = |name: &str| block.get(name).and_then(Value::as_str).unwrap_or_default();
        match field("type") {
            "text" => self.text.push_str(field("text")),
            "tool_use" => {
                let arguments = block
                    .get("input")
                    .map_or_else(String::new, Value::to_string);
                let call = tool_call(
                    self.tool_calls.len(),
                    field("id").to_string(),
                    field("name").to_string(),
                    arguments,
                );
                self.tool_calls.push(call);
            }
            "thinking" => {
                self.thinking.push(field("thinking").to_string());
                self.replay.push(block);
            }
            "redacted_thinking" => self.replay.push(block),
            other => tracing::debug!(block_type = other, "content block skipped"),
        }
    }

    /// Adds a thinking block assembled from a stream. A block whose signature never arrived
    /// keeps its text but is not kept for replay (the API would reject it).
    pub(crate) fn add_thinking(&mut self, thinking: String, signature: String) {
        if !signature.is_empty() {
            self.replay
                .push(json!({"type": "thinking", "thinking": thinking, "signature": signature}));
        }
        self.thinking.push(thinking);
    }

    /// Adds a redacted thinking block from a stream.
    pub(crate) fn add_redacted_thinking(&mut self, data: String) {
        self.replay
            .push(json!({"type": "redacted_thinking", "data": data}));
    }

    /// The answer. Reasoning is kept when there was thinking: its text joined (blocks apart by
    /// a blank line), and the blocks verbatim as a JSON array for replay.
    pub(crate) fn into_response(self, wire_stop: Option<&str>) -> ChatResponse {
        let stop_reason = stop_reason(wire_stop, !self.tool_calls.is_empty());
        let mut message = Message::assistant_with_calls(self.text, self.tool_calls);
        if !self.thinking.is_empty() || !self.replay.is_empty() {
            message.reasoning = Some(Reasoning {
                text: self.thinking.join("\n\n"),
                replay: (!self.replay.is_empty()).then_some(Value::Array(self.replay)),
            });
        }
        ChatResponse {
            message,
            stop_reason,
            usage: self.usage.to_usage(),
            model: self.model,
        }
    }
}

/// keel's stop reason for the API's. Tool calls always mean `ToolUse`; a missing reason is
/// inferred the same way.
pub(crate) fn stop_reason(wire: Option<&str>, has_tool_calls: bool) -> StopReason {
    if has_tool_calls {
        return StopReason::ToolUse;
    }
    match wire {
        Some("max_tokens" | "model_context_window_exceeded") => StopReason::MaxTokens,
        // `tool_use` without a tool_use block: nothing to run.
        Some("end_turn" | "stop_sequence" | "pause_turn" | "refusal" | "tool_use") | None => {
            StopReason::EndTurn
        }
        Some(other) => {
            tracing::debug!(stop_reason = other, "unknown stop_reason read as end_turn");
            StopReason::EndTurn
        }
    }
}

/// A tool call with the gaps a lax server could leave filled: a missing id becomes
/// `toolu_{index}`, missing input becomes `{}`.
pub(crate) fn tool_call(index: usize, id: String, name: String, arguments: String) -> ToolCall {
    crate::answer::filled_call("toolu", index, id, name, arguments)
}

#[cfg(test)]
mod tests {
    use keel_core::ProviderErrorKind;

    use super::*;

    fn parse(json: Value) -> Result<ChatResponse, ProviderError> {
        parse_message(json.to_string().as_bytes())
    }

    fn answer(content: Value, stop_reason: &str) -> Value {
        json!({
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": content,
            "stop_reason": stop_reason,
            "usage": {
                "input_tokens": 10,
                "cache_creation_input_tokens": 100,
                "cache_read_input_tokens": 1000,
                "output_tokens": 5,
            },
        })
    }

    #[test]
    fn cached_tokens_count_as_input_and_are_reported_apart() {
        let response = parse(answer(json!([{"type": "text", "text": "hi"}]), "end_turn")).unwrap();
        assert_eq!(
            response.usage,
            Usage {
                input_tokens: 1110,
                output_tokens: 5,
                cache_read_tokens: 1000,
                cache_write_tokens: 100,
            }
        );
        assert_eq!(response.model, "claude-test");
    }

    #[test]
    fn thinking_blocks_become_reasoning_with_their_replay() {
        let thinking = json!({"type": "thinking", "thinking": "first", "signature": "s1"});
        let redacted = json!({"type": "redacted_thinking", "data": "opaque"});
        let second = json!({"type": "thinking", "thinking": "second", "signature": "s2"});
        let content = json!([
            thinking,
            redacted,
            {"type": "text", "text": "Let me "},
            second,
            {"type": "text", "text": "check."},
            {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "."}},
        ]);
        let response = parse(answer(content, "tool_use")).unwrap();
        let message = response.message;
        assert_eq!(message.content, "Let me check.");
        assert_eq!(message.tool_calls[0].arguments, r#"{"path":"."}"#);
        let reasoning = message.reasoning.unwrap();
        assert_eq!(reasoning.text, "first\n\nsecond");
        assert_eq!(reasoning.replay, Some(json!([thinking, redacted, second])));
    }

    #[test]
    fn stop_reasons_map() {
        let text = json!([{"type": "text", "text": "x"}]);
        for (wire, stop) in [
            ("end_turn", StopReason::EndTurn),
            ("stop_sequence", StopReason::EndTurn),
            ("pause_turn", StopReason::EndTurn),
            ("refusal", StopReason::EndTurn),
            ("max_tokens", StopReason::MaxTokens),
            ("model_context_window_exceeded", StopReason::MaxTokens),
            ("tool_use", StopReason::EndTurn),
            ("something_new", StopReason::EndTurn),
        ] {
            assert_eq!(parse(answer(text.clone(), wire)).unwrap().stop_reason, stop);
        }
        // Tool calls mean tool use, whatever the stop reason says.
        let call = json!([{"type": "tool_use", "id": "t", "name": "ls", "input": {}}]);
        let response = parse(answer(call, "end_turn")).unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(response.message.tool_calls[0].arguments, "{}");
        assert!(response.message.reasoning.is_none());
    }

    #[test]
    fn unknown_blocks_are_skipped() {
        let content = json!([
            {"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}},
            {"type": "text", "text": "found it"},
        ]);
        let response = parse(answer(content, "end_turn")).unwrap();
        assert_eq!(response.message.content, "found it");
        assert!(response.message.tool_calls.is_empty());
    }

    /// Bodies the direct reading refuses, or must not take, read as they did through the tree:
    /// duplicate keys (the last wins), an error document that also carries content, a `type`
    /// that is not text.
    #[test]
    fn bodies_the_direct_reading_refuses_read_through_the_tree() {
        let duplicate = br#"{"content": [{"type": "text", "text": "first"}],
            "content": [{"type": "text", "text": "last"}], "stop_reason": "end_turn"}"#;
        assert!(serde_json::from_slice::<WireMessage>(duplicate).is_err());
        assert_eq!(parse_message(duplicate).unwrap().message.content, "last");

        let error_with_content = br#"{"type": "error", "content": [],
            "error": {"type": "overloaded_error", "message": "Overloaded"}}"#;
        let error = parse_message(error_with_content).unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::Overloaded);

        let odd_type = br#"{"type": 7, "content": [{"type": "text", "text": "hi"}]}"#;
        assert_eq!(parse_message(odd_type).unwrap().message.content, "hi");
    }

    #[test]
    fn malformed_answers_say_what_is_wrong() {
        let not_json = parse_message(b"<html>oops</html>").unwrap_err();
        assert_eq!(not_json.kind, ProviderErrorKind::MalformedResponse);
        assert!(not_json.message.contains("not JSON"), "{not_json}");

        let no_content = parse(json!({"type": "message", "model": "m"})).unwrap_err();
        assert_eq!(no_content.kind, ProviderErrorKind::MalformedResponse);
        assert!(
            no_content.message.contains("missing field `content`"),
            "{no_content}"
        );

        let error = parse(json!({
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
        }))
        .unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::Overloaded);
        assert_eq!(error.message, "Overloaded");
    }
}
