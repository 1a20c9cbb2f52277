//! Where a message comes from: a platform's channel and thread, the session id that names its
//! conversation (seed 000's formats), and whether that session is trusted.

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

/// Where a message comes from, which decides its session's kind and trust (seed 000).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A person in a chat: trusted.
    #[default]
    Chat,
    /// An email that triggered the agent: untrusted.
    EmailTrigger,
    /// An event (a webhook, a schedule): untrusted; each one is its own conversation.
    Event,
    /// A sub-agent of the conversation `parent`: as trusted as its parent.
    SubAgent {
        /// The parent conversation.
        parent: String,
    },
}

/// What kind of session an id names, read from its format (seed 000).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionKind {
    /// A chat (a Telegram chat id, `slack:…`, `discord:…`, any other id): trusted.
    Chat,
    /// `email_trigger` or `email_trigger:…`: untrusted.
    EmailTrigger,
    /// `event_{uuid}`: untrusted.
    Event,
    /// `sub-{depth}-{uuid}`: inherits its parent's trust.
    SubAgent {
        /// How deep under its root conversation.
        depth: u32,
    },
}

impl SessionKind {
    /// The kind of session `id` names.
    pub fn of(id: &str) -> SessionKind {
        if id == "email_trigger" || id.starts_with("email_trigger:") {
            return SessionKind::EmailTrigger;
        }
        if id
            .strip_prefix("event_")
            .is_some_and(|rest| !rest.is_empty())
        {
            return SessionKind::Event;
        }
        if let Some(rest) = id.strip_prefix("sub-")
            && let Some((depth, uuid)) = rest.split_once('-')
            && !uuid.is_empty()
            && let Ok(depth) = depth.parse::<u32>()
        {
            return SessionKind::SubAgent { depth };
        }
        SessionKind::Chat
    }

    /// Whether a session of this kind is untrusted by its kind alone (a sub-agent's trust is
    /// its parent's, stored with its conversation).
    pub fn untrusted(self) -> bool {
        matches!(self, SessionKind::EmailTrigger | SessionKind::Event)
    }
}

/// The session id of a message from `source` at `place`: a chat's is its place in seed 000's
/// format (`slack:{channel}[:{thread}]`, `discord:{channel}[:{thread}]`, a Telegram chat id
/// `{chat}[:{thread}]`, `{platform}:{channel}[:{thread}]` elsewhere). An email trigger's is
/// `email_trigger:` and its place, so two people's triggers never share a conversation; an
/// event's is `event_{uuid}`; a sub-agent's `sub-{depth}-{uuid}`.
pub fn session_id_for(source: &Source, place: &PlatformPlace) -> String {
    let thread = place
        .thread_id
        .as_deref()
        .map_or(String::new(), |thread| format!(":{thread}"));
    let chat = match place.platform.as_str() {
        "telegram" => format!("{}{thread}", place.channel_id),
        platform => format!("{platform}:{}{thread}", place.channel_id),
    };
    match source {
        Source::Chat => chat,
        Source::EmailTrigger => format!(
            "email_trigger:{}:{}{thread}",
            place.platform, place.channel_id
        ),
        Source::Event => format!("event_{}", uuid::Uuid::now_v7()),
        Source::SubAgent { parent } => {
            let depth = match SessionKind::of(parent) {
                SessionKind::SubAgent { depth } => depth + 1,
                _ => 1,
            };
            format!("sub-{depth}-{}", uuid::Uuid::now_v7())
        }
    }
}

/// Checks a platform name or id from outside: 1–200 characters, no control characters, and
/// (for names) none of the separators session ids use.
pub fn check_platform_text(what: &str, text: &str, name: bool) -> Result<(), String> {
    if text.is_empty() || text.chars().count() > 200 {
        return Err(format!("`{what}` must be 1 to 200 characters"));
    }
    if text.chars().any(char::is_control) {
        return Err(format!("`{what}` must not hold control characters"));
    }
    if name
        && !text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
    {
        return Err(format!(
            "`{what}` may hold only letters, digits, `_`, `-` and `.`, not `{text}`"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(platform: &str, channel: &str, thread: Option<&str>) -> PlatformPlace {
        PlatformPlace {
            platform: platform.into(),
            channel_id: channel.into(),
            thread_id: thread.map(str::to_string),
            server_id: None,
        }
    }

    #[test]
    fn chat_session_ids_follow_seed_000() {
        let chat = Source::Chat;
        assert_eq!(
            session_id_for(&chat, &place("telegram", "-1001", None)),
            "-1001"
        );
        assert_eq!(
            session_id_for(&chat, &place("slack", "C1", None)),
            "slack:C1"
        );
        assert_eq!(
            session_id_for(&chat, &place("slack", "C1", Some("1700.5"))),
            "slack:C1:1700.5"
        );
        assert_eq!(
            session_id_for(&chat, &place("discord", "42", None)),
            "discord:42"
        );
        assert_eq!(
            session_id_for(&chat, &place("matrix", "!r", None)),
            "matrix:!r"
        );
    }

    #[test]
    fn trigger_and_sub_agent_ids_carry_their_kind() {
        let email = session_id_for(&Source::EmailTrigger, &place("slack", "C1", None));
        assert_eq!(email, "email_trigger:slack:C1");
        assert_eq!(SessionKind::of(&email), SessionKind::EmailTrigger);
        let event = session_id_for(&Source::Event, &place("slack", "C1", None));
        assert_eq!(SessionKind::of(&event), SessionKind::Event);
        let sub = session_id_for(
            &Source::SubAgent {
                parent: "slack:C1".into(),
            },
            &place("slack", "C1", None),
        );
        assert_eq!(SessionKind::of(&sub), SessionKind::SubAgent { depth: 1 });
        let deeper = session_id_for(
            &Source::SubAgent { parent: sub },
            &place("slack", "C1", None),
        );
        assert_eq!(SessionKind::of(&deeper), SessionKind::SubAgent { depth: 2 });
    }

    #[test]
    fn kinds_and_trust_read_from_ids() {
        for (id, kind) in [
            ("email_trigger", SessionKind::EmailTrigger),
            ("event_0193", SessionKind::Event),
            ("event_", SessionKind::Chat),
            ("sub-3-abc", SessionKind::SubAgent { depth: 3 }),
            ("sub-x-abc", SessionKind::Chat),
            ("12345", SessionKind::Chat),
            ("slack:C1:17.5", SessionKind::Chat),
        ] {
            assert_eq!(SessionKind::of(id), kind, "{id}");
        }
        assert!(SessionKind::EmailTrigger.untrusted() && SessionKind::Event.untrusted());
        assert!(!SessionKind::Chat.untrusted());
    }

    #[test]
    fn outside_text_is_checked() {
        assert!(check_platform_text("platform", "slack", true).is_ok());
        assert!(check_platform_text("platform", "sl:ack", true).is_err());
        assert!(check_platform_text("platform", "", true).is_err());
        assert!(check_platform_text("channel", "C1:x", false).is_ok());
        assert!(check_platform_text("channel", "C1\n", false).is_err());
        assert!(check_platform_text("channel", &"x".repeat(201), false).is_err());
    }
}
