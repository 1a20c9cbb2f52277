//! The one internal message format (OpenAI-style), shared by the loop, the store and every adapter.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions to the model.
    System,
    /// The human (or an internal message the loop injects in the user's place).
    User,
    /// The model.
    Assistant,
    /// A tool result, answering one tool call by id.
    Tool,
}

impl Role {
    /// The lowercase wire name of the role.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A tool call the model asked for. `arguments` is the raw JSON text the model produced, kept
/// verbatim so that a malformed argument string can be reported back to the model as it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned id that the tool result must echo.
    pub id: String,
    /// Name of the tool.
    pub name: String,
    /// Raw JSON arguments as produced by the model.
    pub arguments: String,
}

/// Why the loop injected a message that no human wrote. Internal messages are sent to the model
/// but never shown as a user turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InternalReason {
    /// A continuation prompt after the model stopped at `max_tokens`.
    MaxTokensRecovery,
    /// A nudge or directive from the loop guard.
    LoopNudge,
    /// A summary that replaces older messages in the context.
    CompactionSummary,
    /// The loop's own note that the iteration limit ended the run.
    IterationLimit,
    /// The final "summarize what you did" request at the soft time limit.
    TimeLimitSummary,
    /// A warning layer (budget, context pressure) added to one request, never stored.
    Warning,
    /// The request to save durable memory before a compaction.
    MemoryFlush,
    /// A reason written by a newer keel that this build does not know.
    #[serde(other)]
    Other,
}

/// Model reasoning ("thinking") that came with an assistant message.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reasoning {
    /// Human-readable reasoning text, if the provider exposed any.
    pub text: String,
    /// Provider data that must be sent back verbatim on later turns (signed thinking blocks,
    /// encrypted reasoning items). Opaque to everything but the adapter that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<serde_json::Value>,
}

/// The stored messages a compaction summary replaces in the context: `first..=last` by seq.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqRange {
    /// Seq of the first replaced message.
    pub first: u64,
    /// Seq of the last replaced message.
    pub last: u64,
}

/// A message's token count under one encoding, cached so it is counted once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCount {
    /// The encoding it was counted with.
    pub encoding: crate::tokens::Encoding,
    /// How many tokens.
    pub count: u32,
}

/// Metadata the loop keeps about a message; never sent to a provider as-is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MessageMeta {
    /// Set when the loop injected this message itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal: Option<InternalReason>,
    /// Pinned messages survive compaction verbatim.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    /// How much this message matters for retrieval, 0.0–1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub importance: Option<f32>,
    /// For a compaction summary: the stored messages it stands in for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_of: Option<SeqRange>,
    /// The cached token count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokenCount>,
    /// For a tool result: the call failed (an error, a refusal, a timeout). A restored run
    /// rebuilds its call reports and its loop guard's memory from its results and this mark.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// For an assistant message a model wrote: that model, as the provider named it in its
    /// answer (after any fallback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// For an assistant message a model wrote: the output tokens the provider counted for the
    /// answer (reasoning included), as its usage said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Text content (may be empty for an assistant message that only calls tools).
    #[serde(default)]
    pub content: String,
    /// Tool calls of an assistant message, in the order the model produced them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a `tool` message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Reasoning that came with an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Reasoning>,
    /// Loop metadata.
    #[serde(default, skip_serializing_if = "is_default_meta")]
    pub meta: MessageMeta,
}

fn is_default_meta(meta: &MessageMeta) -> bool {
    *meta == MessageMeta::default()
}

impl Message {
    fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning: None,
            meta: MessageMeta::default(),
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }

    /// An assistant message that calls tools.
    pub fn assistant_with_calls(content: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        let mut message = Self::new(Role::Assistant, content);
        message.tool_calls = calls;
        message
    }

    /// The result of the tool call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        let mut message = Self::new(Role::Tool, content);
        message.tool_call_id = Some(call_id.into());
        message
    }

    /// A message the loop injects in the user's role, tagged with why.
    pub fn internal_user(content: impl Into<String>, reason: InternalReason) -> Self {
        let mut message = Self::new(Role::User, content);
        message.meta.internal = Some(reason);
        message
    }

    /// True when the loop injected this message.
    pub fn is_internal(&self) -> bool {
        self.meta.internal.is_some()
    }
}

/// A message as stored, with its place in the conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredMessage {
    /// 1-based position in the session.
    pub seq: u64,
    /// The run that wrote it, if any.
    pub run_id: Option<String>,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
    /// The message.
    pub message: Message,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_compactly_and_round_trips() {
        let message = Message::assistant_with_calls(
            "",
            vec![ToolCall {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"a"}"#.into(),
            }],
        );
        let json = serde_json::to_string(&message).unwrap();
        assert!(
            !json.contains("meta"),
            "default metadata is omitted: {json}"
        );
        let back: Message = serde_json::from_str(&json).unwrap();
        assert_eq!(back, message);
    }

    #[test]
    fn unknown_internal_reason_from_a_newer_build_still_loads() {
        let json = r#"{"role":"user","content":"x","meta":{"internal":"something_new"}}"#;
        let message: Message = serde_json::from_str(json).unwrap();
        assert_eq!(message.meta.internal, Some(InternalReason::Other));
    }
}
