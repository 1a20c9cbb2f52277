//! A model answer's content, gathered from its events for `gen_ai.output.messages` (only with
//! `[telemetry] record_content = true`): the streamed text, the reasoning and the tool calls.
//! A whole (not streamed) answer's text is in no event, so it is not recorded; its tool calls
//! are.

use keel_core::{ParsedToolCall, StopReason};
use serde_json::{Value, json};

/// The most characters of answer text or reasoning kept per model call.
const MAX_TEXT: usize = 64 * 1024;

/// What one answer said.
#[derive(Default)]
pub(crate) struct Answer {
    text: String,
    reasoning: String,
    calls: Vec<Value>,
    /// Why the model stopped.
    pub(crate) finish_reason: Option<StopReason>,
}

impl Answer {
    /// A piece of streamed text.
    pub(crate) fn push_text(&mut self, piece: &str) {
        push_capped(&mut self.text, piece);
    }

    /// The answer's reasoning.
    pub(crate) fn reasoning(&mut self, text: &str) {
        self.reasoning.clear();
        push_capped(&mut self.reasoning, text);
    }

    /// A tool call the answer asked for.
    pub(crate) fn tool_call(&mut self, call: &ParsedToolCall) {
        self.calls.push(json!({
            "type": "tool_call",
            "id": call.call_id,
            "name": call.name,
            "arguments": serde_json::from_str::<Value>(&call.arguments)
                .unwrap_or_else(|_| Value::String(call.arguments.clone())),
        }));
    }

    /// `gen_ai.output.messages` as JSON text, when the answer said anything.
    pub(crate) fn output_messages(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.reasoning.is_empty() {
            parts.push(json!({"type": "reasoning", "content": self.reasoning}));
        }
        if !self.text.is_empty() {
            parts.push(json!({"type": "text", "content": self.text}));
        }
        parts.extend(self.calls.iter().cloned());
        if parts.is_empty() {
            return None;
        }
        let mut message = json!({"role": "assistant", "parts": parts});
        if let Some(stop) = self.finish_reason {
            message["finish_reason"] = json!(crate::attributes::finish_reason(stop));
        }
        Some(Value::Array(vec![message]).to_string())
    }
}

fn push_capped(into: &mut String, piece: &str) {
    let room = MAX_TEXT.saturating_sub(into.len());
    if room == 0 {
        return;
    }
    let mut end = piece.len().min(room);
    while !piece.is_char_boundary(end) {
        end -= 1;
    }
    into.push_str(&piece[..end]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_one_assistant_message_with_its_parts() {
        let mut answer = Answer::default();
        answer.push_text("Hel");
        answer.push_text("lo");
        answer.tool_call(&ParsedToolCall {
            iteration: 1,
            index: 0,
            call_id: "c1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"a.txt"}"#.into(),
        });
        answer.finish_reason = Some(StopReason::ToolUse);
        let messages: Value = serde_json::from_str(&answer.output_messages().unwrap()).unwrap();
        assert_eq!(messages[0]["role"], "assistant");
        assert_eq!(messages[0]["finish_reason"], "tool_calls");
        assert_eq!(messages[0]["parts"][0]["content"], "Hello");
        assert_eq!(messages[0]["parts"][1]["arguments"]["path"], "a.txt");
        assert!(Answer::default().output_messages().is_none());
    }

    #[test]
    fn text_is_capped_on_a_character_boundary() {
        let mut answer = Answer::default();
        answer.push_text(&"é".repeat(MAX_TEXT));
        assert!(answer.text.len() <= MAX_TEXT);
        assert!(answer.text.chars().all(|c| c == 'é'));
    }
}
