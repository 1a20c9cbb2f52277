//! Discord events as keel reads them: a `MESSAGE_CREATE` dispatch or an `APPLICATION_COMMAND`
//! interaction made into an [`Inbound`], or passed over (another bot, keel itself, a guild
//! message not meant for keel, nothing to say).

use keel_platform::{DeliveryRoute, InboundKey, IncomingMessage};
use serde::Deserialize;
use serde_json::Value;

use super::{CHANNEL, Respond};
use crate::intake::Inbound;
use crate::outlet::Target;

/// A Discord user, as messages and interactions carry one.
#[derive(Clone, Debug, Deserialize)]
pub struct User {
    /// Its id.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub username: Option<String>,
    /// Whether it is a bot.
    #[serde(default)]
    pub bot: bool,
}

/// The part of a message a reply refers to.
#[derive(Clone, Debug, Deserialize)]
pub struct Referenced {
    /// Who wrote it.
    #[serde(default)]
    pub author: Option<User>,
}

/// A `MESSAGE_CREATE` dispatch's data, the fields keel reads.
#[derive(Clone, Debug, Deserialize)]
pub struct Message {
    /// The message's id.
    pub id: String,
    /// Its channel (a thread is a channel).
    pub channel_id: String,
    /// Its guild; none in a DM.
    #[serde(default)]
    pub guild_id: Option<String>,
    /// Who wrote it.
    pub author: User,
    /// Its text (empty without the MESSAGE CONTENT intent).
    #[serde(default)]
    pub content: String,
    /// The users it mentions.
    #[serde(default)]
    pub mentions: Vec<User>,
    /// The message it replies to, if any.
    #[serde(default)]
    pub referenced_message: Option<Box<Referenced>>,
}

/// Why a message was passed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skipped {
    /// Written by a bot, or by keel itself.
    Bot,
    /// A guild message that neither mentions keel nor replies to it.
    NotForKeel,
    /// Nothing left to say once the mention is taken out.
    Empty,
}

/// The [`Inbound`] that `message` becomes for the bot `bot_id` answering as `respond` says.
pub fn inbound_of(
    message: &Message,
    bot_id: Option<&str>,
    respond: Respond,
) -> Result<Inbound, Skipped> {
    if message.author.bot || Some(message.author.id.as_str()) == bot_id {
        return Err(Skipped::Bot);
    }
    let mut text = message.content.clone();
    if message.guild_id.is_some() {
        let mentioned = bot_id.is_some_and(|bot| {
            message.mentions.iter().any(|user| user.id == bot)
                || text.contains(&format!("<@{bot}>"))
                || text.contains(&format!("<@!{bot}>"))
        });
        let replied_to = bot_id.is_some_and(|bot| {
            message
                .referenced_message
                .as_ref()
                .and_then(|m| m.author.as_ref())
                .is_some_and(|author| author.id == bot)
        });
        if respond == Respond::Mentions && !mentioned && !replied_to {
            return Err(Skipped::NotForKeel);
        }
    }
    if let Some(bot) = bot_id {
        text = text
            .replace(&format!("<@{bot}>"), "")
            .replace(&format!("<@!{bot}>"), "");
    }
    let text = text.trim().to_string();
    if text.is_empty() {
        return Err(Skipped::Empty);
    }
    let target = Target {
        chat: message.channel_id.clone(),
        reply_to: Some(message.id.clone()),
        ..Target::default()
    };
    Ok(Inbound::new(
        InboundKey::new(CHANNEL, message.id.clone()),
        incoming(
            &message.author,
            message.guild_id.clone(),
            &message.channel_id,
            text,
        ),
        DeliveryRoute {
            channel: CHANNEL.into(),
            target: target.encode(),
        },
    ))
}

/// The [`Inbound`] a slash command (an `APPLICATION_COMMAND` interaction) becomes: its
/// options' values are the text (`/ask text: …` says `…`); its replies go to its channel.
pub fn command_inbound(interaction: &Value) -> Result<Inbound, String> {
    let id = interaction["id"]
        .as_str()
        .ok_or("the interaction has no id")?;
    let channel_id = interaction["channel_id"]
        .as_str()
        .or_else(|| interaction["channel"]["id"].as_str())
        .ok_or("the command has no channel")?;
    let user = interaction_user(interaction).ok_or("the command has no user")?;
    let mut parts = Vec::new();
    collect_options(&interaction["data"]["options"], &mut parts);
    let text = parts.join(" ").trim().to_string();
    if text.is_empty() {
        let name = interaction["data"]["name"].as_str().unwrap_or("?");
        return Err(format!("the command /{name} says nothing"));
    }
    let target = Target {
        chat: channel_id.to_string(),
        ..Target::default()
    };
    let guild = interaction["guild_id"].as_str().map(str::to_string);
    Ok(Inbound::new(
        InboundKey::new(CHANNEL, format!("interaction:{id}")),
        incoming(&user, guild, channel_id, text),
        DeliveryRoute {
            channel: CHANNEL.into(),
            target: target.encode(),
        },
    ))
}

