//! Slack's Events API payloads: what a request is (a URL check, an event, something else) and
//! which messages keel answers.
//!
//! A message is answered when it is a person's (no bot, no edit, no other subtype than a file
//! share), and it is in a DM, or mentions the bot, or is in a thread keel is in, or the channel
//! answers everything (`respond = "all"`). In a channel each top-level message starts a thread
//! (keel answers in it, and the thread is the conversation); in a DM keel answers top-level
//! messages top-level (the DM is the conversation) and threads in their thread.

use serde::Deserialize;
use serde_json::Value;

/// When keel answers in channels (DMs are always answered).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Respond {
    /// When mentioned, or in a thread keel is in.
    #[default]
    Mentions,
    /// Every message of the channels the bot is in.
    All,
}

/// What an Events API request asks.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// `url_verification`: answer the challenge.
    Challenge(String),
    /// An `event_callback` carrying a message keel may answer.
    Message(Message),
    /// An event keel ignores, and why (logged).
    Ignored(String),
}

/// A person's message, as read from an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The envelope's `event_id`.
    pub event_id: String,
    /// The workspace (`team_id`).
    pub team: String,
    /// The sender's user id.
    pub user: String,
    /// The channel (a `C…`, `G…` or `D…` id).
    pub channel: String,
    /// Whether the channel is a DM (`channel_type` `im`).
    pub direct: bool,
    /// The message's `ts`.
    pub ts: String,
    /// The thread it is in (`thread_ts`), if any.
    pub thread_ts: Option<String>,
    /// The text, as Slack sent it (mrkdwn, `&amp;` escaped).
    pub text: String,
    /// Whether the event is an `app_mention`.
    pub mention_event: bool,
}

impl Message {
    /// The thread keel answers in: the message's thread, or (outside DMs) the thread the
    /// message starts.
    pub fn reply_thread(&self) -> Option<String> {
        match (&self.thread_ts, self.direct) {
            (Some(thread), _) => Some(thread.clone()),
            (None, true) => None,
            (None, false) => Some(self.ts.clone()),
        }
    }

    /// Whether the text mentions `bot` (`<@BOT>` or `<@BOT|name>`), or the event says so.
    pub fn mentions(&self, bot: Option<&str>) -> bool {
        self.mention_event
            || bot.is_some_and(|bot| {
                self.text.contains(&format!("<@{bot}>")) || self.text.contains(&format!("<@{bot}|"))
            })
    }

    /// The text for the model: the bot's mention taken out, Slack's escapes undone.
    pub fn clean_text(&self, bot: Option<&str>) -> String {
        let mut text = self.text.clone();
        if let Some(bot) = bot {
            text = text.replace(&format!("<@{bot}>"), "");
            while let Some(start) = text.find(&format!("<@{bot}|")) {
                let Some(end) = text[start..].find('>') else {
                    break;
                };
                text.replace_range(start..start + end + 1, "");
            }
        }
        text.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
            .trim()
            .to_string()
    }
}

/// Reads an Events API body (already verified); `Err` when it is not the JSON Slack sends.
pub fn parse(body: &[u8], bot: Option<&str>) -> Result<Request, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let str_of = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    match value.get("type").and_then(Value::as_str) {
        Some("url_verification") => str_of(&value, "challenge")
            .map(Request::Challenge)
            .ok_or_else(|| "a url_verification without a challenge".to_string()),
        Some("event_callback") => {
            let event = value
                .get("event")
                .filter(|e| e.is_object())
                .ok_or("an event_callback without an event")?;
            let event_id =
                str_of(&value, "event_id").ok_or("an event_callback without event_id")?;
            let kind = str_of(event, "type").unwrap_or_default();
            if kind != "message" && kind != "app_mention" {
                return Ok(Request::Ignored(format!("an event of type `{kind}`")));
            }
            if event.get("bot_id").is_some_and(|b| !b.is_null()) {
                return Ok(Request::Ignored("a bot's message".into()));
            }
            if let Some(subtype) = str_of(event, "subtype")
                && subtype != "file_share"
            {
                return Ok(Request::Ignored(format!(
                    "a message of subtype `{subtype}`"
                )));
            }
            let (Some(user), Some(channel), Some(ts)) = (
                str_of(event, "user"),
                str_of(event, "channel"),
                str_of(event, "ts"),
            ) else {
                return Err(format!("a `{kind}` event without user, channel or ts"));
            };
            if bot == Some(user.as_str()) {
                return Ok(Request::Ignored("the bot's own message".into()));
            }
            let direct = str_of(event, "channel_type").as_deref() == Some("im")
                || (kind == "message" && channel.starts_with('D'));
            Ok(Request::Message(Message {
                event_id,
                team: str_of(&value, "team_id")
                    .or_else(|| str_of(event, "team"))
                    .unwrap_or_default(),
                user,
                channel,
                direct,
                ts,
                thread_ts: str_of(event, "thread_ts"),
                text: str_of(event, "text").unwrap_or_default(),
                mention_event: kind == "app_mention",
            }))
        }
        Some(other) => Ok(Request::Ignored(format!("a request of type `{other}`"))),
        None => Err("a body without a type".into()),
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
