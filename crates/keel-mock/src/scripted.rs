//! The in-process scripted provider: the same script semantics as the HTTP server, without
//! HTTP, for unit tests and benchmarks of the loop.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use keel_core::{
    ChatRequest, ChatResponse, DeltaSink, Message, Provider, ProviderError, ProviderErrorKind,
    Reasoning, StopReason, StreamDelta, ToolCall,
};
use serde_json::Value;

use crate::answer::{
    Answer, Piece, default_error_message, error_kind, exhausted_message, retry_after,
    status_for_kind,
};
use crate::cursor::{Cursor, Turn};
use crate::script::{CutMode, ErrorReply, FinishReason, Script, Step, StreamError};
use crate::turn_position;

/// A [`Provider`] that answers from a script: a request whose `model` has steps of its own in
/// [`Script::models`] takes the next of those, any other request the next top-level step.
///
/// Streaming calls (`request.stream`) send text and reasoning word by word, each tool call as
/// `ToolCallStarted` and several `ToolCallArguments` fragments, and always exactly one
/// `Finished` — also when the call fails: an error step or an exhausted script sends
/// `Finished { stop_reason: None }` before the error. A cut step delivers its first
/// `cut_after_chunks` deltas, then `Finished { stop_reason: None }` and a `network` error (in
/// `eof` mode a `Warning` comes first, as for a stream that closed without its terminal
/// marker); a cut non-streaming call fails with the `network` error alone. A `stream_error`
/// step delivers its first `after_chunks` deltas, then `Finished { stop_reason: None }` and an
/// error of the scripted kind (no HTTP status: the stream had begun); a non-streaming call
/// fails with that error alone, with the status the kind usually comes with.
///
/// In a [`Script::per_turn`] script each request gets the step at its position in its turn
/// (the assistant replies after its last user message the loop did not inject), so one
/// provider can serve any number of conversations at once, each walking the script from its
/// start. For such loads, [`ScriptedProvider::without_recording`] stops keeping a copy of
/// every request.
#[derive(Debug)]
pub struct ScriptedProvider {
    name: String,
    cursor: Cursor,
    requests: Mutex<Vec<ChatRequest>>,
    record: bool,
}

impl ScriptedProvider {
    /// A provider named `mock` answering from `script`.
    pub fn new(script: Script) -> ScriptedProvider {
        ScriptedProvider {
            name: "mock".to_string(),
            cursor: Cursor::new(script),
            requests: Mutex::new(Vec::new()),
            record: true,
        }
    }

    /// A provider answering with these steps.
    pub fn from_steps(steps: Vec<Step>) -> ScriptedProvider {
        Self::new(Script::new(steps))
    }

    /// Renames the provider (to tell several apart, e.g. in a fallback chain).
    pub fn with_name(mut self, name: impl Into<String>) -> ScriptedProvider {
        self.name = name.into();
        self
    }

    /// Stops recording requests: [`ScriptedProvider::requests`] stays empty, and a call no
    /// longer copies its request (for benchmarks running many conversations).
    pub fn without_recording(mut self) -> ScriptedProvider {
        self.record = false;
        self
    }

