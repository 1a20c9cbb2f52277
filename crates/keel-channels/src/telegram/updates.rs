//! What an update is: a message for keel (with its files to fetch), a button press, something
//! ignored on purpose (an edit, a group message not addressed to the bot), or something keel
//! cannot read (logged and skipped). Pure: the poller fetches files and hands the result on.

use keel_platform::{IncomingMessage, Source};
use serde::Deserialize;
use serde_json::Value;

use super::{CHANNEL, GroupMode};
use crate::intake::label_untrusted;
use crate::outlet::Target;

/// The bot itself, as `getMe` describes it.
#[derive(Clone, Debug, Deserialize)]
pub struct Bot {
    /// Its user id.
    pub id: i64,
    /// Its username (without `@`).
    #[serde(default)]
    pub username: Option<String>,
}

/// A file a message carries, to fetch with `getFile`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRef {
    /// Telegram's id of the file.
    pub file_id: String,
    /// Its name.
    pub name: String,
    /// Its media type, when Telegram says.
    pub media_type: Option<String>,
    /// Its size in bytes, when Telegram says.
    pub size: Option<u64>,
}

/// A message for keel.
#[derive(Clone, Debug, PartialEq)]
pub struct ForKeel {
    /// The message (its attachments still to fetch).
    pub message: IncomingMessage,
    /// Where its replies go.
    pub target: Target,
    /// Its files.
    pub files: Vec<FileRef>,
}

/// A button press.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Press {
    /// The callback query's id (to answer it, and the press's key).
    pub id: String,
    /// Who pressed.
    pub from: String,
    /// The button's data; `None` when the query has none (a game's).
    pub data: Option<String>,
}

/// What an update is.
#[derive(Clone, Debug, PartialEq)]
pub enum Update {
    /// A message for keel.
    Message(Box<ForKeel>),
    /// A button press.
    Press(Press),
    /// Nothing for keel; the reason, for a debug line.
    Ignored(String),
    /// An update keel cannot read; the reason, for a warning.
    Malformed(String),
}

#[derive(Deserialize)]
struct Message {
    message_id: i64,
    from: Option<User>,
    chat: Chat,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    caption: Option<String>,
    #[serde(default)]
    entities: Vec<Entity>,
    #[serde(default)]
    caption_entities: Vec<Entity>,
    #[serde(default)]
    message_thread_id: Option<i64>,
    #[serde(default)]
    is_topic_message: bool,
    #[serde(default)]
    reply_to_message: Option<Box<Replied>>,
    #[serde(default)]
    document: Option<Document>,
    #[serde(default)]
    photo: Vec<PhotoSize>,
    #[serde(default)]
    forward_origin: Option<Value>,
    #[serde(default)]
    forward_from: Option<Value>,
    #[serde(default)]
    forward_from_chat: Option<Value>,
    #[serde(default)]
    forward_sender_name: Option<String>,
}

#[derive(Deserialize)]
struct Replied {
    #[serde(default)]
    from: Option<User>,
}

#[derive(Deserialize)]
struct User {
    id: i64,
    #[serde(default)]
    is_bot: bool,
    #[serde(default)]
    username: Option<String>,
}

#[derive(Deserialize)]
struct Chat {
    id: i64,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    is_forum: bool,
}

#[derive(Deserialize)]
struct Entity {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    user: Option<User>,
}

#[derive(Deserialize)]
struct Document {
    file_id: String,
    #[serde(default)]
    file_name: Option<String>,
    #[serde(default)]
    mime_type: Option<String>,
    #[serde(default)]
    file_size: Option<u64>,
}

#[derive(Deserialize)]
struct PhotoSize {
    file_id: String,
    #[serde(default)]
    width: u64,
    #[serde(default)]
    height: u64,
    #[serde(default)]
    file_size: Option<u64>,
}

#[derive(Deserialize)]
struct CallbackQuery {
    id: String,
    from: User,
    #[serde(default)]
    data: Option<String>,
}

/// Update kinds keel receives but does nothing with.
const IGNORED: &[&str] = &[
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "business_connection",
    "business_message",
    "edited_business_message",
    "deleted_business_messages",
    "message_reaction",
    "message_reaction_count",
    "inline_query",
    "chosen_inline_result",
    "shipping_query",
    "pre_checkout_query",
    "purchased_paid_media",
    "poll",
    "poll_answer",
    "my_chat_member",
    "chat_member",
    "chat_join_request",
    "chat_boost",
    "removed_chat_boost",
];

/// Reads `update` (its `update_id` read already) for `bot` under `mode`.
pub fn classify(update: &Value, bot: &Bot, mode: GroupMode) -> Update {
    if let Some(message) = update.get("message") {
        return match serde_json::from_value::<Message>(message.clone()) {
            Ok(message) => read_message(message, bot, mode),
            Err(e) => Update::Malformed(format!("a message keel cannot read: {e}")),
        };
    }
    if let Some(query) = update.get("callback_query") {
        return match serde_json::from_value::<CallbackQuery>(query.clone()) {
            Ok(query) => Update::Press(Press {
                id: query.id,
                from: query.from.id.to_string(),
                data: query.data,
            }),
            Err(e) => Update::Malformed(format!("a button press keel cannot read: {e}")),
        };
    }
    let keys: Vec<&str> = update
        .as_object()
        .map(|o| {
            o.keys()
                .map(String::as_str)
                .filter(|k| *k != "update_id")
                .collect()
        })
        .unwrap_or_default();
    match keys.iter().find(|key| IGNORED.contains(key)) {
        Some(kind) => Update::Ignored(format!("a {kind} update")),
        None => Update::Malformed(format!(
            "an update of an unknown shape (fields: {})",
            keys.join(", ")
        )),
    }
}

