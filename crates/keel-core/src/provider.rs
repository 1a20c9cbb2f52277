//! The `Provider` trait: one model call, whole or streamed, in keel's own terms.

use std::ops::AddAssign;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::message::Message;
use crate::provider_error::ProviderError;
use crate::tool::ToolSpec;

/// How the model may use tools on this call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type", content = "name")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call some tool.
    Required,
    /// The model must call this tool.
    Tool(String),
}

/// Everything an adapter needs for one model call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// Model name as the provider knows it.
    pub model: String,
    /// The conversation, system message(s) first. Shared with the run that sends it: a request
    /// holds pointers to the run's messages, so building one costs what is new in it, not a
    /// copy of the history.
    pub messages: Vec<Arc<Message>>,
    /// Tools the model may call (shared: the same list goes with every call of a run).
    pub tools: Arc<[ToolSpec]>,
    /// How the model may use them.
    pub tool_choice: ToolChoice,
    /// Upper bound on output tokens, if any.
    pub max_tokens: Option<u32>,
    /// Sampling temperature, when the caller (a persona) sets one; the provider's default else.
    pub temperature: Option<f32>,
    /// Ask for a streamed answer (deltas go to the sink as they arrive).
    pub stream: bool,
}

/// Why the model stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// A complete answer.
    EndTurn,
    /// The model wants tools run.
    ToolUse,
    /// The output was cut at the token limit.
    MaxTokens,
}

impl StopReason {
    /// The snake_case name used in events and output.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::ToolUse => "tool_use",
            StopReason::MaxTokens => "max_tokens",
        }
    }
}

/// Token usage of one call, or a sum of calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, including cached ones.
    pub input_tokens: u64,
    /// Completion tokens, including reasoning.
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

/// A model's complete answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The assistant message (text, tool calls, reasoning).
    pub message: Message,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// What it cost.
    pub usage: Usage,
    /// The model that actually answered, as the provider reported it.
    pub model: String,
}

/// A piece of a streamed answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum StreamDelta {
    /// Answer text.
    Text {
        /// The new text.
        text: String,
    },
    /// Reasoning text.
    Reasoning {
        /// The new reasoning text.
        text: String,
    },
    /// A tool call began.
    ToolCallStarted {
        /// Position of the call in the answer.
        index: usize,
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// More argument text for a tool call.
    ToolCallArguments {
        /// Position of the call in the answer.
        index: usize,
        /// The new fragment of raw JSON.
        fragment: String,
    },
    /// Something odd that did not stop the stream (e.g. it closed without its terminal marker).
    Warning {
        /// What happened.
        message: String,
    },
    /// The stream is over. Sent exactly once per stream, also when it broke (`stop_reason`
    /// is then `None`).
    Finished {
        /// Why the model stopped, when the stream said or it could be inferred.
        stop_reason: Option<StopReason>,
    },
}

/// Receives stream deltas as they arrive. Implementations must be cheap and must not block.
pub trait DeltaSink: Send + Sync {
    /// Called for every delta, in order.
    fn delta(&self, delta: &StreamDelta);
}

/// A sink that drops every delta.
pub struct NoDeltas;

impl DeltaSink for NoDeltas {
    fn delta(&self, _delta: &StreamDelta) {}
}

/// One model endpoint speaking one wire API.
#[async_trait]
pub trait Provider: Send + Sync {
    /// Short name used in events and run records (e.g. `openai`, `anthropic`, `mock`).
    fn name(&self) -> &str;

    /// Performs one call. When `request.stream` is set, deltas go to `sink` as they arrive and
    /// the stream ends with exactly one [`StreamDelta::Finished`]; the complete answer is
    /// returned either way.
    async fn chat(
        &self,
        request: &ChatRequest,
        sink: &dyn DeltaSink,
    ) -> Result<ChatResponse, ProviderError>;
}

/// One model of the fallback chain: which provider, which model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelTarget {
    /// Provider name (a key of the agent's providers).
    pub provider: String,
    /// Model name as that provider knows it.
    pub model: String,
}

impl ModelTarget {
    /// A target.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        ModelTarget {
            provider: provider.into(),
            model: model.into(),
        }
    }
}

impl std::fmt::Display for ModelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.provider, self.model)
    }
}
