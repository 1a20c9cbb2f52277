//! Where a conversation lives on a chat platform: the place its runs, tools and sessions
//! carry.

use serde::{Deserialize, Serialize};

/// A conversation's place on a platform: conversations are unique per `(platform, channel,
/// thread)`; a thread is its own conversation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PlatformPlace {
    /// The platform, e.g. `telegram`, `slack`, `discord`.
    pub platform: String,
    /// The channel (a Telegram chat id, a Slack or Discord channel).
    pub channel_id: String,
    /// The thread in the channel, when the message is in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// The server (a Slack workspace, a Discord guild), when the platform has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<String>,
}
