//! What the store keeps for channels (DESIGN.md section 14): the platform events already
//! received ([`InboundKey`], recorded in the transaction that queues their run, so a redelivery
//! is recognised), where a conversation's replies go ([`DeliveryRoute`]), the outbox of replies
//! ([`OutboxItem`], a row written in the commit that ends a run, asks a question or requests an
//! approval, and marked delivered only with the platform's receipt), each channel's own small
//! state (a Telegram `getUpdates` offset, its last event and error) and pairing codes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A platform event's own id: the key a redelivery shares with the first delivery.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InboundKey {
    /// Where the event comes from: a channel's name (`telegram`, `slack`, a webhook's name).
    pub source: String,
    /// The platform's id of the event (Telegram `update_id`, Slack `event_id`, a mail's
    /// `Message-ID`, a webhook delivery id).
    pub event_id: String,
}

impl InboundKey {
    /// The key of event `event_id` of `source`.
    pub fn new(source: impl Into<String>, event_id: impl Into<String>) -> Self {
        InboundKey {
            source: source.into(),
            event_id: event_id.into(),
        }
    }
}

/// Where a conversation's replies go: a channel, and a target only that channel reads (a chat
/// and thread, a mail address and the message replied to), kept as text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRoute {
    /// The channel that delivers them (`telegram`, `slack`, `discord`, `email`).
    pub channel: String,
    /// The channel's own description of where (JSON it wrote and alone reads).
    pub target: String,
}

/// A reply waiting to be delivered, or delivered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutboxItem {
    /// Its number: replies of one channel are delivered in this order.
    pub id: i64,
    /// The channel that delivers it.
    pub channel: String,
    /// Where, as the channel described it ([`DeliveryRoute::target`]).
    pub target: String,
    /// The conversation it answers.
    pub session_id: String,
    /// The run whose ending, question or approval request it tells; `None` for a notice.
    pub run_id: Option<String>,
    /// The run's state when it was written (`completed`, `waiting_on_human`, `error`, …);
    /// `None` for a notice.
    pub run_state: Option<String>,
    /// A notice's text (a pairing code, a refusal); a run's reply is read from the run.
    pub body: Option<String>,
    /// When it was written.
    pub created_at: DateTime<Utc>,
    /// Delivery attempts so far.
    pub attempts: u32,
    /// Not to be tried before this.
    pub next_attempt_at: DateTime<Utc>,
    /// When it was delivered.
    pub delivered_at: Option<DateTime<Utc>>,
    /// The platform's message id(s), once delivered.
    pub receipt: Option<String>,
    /// When it was given up (a permanent error).
    pub failed_at: Option<DateTime<Utc>>,
    /// The last attempt's error.
    pub last_error: Option<String>,
}

/// A notice to deliver: a reply that is not a run's (a pairing code, a refusal).
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// The channel that delivers it.
    pub channel: String,
    /// Where.
    pub target: String,
    /// The conversation it belongs to, if any (`""` for none).
    pub session_id: String,
    /// Its text.
    pub body: String,
    /// When it was written.
    pub at: DateTime<Utc>,
}

/// A channel's outbox, counted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OutboxStats {
    /// Replies not delivered yet (nor given up).
    pub pending: u64,
    /// Replies delivered.
    pub delivered: u64,
    /// Replies given up.
    pub failed: u64,
    /// When the oldest pending reply was written.
    pub oldest_pending_at: Option<DateTime<Utc>>,
    /// The latest error of a pending or given-up reply.
    pub last_error: Option<String>,
}

/// An unknown sender waiting for an admin to approve them (`keel users pair CODE`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pairing {
    /// The one-time code the sender was given.
    pub code: String,
    /// Their platform.
    pub platform: String,
    /// Their id there.
    pub platform_user_id: String,
    /// Their name there.
    pub username: Option<String>,
    /// When the code was made.
    pub created_at: DateTime<Utc>,
}
