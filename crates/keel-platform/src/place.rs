//! Where a message comes from: a platform's channel and thread, the conversation it belongs to
//! ([`ConversationKey`], its identity; the session id only names it), and whether that session is
//! trusted. [`PlatformPlace`] and [`SessionKind`] are keel-core's (a run and its tools know
//! them); this module makes and reads the ids and keys of platform conversations.
//!
//! A platform conversation is found by its key — kind, platform, server, channel, thread and,
//! for an email trigger, the sender — stored with it and compared as a tuple, never by its id:
//! a message can only ever reach a conversation of its own place. Its id is seed 000's readable
//! one ([`ConversationKey::readable_id`]) with `%`, `:` and `~` percent-escaped in every part
//! from outside, so two places never read alike; when that id is taken by another session (a
//! CLI one, another place's), the conversation gets [`ConversationKey::fallback_id`] instead.

use std::borrow::Cow;

use keel_core::{PlatformPlace, SessionKind};
use serde::{Deserialize, Serialize};

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

/// Which conversations of a place a [`ConversationKey`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConversationKind {
    /// The chat of a channel or thread: one conversation for everyone in it.
    Chat,
    /// One sender's email triggers at a place: every sender has a conversation of their own,
    /// so no email sees another sender's, and no approval crosses senders.
    EmailTrigger,
}

impl ConversationKind {
    /// The kind's name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            ConversationKind::Chat => "chat",
            ConversationKind::EmailTrigger => "email_trigger",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<ConversationKind> {
        match name {
            "chat" => Some(ConversationKind::Chat),
            "email_trigger" => Some(ConversationKind::EmailTrigger),
            _ => None,
        }
    }
}

/// A platform conversation's identity: the tuple a message's conversation is found by (an id
/// only names it). Events and sub-agents have none: each is a conversation of its own.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConversationKey {
    /// A chat, or one sender's email triggers.
    pub kind: ConversationKind,
    /// The platform.
    pub platform: String,
    /// The server, when the platform has them.
    pub server_id: Option<String>,
    /// The channel.
    pub channel_id: String,
    /// The thread, when the conversation is one.
    pub thread_id: Option<String>,
    /// The sender, for an email trigger's (`None` for a chat: everyone in it shares it).
    pub sender: Option<String>,
}

impl ConversationKey {
    /// The key of the conversation a message from `sender` (its platform user id) at `place`
    /// belongs to, coming from `source`; `None` for an event or a sub-agent, which make a
    /// conversation of their own every time.
    pub fn of(source: &Source, place: &PlatformPlace, sender: &str) -> Option<ConversationKey> {
        let (kind, sender) = match source {
            Source::Chat => (ConversationKind::Chat, None),
            Source::EmailTrigger => (ConversationKind::EmailTrigger, Some(sender.to_string())),
            Source::Event | Source::SubAgent { .. } => return None,
        };
        Some(ConversationKey {
            kind,
            platform: place.platform.clone(),
            server_id: place.server_id.clone(),
            channel_id: place.channel_id.clone(),
            thread_id: place.thread_id.clone(),
            sender,
        })
    }

    /// The place its conversation is at.
    pub fn place(&self) -> PlatformPlace {
        PlatformPlace {
            platform: self.platform.clone(),
            channel_id: self.channel_id.clone(),
            thread_id: self.thread_id.clone(),
            server_id: self.server_id.clone(),
        }
    }

    /// Seed 000's readable id, every part from outside escaped ([`escape`]): a chat's
    /// `slack:{channel}[:{thread}]`, `discord:…`, `{platform}:…` elsewhere, a Telegram chat's
    /// `{chat}[:{thread}]` when the chat id is a number (as Telegram's are; `telegram:{chat}`
    /// otherwise, so that no Telegram id reads as another kind of session); a sender's email
    /// triggers' `email_trigger:{platform}:{channel}:{sender}[:{thread}]`. The server is not in
    /// it (seed 000's formats): two servers' channels with the same id are told apart by the
    /// key, the second getting [`ConversationKey::fallback_id`].
    pub fn readable_id(&self) -> String {
        let channel = escape(&self.channel_id);
        let thread = self
            .thread_id
            .as_deref()
            .map_or(String::new(), |thread| format!(":{}", escape(thread)));
        match self.kind {
            ConversationKind::Chat => {
                if self.platform == "telegram" && is_telegram_chat_id(&self.channel_id) {
                    format!("{channel}{thread}")
                } else {
                    format!("{}:{channel}{thread}", self.platform)
                }
            }
            ConversationKind::EmailTrigger => format!(
                "email_trigger:{}:{channel}:{}{thread}",
                self.platform,
                escape(self.sender.as_deref().unwrap_or_default())
            ),
        }
    }

