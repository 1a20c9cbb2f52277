//! A whole chat-completions answer (JSON) → `ChatResponse`, and the pieces the stream reader
//! shares: usage, stop reasons, tool-call cleanup and the final assembly.

use keel_core::{ChatResponse, Message, ProviderError, Reasoning, StopReason, ToolCall, Usage};
use serde::Deserialize;
use serde_json::Value;

use crate::answer::{argument_text, malformed};
use crate::classify::{ErrorDetails, json_body};

#[derive(Deserialize)]
struct WireCompletion {
    #[serde(default)]
    model: Option<String>,
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: WireMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    reasoning_content: Option<Value>,
    #[serde(default)]
    reasoning: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

/// Token usage as chat-completions reports it.
#[derive(Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<WirePromptDetails>,
}

#[derive(Deserialize)]
struct WirePromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl WireUsage {
    /// In keel's terms.
    pub(crate) fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0),
            output_tokens: self.completion_tokens.unwrap_or(0),
            cache_read_tokens: self
                .prompt_tokens_details
                .as_ref()
                .and_then(|details| details.cached_tokens)
                .unwrap_or(0),
            cache_write_tokens: 0,
        }
    }
}

/// The error text for an answer without any choice, streamed or whole.
pub(crate) const NO_CHOICES: &str = "the answer has no choices";

/// Reads a whole `chat.completion` body. A body that is not one becomes a `MalformedResponse`
/// naming what was wrong; an `{"error": …}` body (some servers send it with status 200) is
/// classified like an HTTP error.
pub fn parse_completion(body: &[u8]) -> Result<ChatResponse, ProviderError> {
    // A completion straight from the bytes: it has `choices`, so it is not an error document,
    // and it reads as the tree below would. Anything else takes the tree, which says what is
    // wrong (and keeps the last of duplicate keys, which this refuses).
    let completion = match serde_json::from_slice::<WireCompletion>(body) {
        Ok(completion) => completion,
        Err(_) => completion_from_tree(body)?,
    };
    let choice = completion
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| malformed(NO_CHOICES.to_string()))?;
    let message = choice.message;
    let tool_calls = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(index, call)| {
            tool_call(
                index,
                call.id.unwrap_or_default(),
                call.function.name,
                call.function
                    .arguments
                    .map(argument_text)
                    .unwrap_or_default(),
            )
        })
        .collect::<Vec<_>>();
    let stop_reason = stop_reason(choice.finish_reason.as_deref(), !tool_calls.is_empty());
    let parts = AnswerParts {
        text: message
            .content
            .as_ref()
            .map(content_text)
            .unwrap_or_default(),
        refusal: message.refusal.unwrap_or_default(),
        reasoning: reasoning_text(
            message.reasoning_content.as_ref(),
            message.reasoning.as_ref(),
        )
        .unwrap_or_default(),
        tool_calls,
        usage: completion
            .usage
            .as_ref()
            .map(WireUsage::to_usage)
            .unwrap_or_default(),
        model: completion.model.unwrap_or_default(),
    };
    Ok(parts.into_response(stop_reason))
}

/// A chat completion read through a JSON tree: an `{"error": …}` body without choices is
/// classified like an HTTP error, and anything else that is not a completion says what is wrong.
fn completion_from_tree(body: &[u8]) -> Result<WireCompletion, ProviderError> {
    let json = json_body(body)?;
    if json.get("choices").is_none()
        && let Some(error) = json.get("error")
    {
        return Err(ErrorDetails::from_error_value(error).into_answer_error());
    }
    let completion: WireCompletion = serde_json::from_value(json)
        .map_err(|err| malformed(format!("the answer is not a chat completion: {err}")))?;
    Ok(completion)
}

/// The pieces of an answer, however they arrived.
#[derive(Debug, Default)]
pub(crate) struct AnswerParts {
    pub(crate) text: String,
    pub(crate) refusal: String,
    pub(crate) reasoning: String,
    pub(crate) tool_calls: Vec<ToolCall>,
    pub(crate) usage: Usage,
    pub(crate) model: String,
}

impl AnswerParts {
    /// The answer: a refusal stands in for empty text; reasoning is kept when there is some.
    pub(crate) fn into_response(self, stop_reason: StopReason) -> ChatResponse {
        let text = if self.text.is_empty() {
            self.refusal
        } else {
            self.text
        };
        let mut message = Message::assistant_with_calls(text, self.tool_calls);
        if !self.reasoning.is_empty() {
            message.reasoning = Some(Reasoning {
                text: self.reasoning,
                replay: None,
            });
        }
        ChatResponse {
            message,
            stop_reason,
            usage: self.usage,
            model: self.model,
        }
    }
}

/// keel's stop reason for a `finish_reason`. Tool calls always mean `ToolUse` (Ollama says
/// `stop` with tool calls), and `tool_calls` without any call means `EndTurn`. A missing
/// reason is inferred the same way.
pub(crate) fn stop_reason(finish_reason: Option<&str>, has_tool_calls: bool) -> StopReason {
    if has_tool_calls {
        return StopReason::ToolUse;
    }
    match finish_reason {
        Some("length" | "max_tokens") => StopReason::MaxTokens,
        Some("stop" | "content_filter" | "tool_calls" | "function_call") | None => {
            StopReason::EndTurn
        }
        Some(other) => {
            tracing::debug!(
                finish_reason = other,
                "unknown finish_reason read as end_turn"
            );
            StopReason::EndTurn
        }
    }
}

/// A tool call with the gaps some servers leave filled: a missing id becomes `call_{index}`,
/// empty arguments become `{}`.
pub(crate) fn tool_call(index: usize, id: String, name: String, arguments: String) -> ToolCall {
    crate::answer::filled_call("call", index, id, name, arguments)
}