/// Who made an interaction: `member.user` in a guild, `user` in a DM.
pub fn interaction_user(interaction: &Value) -> Option<User> {
    let user = if interaction["member"]["user"].is_object() {
        &interaction["member"]["user"]
    } else {
        &interaction["user"]
    };
    serde_json::from_value(user.clone()).ok()
}

/// The string values of a command's options, sub-commands' options included, in order.
fn collect_options(options: &Value, into: &mut Vec<String>) {
    for option in options.as_array().into_iter().flatten() {
        match &option["value"] {
            Value::String(text) => into.push(text.clone()),
            Value::Null => {}
            other => into.push(other.to_string()),
        }
        collect_options(&option["options"], into);
    }
}

fn incoming(
    author: &User,
    guild_id: Option<String>,
    channel_id: &str,
    text: String,
) -> IncomingMessage {
    let chat_kind = keel_platform::ChatKind::of(guild_id.is_none(), false);
    IncomingMessage {
        platform: CHANNEL.into(),
        platform_user_id: author.id.clone(),
        platform_username: author.username.clone(),
        platform_server_id: guild_id,
        platform_channel_id: channel_id.to_string(),
        platform_thread_id: None,
        text,
        source: Default::default(),
        attachments: Vec::new(),
        chat_kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(value: Value) -> Message {
        serde_json::from_value(value).unwrap()
    }

    fn guild(content: &str, mentions: Value) -> Message {
        message(json!({"id": "9", "channel_id": "20", "guild_id": "30",
            "author": {"id": "1", "username": "ann"}, "content": content, "mentions": mentions}))
    }

    #[test]
    fn a_guild_message_counts_only_when_it_mentions_keel() {
        let inbound = inbound_of(
            &guild("<@7> hello", json!([{"id": "7"}])),
            Some("7"),
            Respond::Mentions,
        )
        .unwrap();
        assert_eq!(inbound.message.text, "hello");
        assert_eq!(inbound.message.platform_server_id.as_deref(), Some("30"));
        assert_eq!(inbound.message.platform_channel_id, "20");
        assert_eq!(inbound.key, InboundKey::new("discord", "9"));
        let target = Target::decode(&inbound.route.unwrap().target).unwrap();
        assert_eq!(
            (target.chat.as_str(), target.reply_to.as_deref()),
            ("20", Some("9"))
        );
        assert_eq!(
            inbound_of(&guild("hello all", json!([])), Some("7"), Respond::Mentions).unwrap_err(),
            Skipped::NotForKeel
        );
        assert!(inbound_of(&guild("hello all", json!([])), Some("7"), Respond::All).is_ok());
        assert_eq!(
            inbound_of(
                &guild("<@7>", json!([{"id": "7"}])),
                Some("7"),
                Respond::Mentions
            )
            .unwrap_err(),
            Skipped::Empty
        );
    }

    #[test]
    fn dms_always_count_bots_never() {
        let dm =
            message(json!({"id": "9", "channel_id": "20", "author": {"id": "1"}, "content": "hi"}));
        assert!(inbound_of(&dm, Some("7"), Respond::Mentions).is_ok());
        let own =
            message(json!({"id": "9", "channel_id": "20", "author": {"id": "7"}, "content": "hi"}));
        assert_eq!(
            inbound_of(&own, Some("7"), Respond::All).unwrap_err(),
            Skipped::Bot
        );
        let bot = message(
            json!({"id": "9", "channel_id": "20", "author": {"id": "8", "bot": true}, "content": "hi"}),
        );
        assert_eq!(
            inbound_of(&bot, Some("7"), Respond::All).unwrap_err(),
            Skipped::Bot
        );
    }

    #[test]
    fn a_reply_to_keel_counts_in_a_guild() {
        let reply = message(json!({"id": "9", "channel_id": "20", "guild_id": "30",
            "author": {"id": "1"}, "content": "and then?",
            "referenced_message": {"author": {"id": "7"}}}));
        assert!(inbound_of(&reply, Some("7"), Respond::Mentions).is_ok());
    }

    #[test]
    fn a_slash_command_says_its_options() {
        let interaction = json!({"id": "55", "type": 2, "channel_id": "20", "guild_id": "30",
            "member": {"user": {"id": "1", "username": "ann"}},
            "data": {"name": "ask", "options": [{"name": "text", "type": 3, "value": "what time is it"}]}});
        let inbound = command_inbound(&interaction).unwrap();
        assert_eq!(inbound.key, InboundKey::new("discord", "interaction:55"));
        assert_eq!(inbound.message.text, "what time is it");
        assert_eq!(inbound.message.platform_user_id, "1");
        let empty = json!({"id": "56", "type": 2, "channel_id": "20", "user": {"id": "1"}, "data": {"name": "ask"}});
        assert!(command_inbound(&empty).unwrap_err().contains("/ask"));
    }
}
