//! The `discord` outlet: a reply posted with `POST /channels/{chat}/messages`, split into
//! messages of at most 2,000 characters by [`crate::format::discord_chunks`], the
//! first quoting the message answered, mentions never pinging anyone, and buttons (an
//! approval's decisions, a question's choices) as action rows of up to five under the last
//! part. The receipt is the message ids, comma-joined.
//!
//! A reply of several parts keeps the ids of the parts posted so far in the channel's state
//! (`discord/parts`, by a digest of target and reply) until its last part is posted: Discord
//! limits a channel to a few messages every few seconds, so a long reply often meets a 429
//! halfway, and the courier's next attempt (or the next daemon's, after a crash) posts only the
//! parts not posted yet.

use std::sync::Arc;

use async_trait::async_trait;
use keel_platform::DaemonStore;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::CHANNEL;
use super::rest::Rest;
use crate::outlet::{Button, DeliveryError, Outlet, Reply, Target};

/// Discord's limit on a message's content, in characters.
pub const MAX_CONTENT: usize = 2_000;

/// Discord's limit on a button's label, in characters.
const MAX_LABEL: usize = 80;

/// Where the parts of a reply being posted are kept.
const PARTS: &str = "discord/parts";

/// Sends replies through Discord's REST API.
pub struct DiscordOutlet {
    rest: Rest,
    store: Arc<dyn DaemonStore>,
}

impl DiscordOutlet {
    /// An outlet over `rest`, keeping a long reply's progress in `store`.
    pub fn new(rest: Rest, store: Arc<dyn DaemonStore>) -> Self {
        DiscordOutlet { rest, store }
    }

    /// The parts of the reply `key` posted before (their ids).
    async fn posted(&self, key: &str) -> Vec<String> {
        match self.store.channel_state(PARTS, key).await {
            Ok(Some(ids)) => ids
                .split(',')
                .filter(|id| !id.is_empty())
                .map(str::to_string)
                .collect(),
            Ok(None) => Vec::new(),
            Err(error) => {
                tracing::warn!(channel = CHANNEL, %error, "cannot read a long reply's progress");
                Vec::new()
            }
        }
    }

    async fn keep(&self, key: &str, ids: &[String]) {
        let at = chrono::Utc::now();
        if let Err(error) = self
            .store
            .set_channel_state(PARTS, key, &ids.join(","), at)
            .await
        {
            tracing::warn!(channel = CHANNEL, %error, "cannot keep a long reply's progress");
        }
    }
}

/// A reply's key for its progress: a digest of where it goes and what it says.
fn progress_key(target: &str, bodies: &[Value]) -> String {
    let mut digest = Sha256::new();
    digest.update(target.as_bytes());
    for body in bodies {
        digest.update([0]);
        digest.update(body.to_string().as_bytes());
    }
    digest
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[async_trait]
impl Outlet for DiscordOutlet {
    fn channel(&self) -> &str {
        CHANNEL
    }

    async fn deliver(&self, target: &str, reply: &Reply) -> Result<String, DeliveryError> {
        let route = target;
        let target = Target::decode(route)?;
        let bodies = bodies(&target, reply);
        if let [body] = bodies.as_slice() {
            return self.rest.post_message(&target.chat, body).await;
        }
        let key = progress_key(route, &bodies);
        let mut ids = self.posted(&key).await;
        for body in bodies.iter().skip(ids.len()) {
            ids.push(self.rest.post_message(&target.chat, body).await?);
            self.keep(&key, &ids).await;
        }
        // Done: the same reply again (a later one, word for word) starts anew.
        self.keep(&key, &[]).await;
        Ok(ids.join(","))
    }
}

/// The messages `reply` is posted as, in order.
pub fn bodies(target: &Target, reply: &Reply) -> Vec<Value> {
    let mut parts = crate::format::discord_chunks(reply.text());
    if parts.is_empty() {
        parts.push("…".to_string());
    }
    let last = parts.len() - 1;
    parts
        .into_iter()
        .enumerate()
        .map(|(n, content)| {
            let mut body = json!({"content": content, "allowed_mentions": {"parse": []}});
            if n == 0
                && let Some(answered) = &target.reply_to
            {
                body["message_reference"] =
                    json!({"message_id": answered, "fail_if_not_exists": false});
            }
            if n == last && !reply.buttons().is_empty() {
                body["components"] = components(reply.buttons());
            }
            body
        })
        .collect()
}

/// Buttons as action rows of up to five (style 1 primary, 4 danger), at most five rows.
fn components(buttons: &[Button]) -> Value {
    let rows: Vec<Value> = buttons
        .chunks(5)
        .take(5)
        .map(|row| {
            let row: Vec<Value> = row
                .iter()
                .map(|button| {
                    json!({
                        "type": 2,
                        "style": if button.danger { 4 } else { 1 },
                        "label": button.label.chars().take(MAX_LABEL).collect::<String>(),
                        "custom_id": button.data,
                    })
                })
                .collect();
            json!({"type": 1, "components": row})
        })
        .collect();
    Value::Array(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reply_is_posted_in_parts_within_the_limit() {
        let text = (0..400)
            .map(|n| format!("line {n} of the answer\n"))
            .collect::<String>();
        let bodies = bodies(&Target::default(), &Reply::Answer { text });
        assert!(bodies.len() >= 4, "{}", bodies.len());
        for body in &bodies {
            assert!(body["content"].as_str().unwrap().chars().count() <= MAX_CONTENT);
            assert!(body.get("message_reference").is_none());
        }
    }

    #[test]
    fn buttons_go_under_the_last_part_and_the_first_quotes() {
        let target = Target {
            chat: "1".into(),
            reply_to: Some("9".into()),
            ..Target::default()
        };
        let buttons: Vec<Button> = (0..7)
            .map(|n| Button {
                label: format!("b{n}"),
                data: format!("3:c{n}"),
                danger: n == 6,
            })
            .collect();
        let reply = Reply::Question {
            text: "x".repeat(2_500),
            buttons,
        };
        let bodies = bodies(&target, &reply);
        assert_eq!(bodies.len(), 2);
        assert_eq!(bodies[0]["message_reference"]["message_id"], "9");
        assert!(bodies[1].get("message_reference").is_none());
        assert!(bodies[0].get("components").is_none());
        let rows = bodies[1]["components"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["components"].as_array().unwrap().len(), 5);
        assert_eq!(rows[1]["components"][1]["style"], 4);
        assert_eq!(rows[1]["components"][1]["custom_id"], "3:c6");
        assert_eq!(bodies[0]["allowed_mentions"]["parse"], json!([]));
    }
}