    /// The requests received so far, for every model, in order (none when built
    /// [`without_recording`](ScriptedProvider::without_recording)).
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.recorded().clone()
    }

    fn recorded(&self) -> std::sync::MutexGuard<'_, Vec<ChatRequest>> {
        // Pushing to a Vec cannot leave it half-updated, so a poisoned lock is safe to use.
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        sink: &dyn DeltaSink,
    ) -> Result<ChatResponse, ProviderError> {
        if self.record {
            self.recorded().push(request.clone());
        }
        let stream = request.stream;
        let fail = |error: ProviderError| {
            if stream {
                sink.delta(&StreamDelta::Finished { stop_reason: None });
            }
            Err(error)
        };
        let position = || turn_position::of_messages(&request.messages);
        let (ids, step) = match self.cursor.take(&request.model, position) {
            Turn::Answer { ids, step, .. } => (ids, step),
            Turn::Exhausted { served, model } => {
                let message = exhausted_message(served, model.as_deref());
                let error = ProviderError::new(ProviderErrorKind::Server, message).with_status(500);
                return fail(error);
            }
        };
        if step.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(step.delay_ms)).await;
        }
        if let Some(reply) = &step.error {
            return fail(provider_error(reply, &request.model));
        }
        // The size of the request as JSON, for the usage estimate (only when the step leaves
        // the input tokens to estimate); keel's own types always serialize, and 0 only makes
        // the estimate its minimum.
        let size = || serde_json::to_vec(request).map_or(0, |json| json.len());
        let step = crate::answer::echoed(step, || {
            let user =
                request.messages.iter().rev().find(|message| {
                    message.role == keel_core::Role::User && !message.is_internal()
                });
            user.map(|message| message.content.clone())
                .unwrap_or_default()
        });
        let answer = Answer::from_step(&step, ids, size, &request.model, "call");
        let cut = step.cut_after_chunks;
        let failure = step.stream_error.as_ref();
        if !stream {
            return match (cut, failure) {
                (Some(_), _) => Err(cut_error("keel-mock: connection broken mid-answer")),
                (None, Some(failure)) => Err(stream_failure(failure, &request.model)
                    .with_status(status_for_kind(failure.kind))),
                (None, None) => Ok(response(answer)),
            };
        }

        let pieces = answer.pieces();
        let delay = Duration::from_millis(step.chunk_delay_ms);
        let stop_after = cut.or(failure.map(|f| f.after_chunks));
        let sent = stop_after.map_or(pieces.len(), |n| n.min(pieces.len()));
        for (i, piece) in pieces.iter().take(sent).enumerate() {
            if i > 0 && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            sink.delta(&delta(piece));
        }
        if cut.is_some() {
            if step.cut_mode == Some(CutMode::Eof) {
                sink.delta(&StreamDelta::Warning {
                    message: format!(
                        "stream closed without its terminal marker after {sent} chunks"
                    ),
                });
            }
            return fail(cut_error(&format!(
                "keel-mock: stream cut after {sent} chunks"
            )));
        }
        if let Some(failure) = failure {
            return fail(stream_failure(failure, &request.model));
        }
        let stop_reason = stop_reason(answer.finish);
        sink.delta(&StreamDelta::Finished {
            stop_reason: Some(stop_reason),
        });
        Ok(response(answer))
    }
}

/// The error a scripted mid-stream failure reports.
fn stream_failure(failure: &StreamError, model: &str) -> ProviderError {
    let message = failure
        .message
        .clone()
        .unwrap_or_else(|| default_error_message(failure.kind, model));
    ProviderError::new(failure.kind, message)
}

fn cut_error(message: &str) -> ProviderError {
    ProviderError::new(ProviderErrorKind::Network, message)
}

fn delta(piece: &Piece) -> StreamDelta {
    match piece {
        Piece::Reasoning(text) => StreamDelta::Reasoning { text: text.clone() },
        Piece::Text(text) => StreamDelta::Text { text: text.clone() },
        Piece::CallStarted { index, id, name } => StreamDelta::ToolCallStarted {
            index: *index,
            id: id.clone(),
            name: name.clone(),
        },
        Piece::CallArguments { index, fragment } => StreamDelta::ToolCallArguments {
            index: *index,
            fragment: fragment.clone(),
        },
    }
}

fn stop_reason(finish: FinishReason) -> StopReason {
    match finish {
        FinishReason::Stop => StopReason::EndTurn,
        FinishReason::ToolCalls => StopReason::ToolUse,
        FinishReason::Length => StopReason::MaxTokens,
    }
}

fn response(answer: Answer) -> ChatResponse {
    let calls = answer
        .calls
        .into_iter()
        .map(|call| ToolCall {
            id: call.id,
            name: call.name,
            arguments: call.arguments,
        })
        .collect();
    let mut message = Message::assistant_with_calls(answer.text.unwrap_or_default(), calls);
    message.reasoning = answer
        .reasoning
        .map(|text| Reasoning { text, replay: None });
    ChatResponse {
        message,
        stop_reason: stop_reason(answer.finish),
        usage: answer.usage,
        model: answer.model,
    }
}

/// The error an adapter would report for this error step.
fn provider_error(reply: &ErrorReply, model: &str) -> ProviderError {
    let kind = error_kind(reply);
    let message = match &reply.body {
        Some(Value::String(text)) => text.clone(),
        Some(body) => body
            .pointer("/error/message")
            .and_then(Value::as_str)
            .map_or_else(|| body.to_string(), str::to_string),
        None => default_error_message(kind, model),
    };
    let mut error = ProviderError::new(kind, message).with_status(reply.status);
    error.retry_after = retry_after(reply);
    error
}

#[cfg(test)]
#[path = "scripted_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "scripted_per_turn_tests.rs"]
mod per_turn_tests;
