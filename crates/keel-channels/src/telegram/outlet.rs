//! The `telegram` outlet: a reply as `sendMessage` parts in HTML, the first answering the
//! message it replies to (in a group), in the target's forum topic, its buttons as an inline
//! keyboard under the last part. A part whose HTML Telegram refuses is sent again as plain
//! text. When a later part fails, the parts sent already are remembered, so the courier's next
//! attempt sends only the rest: a reply is never shown twice for a part that failed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::CHANNEL;
use super::client::Client;
use super::draft::Drafts;
use super::html;
use crate::outlet::{DeliveryError, Outlet, Reply, Target};

/// Sends replies to Telegram chats.
pub struct TelegramOutlet {
    client: Arc<Client>,
    /// The drafts of streamed answers, edited into the answers they were.
    drafts: Arc<Drafts>,
    /// The message ids of the parts of a reply sent already, by (target, text), while the rest
    /// is still to send.
    sent: Mutex<HashMap<(String, String), Vec<String>>>,
}

/// What `sendMessage` answers, as far as keel reads it.
#[derive(Deserialize)]
pub struct Sent {
    /// The message's id in its chat.
    pub message_id: i64,
}

impl TelegramOutlet {
    /// An outlet sending through `client`, finishing the drafts of `drafts`.
    pub fn new(client: Arc<Client>, drafts: Arc<Drafts>) -> Self {
        TelegramOutlet {
            client,
            drafts,
            sent: Mutex::new(HashMap::new()),
        }
    }

    fn sent(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Vec<String>>> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends one part; HTML refused is sent again as plain text.
    async fn send_part(&self, mut body: Value) -> Result<String, DeliveryError> {
        let sent = match self.client.call::<Sent>("sendMessage", &body).await {
            Err(error) if error.is_bad_html() => {
                tracing::warn!(channel = CHANNEL, %error, "Telegram refused a reply's HTML; sent as plain text");
                let text = html::plain(body["text"].as_str().unwrap_or(""));
                body["text"] = json!(text);
                if let Some(body) = body.as_object_mut() {
                    body.remove("parse_mode");
                }
                self.client.call::<Sent>("sendMessage", &body).await
            }
            other => other,
        }?;
        Ok(sent.message_id.to_string())
    }

    /// Edits the draft `message_id` into `part`; false when Telegram refuses (the part is then
    /// sent as a new message). HTML refused is tried again as plain text.
    async fn edit_part(&self, message_id: i64, body: &Value) -> bool {
        let mut body = json!({"chat_id": body["chat_id"], "message_id": message_id,
            "text": body["text"], "parse_mode": "HTML",
            "link_preview_options": {"is_disabled": true}});
        let mut result = self.client.call::<Value>("editMessageText", &body).await;
        if result.as_ref().is_err_and(|error| error.is_bad_html()) {
            body["text"] = json!(html::plain(body["text"].as_str().unwrap_or("")));
            if let Some(body) = body.as_object_mut() {
                body.remove("parse_mode");
            }
            result = self.client.call::<Value>("editMessageText", &body).await;
        }
        match result {
            Ok(_) => true,
            Err(error) if error.is_unchanged() => true,
            Err(error) => {
                tracing::info!(channel = CHANNEL, %error, "a streamed draft cannot be edited into its answer; sent anew");
                false
            }
        }
    }
}

/// A chat id as Telegram takes it: a number, or a `@channel` name.
pub fn chat_id(chat: &str) -> Value {
    chat.parse::<i64>()
        .map_or_else(|_| json!(chat), |id| json!(id))
}

/// A forum topic's id as Telegram takes it.
pub fn thread_id(target: &Target) -> Option<i64> {
    target.thread.as_deref().and_then(|t| t.parse().ok())
}

#[async_trait]
impl Outlet for TelegramOutlet {
    fn channel(&self) -> &str {
        CHANNEL
    }

    async fn deliver(&self, target_text: &str, reply: &Reply) -> Result<String, DeliveryError> {
        let target = Target::decode(target_text)?;
        let mut parts = crate::format::telegram_chunks(reply.text());
        if parts.iter().all(|part| part.trim().is_empty()) {
            // Telegram refuses an empty message.
            parts = vec!["…".to_string()];
        }
        let key = (target_text.to_string(), reply.text().to_string());
        let mut ids = self.sent().remove(&key).unwrap_or_default();
        // A streamed answer's draft becomes its first part (buttons go only on new messages).
        let draft = self.drafts.take(target_text).await;
        let last = parts.len() - 1;
        for (n, part) in parts.iter().enumerate().skip(ids.len()) {
            let mut body = json!({
                "chat_id": chat_id(&target.chat),
                "text": part,
                "parse_mode": "HTML",
                "link_preview_options": {"is_disabled": true},
            });
            if let Some(thread) = thread_id(&target) {
                body["message_thread_id"] = json!(thread);
            }
            if n == 0
                && let Some(message_id) = target
                    .reply_to
                    .as_deref()
                    .and_then(|m| m.parse::<i64>().ok())
            {
                body["reply_parameters"] =
                    json!({"message_id": message_id, "allow_sending_without_reply": true});
            }
            if n == last && !reply.buttons().is_empty() {
                let rows: Vec<Value> = reply
                    .buttons()
                    .iter()
                    .map(|button| json!([{"text": button.label, "callback_data": button.data}]))
                    .collect();
                body["reply_markup"] = json!({ "inline_keyboard": rows });
            }
            if n == 0
                && reply.buttons().is_empty()
                && matches!(reply, Reply::Answer { .. })
                && let Some(message_id) = draft
                && self.edit_part(message_id, &body).await
            {
                ids.push(message_id.to_string());
                continue;
            }
            match self.send_part(body).await {
                Ok(id) => ids.push(id),
                Err(error) => {
                    if !ids.is_empty() && !matches!(error, DeliveryError::Permanent(_)) {
                        self.sent().insert(key, ids);
                    }
                    return Err(error);
                }
            }
        }
        Ok(ids.join(","))
    }
}
