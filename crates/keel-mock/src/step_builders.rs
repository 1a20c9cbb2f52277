//! Terse builders for script steps, so Rust tests can write scripts in a line each:
//! `Step::text("hi")`, `Step::tool_call("read", json!({"path": "a"})).repeat(2)`,
//! `Step::error(429).with_header("retry-after", "1")`.

use std::collections::BTreeMap;

use keel_core::ProviderErrorKind;
use serde_json::Value;

use crate::script::{
    CutMode, ErrorReply, FinishReason, ScriptToolCall, ScriptUsage, Step, ToolArguments,
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
