//! The Telegram channel: the Bot API over long polling, with a thin client of keel's own.
//!
//! Inbound ([`poller`]): `getUpdates` with a `timeout` and the `offset` kept in the store; each
//! update is handed to the intake (a message) or the decider (a button press) and only then is
//! the offset advanced past it, so a crash at any moment redelivers it, and the intake's key
//! (`telegram`, `update_id`) makes the redelivery a duplicate. Messages with a `document` or a
//! `photo` come with their files ([`updates`]); in groups keel answers when mentioned, when a
//! message replies to one of its own, or always (`group_mode = "all"`); forum topics are
//! threads. While a run works, the chat shows "typing", and (`stream`, on by default) its
//! answer is shown as it is written in one draft message edited at most once a second
//! ([`draft`]), which the answer then replaces.
//!
//! Outbound ([`outlet`]): `sendMessage` in HTML, split at 4,096 characters without breaking a
//! code block, buttons as an inline keyboard; a 429 waits its `retry_after`, a 5xx is tried
//! again, a chat that is gone is given up.

pub mod client;
pub mod draft;
mod html;
pub mod outlet;
pub mod poller;
pub mod updates;

use std::sync::Arc;

use serde::Deserialize;

use crate::access::{Access, Allow};
use crate::config::{parse_section, secret};
use crate::runtime::{Context, StartError, Started};

/// The channel's name, as routes, keys and the outbox name it.
pub const CHANNEL: &str = "telegram";

/// When keel answers in a group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupMode {
    /// When mentioned (`@botname`) or replied to.
    #[default]
    Mentions,
    /// Every message (the bot's privacy mode must be off for it to see them).
    All,
}

/// `[channels.telegram]` of `keel.toml`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramConfig {
    /// The environment variable holding the bot token (from @BotFather).
    #[serde(default = "default_token_env")]
    pub token_env: String,
    /// The Bot API's base URL (a local Bot API server, a test's fake).
    #[serde(default = "default_api_url")]
    pub api_url: String,
    /// How long one `getUpdates` waits for updates, in seconds.
    #[serde(default = "default_poll_timeout")]
    pub poll_timeout_secs: u64,
    /// When keel answers in a group.
    #[serde(default)]
    pub group_mode: GroupMode,
    /// Whether a run's answer is shown while it is written: a draft message edited at most once
    /// a second, then edited into the answer ([`draft`]). Off: the answer arrives whole, with
    /// "typing" shown while the run works.
    #[serde(default = "default_stream")]
    pub stream: bool,
    /// Who may talk.
    #[serde(default)]
    pub allow: Allow,
    /// Telegram user ids or usernames allowed when `allow = "allowlist"`.
    #[serde(default)]
    pub allowlist: Vec<String>,
}

fn default_token_env() -> String {
    "TELEGRAM_BOT_TOKEN".into()
}

fn default_api_url() -> String {
    "https://api.telegram.org".into()
}

fn default_poll_timeout() -> u64 {
    30
}

fn default_stream() -> bool {
    true
}

/// Starts the telegram channel from its section: the poller and the outbox's courier.
pub async fn start(raw: &toml::Value, ctx: &Context) -> Result<Started, StartError> {
    let config: TelegramConfig = parse_section("channels.telegram", raw)?;
    let token = secret("channels.telegram", "bot token", &config.token_env)?;
    let client = Arc::new(client::Client::new(
        ctx.http.clone(),
        &config.api_url,
        &token,
    ));
    let access = Access {
        allow: config.allow,
        allowlist: config.allowlist.clone(),
    };
    let drafts = Arc::new(draft::Drafts::default());
    ctx.deliver_with(Arc::new(outlet::TelegramOutlet::new(
        client.clone(),
        drafts.clone(),
    )));
    let poller = poller::Poller::new(ctx.clone(), client, config, access, drafts);
    ctx.tasks.spawn(poller.run());
    Ok(Started::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_has_defaults_and_refuses_unknown_keys() {
        let raw: toml::Value = toml::from_str("group_mode = \"all\"").unwrap();
        let config: TelegramConfig = parse_section("channels.telegram", &raw).unwrap();
        assert_eq!(config.token_env, "TELEGRAM_BOT_TOKEN");
        assert_eq!(config.api_url, "https://api.telegram.org");
        assert_eq!(config.poll_timeout_secs, 30);
        assert_eq!(config.group_mode, GroupMode::All);
        assert!(config.stream);
        assert_eq!(config.allow, Allow::Pairing);
        let raw: toml::Value = toml::from_str("token = \"123:abc\"").unwrap();
        let error = parse_section::<TelegramConfig>("channels.telegram", &raw)
            .unwrap_err()
            .to_string();
        assert!(error.contains("token"), "{error}");
    }
}
