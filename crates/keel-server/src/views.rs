//! What the API answers with: JSON views of conversations, runs and messages, and pages of
//! them. The store's records stay the store's; these are the API's contract.

use chrono::{DateTime, Utc};
use keel_core::{RunRecord, SessionInfo, StoredMessage};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A conversation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConversationView {
    /// Its id.
    pub id: String,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When a message was last added.
    pub updated_at: DateTime<Utc>,
    /// Its first user message, shortened.
    pub title: Option<String>,
    /// Messages in it.
    pub message_count: u64,
    /// `queue` or `interrupt`.
    pub lane_policy: String,
    /// The user it belongs to.
    pub owner: Option<String>,
}

impl From<SessionInfo> for ConversationView {
    fn from(info: SessionInfo) -> Self {
        ConversationView {
            lane_policy: info.lane_policy.as_str().to_string(),
            id: info.id,
            created_at: info.created_at,
            updated_at: info.updated_at,
            title: info.title,
            message_count: info.message_count,
            owner: info.owner,
        }
    }
}

/// A run: what it is doing or how it ended.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RunView {
    /// Its id.
    pub id: String,
    /// Its conversation.
    pub conversation_id: String,
    /// `queued`, `running`, `waiting_for_tool`, `waiting_on_human`, `completed`, `cancelled`,
    /// `timed_out`, `max_steps`, `budget_exceeded` or `error`.
    pub state: String,
    /// Why it ended in `error` (or why it waits: `resume_unsafe`, `prompt_drift`).
    pub reason: Option<String>,
    /// Provider.
    pub provider: String,
    /// Model asked for.
    pub model: String,
    /// Model that last answered.
    pub model_used: Option<String>,
    /// Model calls made.
    pub iterations: u32,
    /// Tokens used.
    #[schema(value_type = Object)]
    pub usage: serde_json::Value,
    /// Dollars spent.
    pub cost: f64,
    /// The final answer.
    pub final_text: Option<String>,
    /// What went wrong.
    pub error: Option<String>,
    /// When it was queued, then when it started.
    pub started_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// When someone asked it to stop.
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// It can be resumed (its worker died after a resumable checkpoint).
    pub resume_available: bool,
    /// Runs ahead of it in its lane, while it is queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<usize>,
    /// The run whose message rolled it back (lane policy `rollback`): its messages are hidden
    /// from the conversation's history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back_by: Option<String>,
}

impl RunView {
    /// The view of a stored run, with its place in the queue when queued.
    pub fn of(run: RunRecord, position: Option<usize>) -> Self {
        RunView {
            conversation_id: run.session_id,
            state: run.state.as_str().to_string(),
            reason: run.reason.map(|r| r.as_str().to_string()),
            provider: run.provider,
            model: run.model,
            model_used: run.model_used,
            iterations: run.iterations,
            usage: serde_json::to_value(run.usage).unwrap_or_default(),
            cost: run.cost,
            final_text: run.final_text,
            error: run.error,
            started_at: run.started_at,
            updated_at: run.updated_at,
            finished_at: run.finished_at,
            cancel_requested_at: run.cancel_requested_at,
            resume_available: run.resume_available,
            position,
            rolled_back_by: None,
            id: run.id,
        }
    }
}

/// A message of a conversation's transcript.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MessageView {
    /// 1-based place in the conversation.
    pub seq: u64,
    /// The run that wrote it.
    pub run_id: Option<String>,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Its text.
    pub content: String,
    /// Tool calls an assistant message asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub tool_calls: Option<serde_json::Value>,
    /// The call a tool message answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A compaction summary standing for earlier messages.
    pub summary: bool,
    /// For an assistant message a model wrote: that model, as the provider named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// For an assistant message a model wrote: the output tokens the provider counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Its run was rolled back (lane policy `rollback`): kept, but no later run sees it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
    /// Kept verbatim through compaction.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
}

impl From<StoredMessage> for MessageView {
    fn from(stored: StoredMessage) -> Self {
        let message = stored.message;
        let value = serde_json::to_value(&message).unwrap_or_default();
        MessageView {
            seq: stored.seq,
            run_id: stored.run_id,
            created_at: stored.created_at,
            role: value["role"].as_str().unwrap_or_default().to_string(),
            summary: message.meta.summary_of.is_some(),
            tool_calls: value
                .get("tool_calls")
                .filter(|calls| calls.as_array().is_some_and(|a| !a.is_empty()))
                .cloned(),
            tool_call_id: message.tool_call_id.clone(),
            model: message.meta.model.clone(),
            output_tokens: message.meta.output_tokens,
            hidden: false,
            pinned: message.meta.pinned,
            content: message.content,
        }
    }
}

/// A page of a listing, newest first (messages: oldest first).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// A page's size: `limit` (default 50), at most 200.
pub fn page_size(limit: Option<usize>) -> Result<usize, crate::ApiError> {
    match limit.unwrap_or(50) {
        0 => Err(crate::ApiError::invalid("limit must be at least 1")),
        n if n > 200 => Err(crate::ApiError::invalid("limit must be at most 200")),
        n => Ok(n),
    }
}
