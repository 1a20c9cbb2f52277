//! What a platform does with a reply: the [`Reply`] rendered from the outbox, the [`Outlet`] that
//! sends it to a target, and how a send fails ([`DeliveryError`]), which decides whether the
//! courier tries again.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Where a reply goes, as every channel writes it in a conversation's
/// [`keel_platform::DeliveryRoute::target`] (JSON): a chat and, where the platform has them,
/// a thread and the message answered. A webhook's `deliver` section names one too.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// The chat: a Telegram chat id, a Slack or Discord channel id, a mail address.
    pub chat: String,
    /// The thread: a Telegram forum topic, a Slack `thread_ts`, a mail's `Message-ID` (for
    /// `In-Reply-To`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    /// The message answered (a Telegram or Discord message id), if the reply should quote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// A mail's subject (a reply's is `Re: ` it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// A mail's `References` chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub references: Option<String>,
}

impl Target {
    /// The target as a delivery route's text.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A delivery route's text read back; a malformed one is a permanent delivery error.
    pub fn decode(text: &str) -> Result<Self, DeliveryError> {
        serde_json::from_str(text)
            .map_err(|e| DeliveryError::Permanent(format!("the reply's target is malformed: {e}")))
    }
}

/// A button under a reply: an approval's decision or a question's choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Button {
    /// What it says.
    pub label: String,
    /// What a press sends back (at most 64 bytes: Telegram's `callback_data` limit); read by
    /// [`crate::decide::Decider`].
    pub data: String,
    /// Whether pressing it refuses something (shown in red where the platform can).
    pub danger: bool,
}

/// A reply as a platform sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A run's final answer.
    Answer {
        /// The answer, in Markdown as the model wrote it.
        text: String,
    },
    /// A run asks the person something (`clarify`); its choices as buttons, if any.
    Question {
        /// The question.
        text: String,
        /// One button per choice.
        buttons: Vec<Button>,
    },
    /// A run waits for a tool call to be approved.
    Approval {
        /// What the call is and why it needs approval.
        text: String,
        /// Approve, approve for the session, deny.
        buttons: Vec<Button>,
    },
    /// A run ended without an answer (an error, a budget, a cancel).
    Failure {
        /// What happened, for the person.
        text: String,
    },
    /// A notice that is no run's (a pairing code, a refusal).
    Notice {
        /// Its text.
        text: String,
    },
}

impl Reply {
    /// The reply's text.
    pub fn text(&self) -> &str {
        match self {
            Reply::Answer { text }
            | Reply::Question { text, .. }
            | Reply::Approval { text, .. }
            | Reply::Failure { text }
            | Reply::Notice { text } => text,
        }
    }

    /// Its buttons (none for an answer, a failure or a notice).
    pub fn buttons(&self) -> &[Button] {
        match self {
            Reply::Question { buttons, .. } | Reply::Approval { buttons, .. } => buttons,
            _ => &[],
        }
    }
}

/// Why a send failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// The platform asked to wait (HTTP 429 with `retry_after`): tried again after that.
    #[error("rate limited for {0:?}: {1}")]
    RetryAfter(Duration, String),
    /// A 5xx, a timeout, a refused connection: tried again with backoff.
    #[error("{0}")]
    Transient(String),
    /// The platform refused it for good (a 4xx other than 429, a chat that is gone): given up.
    #[error("{0}")]
    Permanent(String),
}

impl DeliveryError {
    /// How a failed HTTP exchange of a platform's API classifies: 429 waits `retry_after`
    /// (or a second), 5xx and 408 are transient, any other status is permanent.
    pub fn from_status(status: u16, retry_after: Option<Duration>, what: String) -> Self {
        match status {
            429 => DeliveryError::RetryAfter(retry_after.unwrap_or(Duration::from_secs(1)), what),
            408 | 500..=599 => DeliveryError::Transient(what),
            _ => DeliveryError::Permanent(what),
        }
    }

    /// A transport failure (no status): transient.
    pub fn from_transport(error: &reqwest::Error) -> Self {
        DeliveryError::Transient(format!("cannot reach the platform: {error}"))
    }
}

/// A platform's side of the outbox: it sends a reply to a target (as its channel described it
/// in the conversation's [`keel_platform::DeliveryRoute`]) and answers the platform's receipt.
#[async_trait]
pub trait Outlet: Send + Sync {
    /// The channel's name, as the outbox rows name it.
    fn channel(&self) -> &str;

    /// Sends `reply` to `target`, split and formatted for the platform; answers the
    /// platform's message id(s) as the receipt. Called again for the same reply only when it
    /// failed (or the process died before its receipt was stored).
    async fn deliver(&self, target: &str, reply: &Reply) -> Result<String, DeliveryError>;
}
