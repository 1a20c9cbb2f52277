//! A whole Responses API answer (a `response` object) → `ChatResponse`, and the pieces the
//! stream reader shares: output items, usage, stop reasons, failures and the final assembly.

use keel_core::{ChatResponse, Message, ProviderError, Reasoning, StopReason, ToolCall, Usage};
use serde::Deserialize;
use serde_json::Value;

use crate::answer::{argument_text, filled_call, malformed};
use crate::classify::{ErrorDetails, error_kind, json_body};

/// A `response` object, as much of it as keel reads.
#[derive(Debug, Deserialize)]
pub(crate) struct WireResponse {
    #[serde(default)]
    pub(crate) model: Option<String>,
    #[serde(default)]
    pub(crate) status: Option<String>,
    #[serde(default)]
    pub(crate) output: Option<Vec<Value>>,
    #[serde(default)]
    pub(crate) usage: Option<WireUsage>,
    #[serde(default)]
    pub(crate) incomplete_details: Option<WireIncomplete>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

/// Why a response is incomplete.
#[derive(Debug, Deserialize)]
pub(crate) struct WireIncomplete {
    #[serde(default)]
    reason: Option<String>,
}

/// Token usage as the Responses API reports it.
#[derive(Debug, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<WireInputDetails>,
}

#[derive(Debug, Deserialize)]
struct WireInputDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl WireUsage {
    fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0),
            output_tokens: self.output_tokens.unwrap_or(0),
            cache_read_tokens: self
                .input_tokens_details
                .as_ref()
                .and_then(|details| details.cached_tokens)
                .unwrap_or(0),
            cache_write_tokens: 0,
        }
    }
}

impl WireResponse {
    /// Reads a `response` object (the body of a whole answer, or the `response` of a stream
    /// event).
    pub(crate) fn from_value(value: Value) -> Result<Self, ProviderError> {
        serde_json::from_value(value)
            .map_err(|err| malformed(format!("the answer is not a Responses API response: {err}")))
    }

    /// The error of a `failed` response; `None` for any other status.
    pub(crate) fn failure(&self) -> Option<ProviderError> {
        (self.status.as_deref() == Some("failed")).then(|| failure(self.error.as_ref()))
    }

    /// Usage in keel's terms (zero when the response has none).
    pub(crate) fn usage(&self) -> Usage {
        self.usage
            .as_ref()
            .map(WireUsage::to_usage)
            .unwrap_or_default()
    }

    /// keel's stop reason for this response's status.
    pub(crate) fn stop_reason(&self, has_tool_calls: bool) -> StopReason {
        let incomplete_reason = self
            .incomplete_details
            .as_ref()
            .and_then(|details| details.reason.as_deref());
        stop_reason(self.status.as_deref(), incomplete_reason, has_tool_calls)
    }
}

/// Reads a whole Responses API answer. A body that is not one becomes a `MalformedResponse`
/// naming what was wrong; a `failed` response, or an `{"error": …}` body (some servers send
/// it with status 200), is classified like an HTTP error.
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, ProviderError> {
    // A response straight from the bytes when it is plainly not an error document (it has an
    // output or a status, or no error); anything else takes the tree, which says what is wrong
    // (and keeps the last of duplicate keys, which this refuses).
    let response = match serde_json::from_slice::<WireResponse>(body) {
        Ok(response)
            if response.output.is_some()
                || response.status.is_some()
                || response.error.is_none() =>
        {
            response
        }
        _ => response_from_tree(body)?,
    };
    if let Some(error) = response.failure() {
        return Err(error);
    }
    let Some(output) = &response.output else {
        return Err(malformed("the answer has no output".to_string()));
    };
    let mut answer = Answer::default();
    for item in output {
        answer.add(OutputItem::read(item));
    }
    let stop = response.stop_reason(answer.has_tool_calls());
    let model = response.model.clone().unwrap_or_default();
    Ok(answer.into_response(stop, response.usage(), model))
}