fn read_message(message: Message, bot: &Bot, mode: GroupMode) -> Update {
    let Some(from) = message.from else {
        return Update::Ignored("a message without a sender (an anonymous admin)".into());
    };
    if from.is_bot {
        return Update::Ignored("a message from a bot".into());
    }
    let private = message.chat.kind == "private";
    let (text, entities) = match (&message.text, &message.caption) {
        (Some(text), _) => (text.clone(), &message.entities),
        (None, Some(caption)) => (caption.clone(), &message.caption_entities),
        (None, None) => (String::new(), &message.entities),
    };
    let mention = bot.username.as_deref().map(|name| format!("@{name}"));
    let mentioned = mention
        .as_deref()
        .is_some_and(|mention| find_ci(&text, mention).is_some())
        || entities.iter().any(|entity| {
            entity.kind == "text_mention" && entity.user.as_ref().is_some_and(|u| u.id == bot.id)
        });
    let replied_to_bot = message
        .reply_to_message
        .as_ref()
        .and_then(|replied| replied.from.as_ref())
        .is_some_and(|user| user.id == bot.id);
    if !private && mode == GroupMode::Mentions && !mentioned && !replied_to_bot {
        return Update::Ignored("a group message not addressed to the bot".into());
    }
    let mut text = match &mention {
        Some(mention) => strip_ci(&text, mention),
        None => text,
    };
    let files = files_of(&message.document, &message.photo, message.message_id);
    if text.trim().is_empty() && files.is_empty() {
        return Update::Ignored("a message without text or files".into());
    }
    if message.forward_origin.is_some()
        || message.forward_from.is_some()
        || message.forward_from_chat.is_some()
        || message.forward_sender_name.is_some()
    {
        text = label_untrusted("a forwarded message", &text);
    }
    let thread = (message.chat.is_forum && message.is_topic_message)
        .then_some(message.message_thread_id)
        .flatten()
        .map(|id| id.to_string());
    let chat = message.chat.id.to_string();
    Update::Message(Box::new(ForKeel {
        message: IncomingMessage {
            platform: CHANNEL.into(),
            platform_user_id: from.id.to_string(),
            platform_username: from.username,
            platform_server_id: None,
            platform_channel_id: chat.clone(),
            platform_thread_id: thread.clone(),
            text,
            source: Source::Chat,
            attachments: Vec::new(),
            chat_kind: keel_platform::ChatKind::of(private, thread.is_some()),
        },
        target: Target {
            chat,
            thread,
            reply_to: (!private).then(|| message.message_id.to_string()),
            ..Target::default()
        },
        files,
    }))
}

/// A message's files: its document, and the largest size of its photo.
fn files_of(document: &Option<Document>, photo: &[PhotoSize], message_id: i64) -> Vec<FileRef> {
    let mut files = Vec::new();
    if let Some(document) = document {
        files.push(FileRef {
            file_id: document.file_id.clone(),
            name: document
                .file_name
                .clone()
                .filter(|name| !name.trim().is_empty())
                .unwrap_or_else(|| format!("document-{message_id}")),
            media_type: document.mime_type.clone(),
            size: document.file_size,
        });
    }
    if let Some(largest) = photo
        .iter()
        .max_by_key(|size| (size.file_size.unwrap_or(0), size.width * size.height))
    {
        files.push(FileRef {
            file_id: largest.file_id.clone(),
            name: format!("photo-{message_id}.jpg"),
            media_type: Some("image/jpeg".into()),
            size: largest.file_size,
        });
    }
    files
}

/// Where `needle` (ASCII, as a mention is) starts in `text`, ignoring ASCII case.
fn find_ci(text: &str, needle: &str) -> Option<usize> {
    let (hay, needle) = (text.as_bytes(), needle.as_bytes());
    (0..=hay.len().checked_sub(needle.len())?).find(|&at| {
        hay[at..at + needle.len()].eq_ignore_ascii_case(needle)
            && !hay
                .get(at + needle.len())
                .is_some_and(|next| next.is_ascii_alphanumeric() || *next == b'_')
    })
}

/// `text` without `mention` (every occurrence), its spaces tidied.
fn strip_ci(text: &str, mention: &str) -> String {
    let mut text = text.to_string();
    while let Some(at) = find_ci(&text, mention) {
        text.replace_range(at..at + mention.len(), "");
    }
    text.split(' ')
        .filter(|word| !word.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .trim()
        .to_string()
}

#[cfg(test)]
#[path = "updates_tests.rs"]
mod tests;
