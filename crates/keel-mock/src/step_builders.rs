//! Terse builders for script steps, so Rust tests can write scripts in a line each:
//! `Step::text("hi")`, `Step::tool_call("read", json!({"path": "a"})).repeat(2)`,
//! `Step::error(429).with_header("retry-after", "1")`,
//! `Step::text("a b c").fail_stream_after(2, ProviderErrorKind::Overloaded)`.

use std::collections::BTreeMap;

use keel_core::ProviderErrorKind;
use serde_json::Value;

use crate::script::{
    CutMode, ErrorReply, FinishReason, ResponsesErrorEvent, ScriptToolCall, ScriptUsage, Step,
    StreamError, ToolArguments,
};

impl Step {
    /// A step answering with text.
    pub fn text(text: impl Into<String>) -> Step {
        Step {
            text: Some(text.into()),
            ..Step::default()
        }
    }

    /// A step calling one tool; `arguments` is a JSON object (a string is sent verbatim).
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Step {
        Step::default().with_tool_call(name, arguments)
    }

    /// A step calling one tool with raw argument text sent verbatim (e.g. malformed JSON).
    pub fn raw_tool_call(name: impl Into<String>, raw: impl Into<String>) -> Step {
        Step::default().with_tool_call(name, Value::String(raw.into()))
    }

    /// A step answering with this HTTP error status and the API's default body.
    pub fn error(status: u16) -> Step {
        Step {
            error: Some(ErrorReply {
                status,
                headers: BTreeMap::new(),
                body: None,
                kind: None,
            }),
            ..Step::default()
        }
    }

    /// Adds text.
    pub fn with_text(mut self, text: impl Into<String>) -> Step {
        self.text = Some(text.into());
        self
    }

    /// Adds one more tool call (parallel calls).
    pub fn with_tool_call(mut self, name: impl Into<String>, arguments: Value) -> Step {
        self.tool_calls.push(ScriptToolCall {
            name: name.into(),
            arguments: ToolArguments::from_builder(arguments),
            id: None,
        });
        self
    }

    /// Adds reasoning text.
    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Step {
        self.reasoning = Some(reasoning.into());
        self
    }

    /// Overrides the finish reason.
    pub fn with_finish_reason(mut self, reason: FinishReason) -> Step {
        self.finish_reason = Some(reason);
        self
    }

    /// Reports exactly these token counts.
    pub fn with_usage(mut self, input_tokens: u64, output_tokens: u64) -> Step {
        self.usage = Some(ScriptUsage {
            input_tokens: Some(input_tokens),
            output_tokens: Some(output_tokens),
            cache_read_tokens: None,
        });
        self
    }

    /// Reports this model name.
    pub fn with_model(mut self, model: impl Into<String>) -> Step {
        self.model = Some(model.into());
        self
    }

    /// Waits before answering.
    pub fn with_delay_ms(mut self, ms: u64) -> Step {
        self.delay_ms = ms;
        self
    }

    /// Waits between streamed chunks.
    pub fn with_chunk_delay_ms(mut self, ms: u64) -> Step {
        self.chunk_delay_ms = ms;
        self
    }

    /// Breaks the connection after `chunks` chunks.
    pub fn cut_after(mut self, chunks: usize) -> Step {
        self.cut_after_chunks = Some(chunks);
        self.cut_mode = Some(CutMode::Abort);
        self
    }

    /// Ends the stream cleanly after `chunks` chunks, without its terminal marker.
    pub fn eof_after(mut self, chunks: usize) -> Step {
        self.cut_after_chunks = Some(chunks);
        self.cut_mode = Some(CutMode::Eof);
        self
    }

    /// Answers `times` requests with this step.
    pub fn repeat(mut self, times: u32) -> Step {
        self.times = Some(times);
        self
    }

    /// Answers every remaining request with this step.
    pub fn repeat_forever(mut self) -> Step {
        self.forever = true;
        self
    }

    /// On an error step: adds a response header. No effect on other steps.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Step {
        if let Some(error) = &mut self.error {
            error.headers.insert(name.into(), value.into());
        }
        self
    }

    /// On an error step: sets the body (a string is sent verbatim). No effect on other steps.
    pub fn with_error_body(mut self, body: Value) -> Step {
        if let Some(error) = &mut self.error {
            error.body = Some(body);
        }
        self
    }

    /// On an error step: sets the error class. No effect on other steps.
    pub fn with_error_kind(mut self, kind: ProviderErrorKind) -> Step {
        if let Some(error) = &mut self.error {
            error.kind = Some(kind);
        }
        self
    }
}

impl Step {
    /// Breaks the stream off with the API's own error event of `kind` after `chunks` chunks
    /// (a whole answer fails with the API's HTTP error for `kind`).
    pub fn fail_stream_after(self, chunks: usize, kind: ProviderErrorKind) -> Step {
        self.with_stream_error(StreamError::new(chunks, kind))
    }

    /// Sets the mid-stream failure.
    pub fn with_stream_error(mut self, error: StreamError) -> Step {
        self.stream_error = Some(error);
        self
    }
}

impl StreamError {
    /// A failure of `kind` after `after_chunks` chunks, with the API's default message.
    pub fn new(after_chunks: usize, kind: ProviderErrorKind) -> StreamError {
        StreamError {
            after_chunks,
            kind,
            message: None,
            responses_event: ResponsesErrorEvent::default(),
        }
    }

    /// Sets the message the error event carries.
    pub fn with_message(mut self, message: impl Into<String>) -> StreamError {
        self.message = Some(message.into());
        self
    }

    /// On OpenAI Responses: reports the failure with a bare `error` event instead of
    /// `response.failed`.
    pub fn as_bare_error_event(mut self) -> StreamError {
        self.responses_event = ResponsesErrorEvent::Error;
        self
    }
}