/// A response read through a JSON tree: an `{"error": …}` body that is not a response is
/// classified like an HTTP error, and anything else that is not a response says what is wrong.
fn response_from_tree(body: &[u8]) -> Result<WireResponse, ProviderError> {
    let json = json_body(body)?;
    let is_response = json.get("output").is_some() || json.get("status").is_some();
    if let Some(error) = json
        .get("error")
        .filter(|error| !is_response && !error.is_null())
    {
        return Err(ErrorDetails::from_error_value(error).into_answer_error());
    }
    WireResponse::from_value(json)
}

/// One output item in keel's terms.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum OutputItem {
    /// An assistant message: its `output_text` parts and its `refusal` parts, each joined.
    Message { text: String, refusal: String },
    /// A function call; `id` is the wire `call_id`.
    FunctionCall(ToolCall),
    /// Reasoning: its summary (or reasoning text) and the whole item, kept for replay.
    Reasoning { text: String, item: Value },
    /// Anything else (built-in tool calls, …): not part of keel's answer.
    Other,
}

impl OutputItem {
    /// Reads one item of a response's `output`.
    pub(crate) fn read(item: &Value) -> Self {
        let text_of = |parts: Option<&Value>, part_type: &str, field: &str| -> Vec<String> {
            parts
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|part| part.get("type").and_then(Value::as_str) == Some(part_type))
                .filter_map(|part| part.get(field).and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        };
        match item.get("type").and_then(Value::as_str) {
            Some("message") => OutputItem::Message {
                text: text_of(item.get("content"), "output_text", "text").concat(),
                refusal: text_of(item.get("content"), "refusal", "refusal").concat(),
            },
            Some("function_call") => {
                let text = |field: &str| item.get(field).and_then(Value::as_str);
                OutputItem::FunctionCall(ToolCall {
                    id: text("call_id")
                        .or_else(|| text("id"))
                        .unwrap_or_default()
                        .to_string(),
                    name: text("name").unwrap_or_default().to_string(),
                    arguments: item
                        .get("arguments")
                        .cloned()
                        .map(argument_text)
                        .unwrap_or_default(),
                })
            }
            Some("reasoning") => {
                let summary = text_of(item.get("summary"), "summary_text", "text");
                let parts = if summary.is_empty() {
                    text_of(item.get("content"), "reasoning_text", "text")
                } else {
                    summary
                };
                OutputItem::Reasoning {
                    text: parts.join(PARAGRAPH),
                    item: item.clone(),
                }
            }
            _ => OutputItem::Other,
        }
    }
}

/// What separates two pieces of reasoning (summary parts, reasoning items).
pub(crate) const PARAGRAPH: &str = "\n\n";

/// The answer assembled from output items, in order.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    text: String,
    refusal: String,
    reasoning: Vec<String>,
    replay: Vec<Value>,
    calls: Vec<ToolCall>,
}

impl Answer {
    /// Adds the next output item.
    pub(crate) fn add(&mut self, item: OutputItem) {
        match item {
            OutputItem::Message { text, refusal } => {
                self.text.push_str(&text);
                self.refusal.push_str(&refusal);
            }
            OutputItem::FunctionCall(call) => {
                let index = self.calls.len();
                self.calls.push(filled_call(
                    "call",
                    index,
                    call.id,
                    call.name,
                    call.arguments,
                ));
            }
            OutputItem::Reasoning { text, item } => {
                if !text.is_empty() {
                    self.reasoning.push(text);
                }
                // A stream that broke before its reasoning item arrived has no item to keep.
                if item.is_object() {
                    self.replay.push(item);
                }
            }
            OutputItem::Other => {}
        }
    }

    /// True when the answer calls tools.
    pub(crate) fn has_tool_calls(&self) -> bool {
        !self.calls.is_empty()
    }

    /// The answer: a refusal stands in for empty text; reasoning is kept when there is some,
    /// its items (verbatim) as the replay.
    pub(crate) fn into_response(
        self,
        stop_reason: StopReason,
        usage: Usage,
        model: String,
    ) -> ChatResponse {
        let text = if self.text.is_empty() {
            self.refusal
        } else {
            self.text
        };
        let mut message = Message::assistant_with_calls(text, self.calls);
        if !self.reasoning.is_empty() || !self.replay.is_empty() {
            message.reasoning = Some(Reasoning {
                text: self.reasoning.join(PARAGRAPH),
                replay: (!self.replay.is_empty()).then_some(Value::Array(self.replay)),
            });
        }
        ChatResponse {
            message,
            stop_reason,
            usage,
            model,
        }
    }
}