    /// The id of its conversation when [`ConversationKey::readable_id`] names another session:
    /// that id, `~` and a new UUID. No readable id ends so (`~` is escaped in them), and it reads
    /// as the same kind of session.
    pub fn fallback_id(&self) -> String {
        format!(
            "{}~{}",
            self.readable_id(),
            uuid::Uuid::now_v7().as_simple()
        )
    }
}

/// Telegram's chat ids are numbers (a group's negative).
fn is_telegram_chat_id(id: &str) -> bool {
    let digits = id.strip_prefix('-').unwrap_or(id);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// A part of a session id from outside, with `%`, `:` and `~` percent-escaped: the parts of an
/// id cannot run into each other (channel `C1:T` is not channel `C1` in thread `T`), and no
/// readable id ends like a fallback one.
pub fn escape(part: &str) -> Cow<'_, str> {
    if !part.contains(['%', ':', '~']) {
        return Cow::Borrowed(part);
    }
    let mut escaped = String::with_capacity(part.len() + 8);
    for c in part.chars() {
        match c {
            '%' => escaped.push_str("%25"),
            ':' => escaped.push_str("%3A"),
            '~' => escaped.push_str("%7E"),
            c => escaped.push(c),
        }
    }
    Cow::Owned(escaped)
}

/// The session id a new conversation for a message from `sender` (its platform user id) at
/// `place`, coming from `source`, is made under: its key's readable id for a chat or an email
/// trigger ([`ConversationKey::readable_id`]); `event_{uuid}` for an event; `sub-{depth}-{uuid}`
/// for a sub-agent. (A chat or trigger is found by its key, not by this id.)
pub fn session_id_for(source: &Source, place: &PlatformPlace, sender: &str) -> String {
    match source {
        Source::Chat | Source::EmailTrigger => ConversationKey::of(source, place, sender)
            .map(|key| key.readable_id())
            .unwrap_or_default(),
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
/// (for names) none of the separators session ids use, and not a name that would make a chat's
/// id read as another kind of session (`email_trigger`, `event_…`, `sub-{n}-…`).
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
    if name && SessionKind::of(&format!("{text}:x")) != SessionKind::Chat {
        return Err(format!(
            "`{what}` must not be `{text}`: its conversations' ids would read as another kind of \
             session"
        ));
    }
    Ok(())
}

/// The kind of chat a platform message comes from: a channel's lane policy may differ by kind
/// (`[channels.<name>] lane_policy = { dm = "collect", group = "queue", thread = "steer" }`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ChatKind {
    /// A direct message, one person and the assistant (also an email, a webhook).
    #[default]
    Dm,
    /// A group chat or a channel.
    Group,
    /// A thread (a Slack thread, a Telegram forum topic): its own conversation.
    Thread,
}

impl ChatKind {
    /// Every kind.
    pub const ALL: [ChatKind; 3] = [ChatKind::Dm, ChatKind::Group, ChatKind::Thread];