/// Message text: a string, or the `text` of each part when a server sends a list of parts.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// The reasoning text of a message or delta: `reasoning_content` (DeepSeek, vLLM, llama.cpp),
/// else `reasoning` (OpenRouter, newer vLLM). Only a string is text; any other value (a server's
/// own structure, a malformed field) is ignored rather than failing the answer.
pub(crate) fn reasoning_text(
    reasoning_content: Option<&Value>,
    reasoning: Option<&Value>,
) -> Option<String> {
    let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_string);
    text(reasoning_content).or_else(|| text(reasoning))
}

#[cfg(test)]
mod tests {
    use keel_core::ProviderErrorKind;

    use super::*;

    fn parse(json: Value) -> Result<ChatResponse, ProviderError> {
        parse_completion(json.to_string().as_bytes())
    }

    fn answer(message: Value, finish_reason: &str) -> Value {
        serde_json::json!({
            "model": "local",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 4},
            },
        })
    }

    #[test]
    fn refusal_becomes_the_text_and_cached_tokens_are_read() {
        let response = parse(answer(
            serde_json::json!({"role": "assistant", "content": null, "refusal": "I can't."}),
            "stop",
        ))
        .unwrap();
        assert_eq!(response.message.content, "I can't.");
        assert_eq!(response.stop_reason, StopReason::EndTurn);
        assert_eq!(
            response.usage,
            Usage {
                input_tokens: 10,
                output_tokens: 5,
                cache_read_tokens: 4,
                cache_write_tokens: 0,
            }
        );
    }

    #[test]
    fn reasoning_content_is_kept_and_tool_calls_force_tool_use() {
        let response = parse(answer(
            serde_json::json!({
                "role": "assistant",
                "content": "",
                "reasoning_content": "let me look",
                "tool_calls": [{"function": {"name": "ls", "arguments": {"path": "."}}}],
            }),
            "stop",
        ))
        .unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(response.message.reasoning.unwrap().text, "let me look");
        let call = &response.message.tool_calls[0];
        assert_eq!(call.id, "call_0");
        assert_eq!(call.arguments, r#"{"path":"."}"#);
    }

    #[test]
    fn reasoning_is_read_from_either_field_and_a_malformed_one_is_ignored() {
        let with = |fields: Value| {
            let mut message = serde_json::json!({"role": "assistant", "content": "ok"});
            message
                .as_object_mut()
                .unwrap()
                .extend(fields.as_object().unwrap().clone());
            parse(answer(message, "stop")).unwrap()
        };
        let openrouter = with(serde_json::json!({"reasoning": "thought"}));
        assert_eq!(openrouter.message.reasoning.unwrap().text, "thought");
        let both = with(serde_json::json!({"reasoning_content": "first", "reasoning": "second"}));
        assert_eq!(both.message.reasoning.unwrap().text, "first");
        for malformed in [
            serde_json::json!({"reasoning_content": 42}),
            serde_json::json!({"reasoning_content": {"text": "x"}, "reasoning": ["y"]}),
            serde_json::json!({"reasoning_content": null}),
        ] {
            let response = with(malformed.clone());
            assert_eq!(response.message.content, "ok", "{malformed}");
            assert_eq!(response.message.reasoning, None, "{malformed}");
        }
    }

    #[test]
    fn finish_reasons_map() {
        let text = serde_json::json!({"role": "assistant", "content": "x"});
        for (finish, stop) in [
            ("stop", StopReason::EndTurn),
            ("length", StopReason::MaxTokens),
            ("content_filter", StopReason::EndTurn),
            ("tool_calls", StopReason::EndTurn),
        ] {
            assert_eq!(
                parse(answer(text.clone(), finish)).unwrap().stop_reason,
                stop
            );
        }
    }

    /// A body the typed reading refuses but the tree reads (duplicate keys: the last wins)
    /// still reads as it did, and an error document with choices is still an answer.
    #[test]
    fn bodies_the_direct_reading_refuses_read_through_the_tree() {
        let duplicate = br#"{"choices": [{"message": {"content": "first"}}],
            "choices": [{"message": {"content": "last"}, "finish_reason": "stop"}]}"#;
        assert!(serde_json::from_slice::<WireCompletion>(duplicate).is_err());
        assert_eq!(parse_completion(duplicate).unwrap().message.content, "last");

        let error_only = br#"{"error": {"message": "slow down", "type": "rate_limit_exceeded"}}"#;
        let error = parse_completion(error_only).unwrap_err();
        assert_eq!(error.message, "slow down");

        let both = br#"{"error": {"message": "ignored"},
            "choices": [{"message": {"content": "an answer"}, "finish_reason": "stop"}]}"#;
        assert_eq!(parse_completion(both).unwrap().message.content, "an answer");
    }

    #[test]
    fn malformed_answers_say_what_is_wrong() {
        let not_json = parse_completion(b"<html>oops</html>").unwrap_err();
        assert_eq!(not_json.kind, ProviderErrorKind::MalformedResponse);
        assert!(
            not_json.message.contains("not JSON"),
            "{}",
            not_json.message
        );

        let no_choices = parse(serde_json::json!({"object": "chat.completion"})).unwrap_err();
        assert_eq!(no_choices.kind, ProviderErrorKind::MalformedResponse);
        assert!(
            no_choices.message.contains("missing field `choices`"),
            "{}",
            no_choices.message
        );

        let empty = parse(serde_json::json!({"choices": []})).unwrap_err();
        assert_eq!(empty.message, "the answer has no choices");

        let error =
            parse(serde_json::json!({"error": {"message": "boom", "type": "server_error"}}))
                .unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::Server);
        assert_eq!(error.message, "boom");
    }
}