/// keel's stop reason for a response `status` (`None` when it is unknown, e.g. a stream that
/// closed early). `incomplete` for `max_output_tokens` is `MaxTokens`; any other end is
/// `ToolUse` when the answer calls tools and `EndTurn` otherwise (an `incomplete` for
/// `content_filter` included).
pub(crate) fn stop_reason(
    status: Option<&str>,
    incomplete_reason: Option<&str>,
    has_tool_calls: bool,
) -> StopReason {
    match (status, incomplete_reason) {
        (Some("incomplete"), Some("max_output_tokens")) => StopReason::MaxTokens,
        _ if has_tool_calls => StopReason::ToolUse,
        (Some("completed" | "incomplete") | None, _) => StopReason::EndTurn,
        (Some(other), _) => {
            tracing::debug!(status = other, "unknown response status read as end_turn");
            StopReason::EndTurn
        }
    }
}

/// The classified error of a failed response (or of an error event), from its `error`
/// object: `{"code", "message"}`, sometimes with a `type`.
pub(crate) fn failure(error: Option<&Value>) -> ProviderError {
    let details = match error.filter(|error| !error.is_null()) {
        Some(error) => ErrorDetails::from_error_value(error),
        None => ErrorDetails::default(),
    };
    let message = details.reason();
    ProviderError::new(
        error_kind(None, &details),
        format!("the response failed: {message}"),
    )
}

#[cfg(test)]
mod tests {
    use keel_core::ProviderErrorKind;
    use serde_json::json;

    use super::*;

    fn parse(json: Value) -> Result<ChatResponse, ProviderError> {
        parse_response(json.to_string().as_bytes())
    }