    /// The kind's name, as configured.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatKind::Dm => "dm",
            ChatKind::Group => "group",
            ChatKind::Thread => "thread",
        }
    }

    /// A chat's kind from what platforms tell: in a thread, a thread; else a direct message
    /// or a group.
    pub fn of(direct: bool, in_thread: bool) -> ChatKind {
        match (in_thread, direct) {
            (true, _) => ChatKind::Thread,
            (false, true) => ChatKind::Dm,
            (false, false) => ChatKind::Group,
        }
    }
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

    fn chat_id(platform: &str, channel: &str, thread: Option<&str>) -> String {
        session_id_for(&Source::Chat, &place(platform, channel, thread), "U1")
    }

    #[test]
    fn chat_session_ids_follow_seed_000() {
        assert_eq!(chat_id("telegram", "-1001", None), "-1001");
        assert_eq!(chat_id("telegram", "42", Some("7")), "42:7");
        assert_eq!(chat_id("slack", "C1", None), "slack:C1");
        assert_eq!(chat_id("slack", "C1", Some("1700.5")), "slack:C1:1700.5");
        assert_eq!(chat_id("discord", "42", None), "discord:42");
        assert_eq!(chat_id("matrix", "!r", None), "matrix:!r");
    }

    #[test]
    fn ids_escape_their_parts_so_no_two_places_read_alike() {
        // Another platform's id as a Telegram chat id: not that platform's conversation.
        assert_eq!(chat_id("telegram", "slack:C1", None), "telegram:slack%3AC1");
        // A channel holding `:` is not a channel and a thread.
        assert_eq!(chat_id("slack", "C1:T", None), "slack:C1%3AT");
        assert_ne!(
            chat_id("slack", "C1:T", None),
            chat_id("slack", "C1", Some("T"))
        );
        assert_eq!(chat_id("slack", "C1", Some("T:2")), "slack:C1:T%3A2");
        assert_ne!(
            chat_id("slack", "C1:T", Some("2")),
            chat_id("slack", "C1", Some("T:2"))
        );
        // An escape from outside is escaped in its turn; `~` never ends a readable id.
        assert_eq!(chat_id("slack", "C1%3AT", None), "slack:C1%253AT");
        assert_eq!(chat_id("slack", "C1~x", None), "slack:C1%7Ex");
        // A Telegram id that is not a number is prefixed: it never reads as another kind of
        // session, nor as a CLI session's plain name.
        for (channel, id) in [
            ("event_0193", "telegram:event_0193"),
            ("sub-1-abc", "telegram:sub-1-abc"),
            ("email_trigger", "telegram:email_trigger"),
            ("work", "telegram:work"),
            ("-", "telegram:-"),
        ] {
            let made = chat_id("telegram", channel, None);
            assert_eq!(made, id);
            assert_eq!(SessionKind::of(&made), SessionKind::Chat, "{made}");
        }
    }

    #[test]
    fn keys_are_the_whole_place_and_for_triggers_the_sender() {
        let mut at_w1 = place("slack", "C1", None);
        at_w1.server_id = Some("W1".into());
        let mut at_w2 = at_w1.clone();
        at_w2.server_id = Some("W2".into());
        let chat = |place: &PlatformPlace, sender: &str| {
            ConversationKey::of(&Source::Chat, place, sender).unwrap()
        };
        // A chat is everyone's in it; another server's channel of the same id is another one.
        assert_eq!(chat(&at_w1, "U1"), chat(&at_w1, "U2"));
        assert_ne!(chat(&at_w1, "U1"), chat(&at_w2, "U1"));
        assert_eq!(chat(&at_w1, "U1").place(), at_w1);
        // An email trigger's is its sender's.
        let email =
            |sender: &str| ConversationKey::of(&Source::EmailTrigger, &at_w1, sender).unwrap();
        assert_ne!(email("ann@x"), email("bob@x"));
        assert_eq!(email("ann@x"), email("ann@x"));
        assert_ne!(email("ann@x"), chat(&at_w1, "ann@x"));
        assert_eq!(email("ann@x").readable_id(), "email_trigger:slack:C1:ann@x");
        assert_eq!(
            email("a:b").readable_id(),
            "email_trigger:slack:C1:a%3Ab",
            "the sender is escaped too"
        );
        // Events and sub-agents are conversations of their own every time.
        assert_eq!(ConversationKey::of(&Source::Event, &at_w1, "U1"), None);
        // A fallback id reads as the same kind and never as a readable one.
        let fallback = email("ann@x").fallback_id();
        assert!(
            fallback.starts_with("email_trigger:slack:C1:ann@x~"),
            "{fallback}"
        );
        assert_eq!(SessionKind::of(&fallback), SessionKind::EmailTrigger);
        assert_ne!(fallback, email("ann@x").fallback_id());
        for kind in [ConversationKind::Chat, ConversationKind::EmailTrigger] {
            assert_eq!(ConversationKind::parse(kind.as_str()), Some(kind));
        }
    }

    #[test]
    fn trigger_and_sub_agent_ids_carry_their_kind() {
        let email = session_id_for(&Source::EmailTrigger, &place("slack", "C1", None), "U2");
        assert_eq!(email, "email_trigger:slack:C1:U2");
        assert_eq!(SessionKind::of(&email), SessionKind::EmailTrigger);
        let event = session_id_for(&Source::Event, &place("slack", "C1", None), "U2");
        assert_eq!(SessionKind::of(&event), SessionKind::Event);
        let sub = session_id_for(
            &Source::SubAgent {
                parent: "slack:C1".into(),
            },
            &place("slack", "C1", None),
            "U2",
        );
        assert_eq!(SessionKind::of(&sub), SessionKind::SubAgent { depth: 1 });
        let deeper = session_id_for(
            &Source::SubAgent { parent: sub },
            &place("slack", "C1", None),
            "U2",
        );
        assert_eq!(SessionKind::of(&deeper), SessionKind::SubAgent { depth: 2 });
    }

    #[test]
    fn outside_text_is_checked() {
        assert!(check_platform_text("platform", "slack", true).is_ok());
        assert!(check_platform_text("platform", "sl:ack", true).is_err());
        assert!(check_platform_text("platform", "", true).is_err());
        assert!(check_platform_text("channel", "C1:x", false).is_ok());
        assert!(check_platform_text("channel", "C1\n", false).is_err());
        assert!(check_platform_text("channel", &"x".repeat(201), false).is_err());
        // A platform whose chats' ids would read as triggers, events or sub-agents.
        for name in ["email_trigger", "event_x", "sub-1-x"] {
            let refused = check_platform_text("platform", name, true).unwrap_err();
            assert!(refused.contains("another kind of session"), "{refused}");
        }
        for name in ["events", "sub-x", "sub-1", "email"] {
            assert!(
                check_platform_text("platform", name, true).is_ok(),
                "{name}"
            );
        }
    }
}