    fn answer(status: &str, output: Value) -> Value {
        json!({
            "object": "response",
            "status": status,
            "model": "o4-mini-2025-04-16",
            "output": output,
            "usage": {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 4},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 3},
            },
        })
    }

    fn message(parts: Value) -> Value {
        json!({"type": "message", "role": "assistant", "content": parts})
    }

    #[test]
    fn text_parts_join_and_usage_reads_cached_tokens() {
        let response = parse(answer(
            "completed",
            json!([message(json!([
                {"type": "output_text", "text": "Hel", "annotations": []},
                {"type": "output_text", "text": "lo"},
            ]))]),
        ))
        .unwrap();
        assert_eq!(response.message.content, "Hello");
        assert_eq!(response.stop_reason, StopReason::EndTurn);
        assert_eq!(response.model, "o4-mini-2025-04-16");
        assert_eq!(
            response.usage,
            Usage {
                input_tokens: 10,
                output_tokens: 5,
                cache_read_tokens: 4,
                cache_write_tokens: 0,
            }
        );
        assert_eq!(response.message.reasoning, None);
    }

    #[test]
    fn a_refusal_is_the_text_only_when_there_is_no_other() {
        let refusal = json!({"type": "refusal", "refusal": "I can't."});
        let alone = parse(answer("completed", json!([message(json!([refusal]))]))).unwrap();
        assert_eq!(alone.message.content, "I can't.");
        let with_text = json!([message(
            json!([{"type": "output_text", "text": "Partly."}, refusal])
        )]);
        let both = parse(answer("completed", with_text)).unwrap();
        assert_eq!(both.message.content, "Partly.");
    }

    #[test]
    fn reasoning_is_kept_with_its_items_for_replay_and_calls_mean_tool_use() {
        let reasoning = json!({
            "id": "rs_1",
            "type": "reasoning",
            "summary": [
                {"type": "summary_text", "text": "First."},
                {"type": "summary_text", "text": "Second."},
            ],
            "encrypted_content": "gAAAA",
        });
        let call = json!({
            "id": "fc_1", "type": "function_call", "status": "completed",
            "call_id": "call_1", "name": "ls", "arguments": "{\"path\":\".\"}",
        });
        let response = parse(answer(
            "completed",
            json!([reasoning, call, {"type": "web_search_call", "id": "ws_1"}]),
        ))
        .unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        let kept = response.message.reasoning.unwrap();
        assert_eq!(kept.text, "First.\n\nSecond.");
        assert_eq!(kept.replay, Some(json!([reasoning])));
        assert_eq!(
            response.message.tool_calls,
            [ToolCall {
                id: "call_1".into(),
                name: "ls".into(),
                arguments: r#"{"path":"."}"#.into(),
            }]
        );
    }

    #[test]
    fn reasoning_without_summary_is_kept_for_replay_only() {
        let item =
            json!({"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "x"});
        let response = parse(answer("completed", json!([item]))).unwrap();
        let kept = response.message.reasoning.unwrap();
        assert_eq!(kept.text, "");
        assert_eq!(kept.replay, Some(json!([item])));
    }

    #[test]
    fn statuses_map_to_stop_reasons() {
        let text = json!([message(json!([{"type": "output_text", "text": "x"}]))]);
        let with_reason = |reason: &str| {
            let mut body = answer("incomplete", text.clone());
            body["incomplete_details"] = json!({"reason": reason});
            parse(body).unwrap().stop_reason
        };
        assert_eq!(with_reason("max_output_tokens"), StopReason::MaxTokens);
        assert_eq!(with_reason("content_filter"), StopReason::EndTurn);
        let call = json!([{"type": "function_call", "name": "ls", "arguments": ""}]);
        let response = parse(answer("completed", call)).unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(response.message.tool_calls[0].id, "call_0");
        assert_eq!(response.message.tool_calls[0].arguments, "{}");
    }

    #[test]
    fn a_failed_response_is_classified_by_its_code() {
        let mut body = answer("failed", json!([]));
        body["error"] = json!({"code": "rate_limit_exceeded", "message": "Slow down."});
        let error = parse(body).unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::RateLimit);
        assert_eq!(error.message, "the response failed: Slow down.");

        let mut body = answer("failed", json!([]));
        body["error"] = json!({"code": "server_error", "message": "Oops."});
        assert_eq!(parse(body).unwrap_err().kind, ProviderErrorKind::Server);
    }

    /// Bodies the direct reading refuses, or must not take, read as they did through the tree.
    #[test]
    fn bodies_the_direct_reading_refuses_read_through_the_tree() {
        let text = |t: &str| {
            format!(
                r#"[{{"type": "message", "content": [{{"type": "output_text", "text": "{t}"}}]}}]"#
            )
        };
        let duplicate = format!(
            r#"{{"status": "completed", "output": {}, "output": {}}}"#,
            text("first"),
            text("last")
        );
        assert!(serde_json::from_slice::<WireResponse>(duplicate.as_bytes()).is_err());
        let answer = parse_response(duplicate.as_bytes()).unwrap();
        assert_eq!(answer.message.content, "last");

        let error_only = br#"{"error": {"message": "slow down", "code": "rate_limit_exceeded"}}"#;
        assert_eq!(parse_response(error_only).unwrap_err().message, "slow down");

        // A null output still makes it a response, one without output.
        let null_output = br#"{"output": null, "error": {"message": "ignored"}}"#;
        let error = parse_response(null_output).unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::MalformedResponse);
        assert!(error.message.contains("no output"), "{error}");

        let error_and_output = format!(
            r#"{{"status": "completed", "error": null, "output": {}}}"#,
            text("fine")
        );
        let answer = parse_response(error_and_output.as_bytes()).unwrap();
        assert_eq!(answer.message.content, "fine");
    }

    #[test]
    fn malformed_answers_say_what_is_wrong() {
        let not_json = parse_response(b"<html>oops</html>").unwrap_err();
        assert_eq!(not_json.kind, ProviderErrorKind::MalformedResponse);
        assert!(
            not_json.message.contains("not JSON"),
            "{}",
            not_json.message
        );

        let no_output = parse(json!({"object": "response", "status": "completed"})).unwrap_err();
        assert_eq!(no_output.kind, ProviderErrorKind::MalformedResponse);
        assert_eq!(no_output.message, "the answer has no output");

        let wrong_shape = parse(json!({"status": "completed", "output": "text"})).unwrap_err();
        assert_eq!(wrong_shape.kind, ProviderErrorKind::MalformedResponse);

        let error =
            parse(json!({"error": {"message": "boom", "type": "server_error"}})).unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::Server);
        assert_eq!(error.message, "boom");
    }
}
