//! Replies to Slack: `chat.postMessage` in the message's thread, the text in mrkdwn `section`
//! blocks (one message per chunk of [`crate::format::slack_chunks`], a plain `text` fallback),
//! buttons in an `actions` block under the last chunk.
//!
//! A reply split in several messages that fails part-way (a 429 or a 5xx on its third message)
//! is tried again by the courier; the `ts`s of the messages already posted are kept in the
//! channel's state (`slack/partial`, by a hash of the target and text) so that the retry posts
//! only the rest, and cleared when the reply is whole.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use keel_platform::DaemonStore;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::format::slack_chunks;
use crate::outlet::{Button, DeliveryError, Outlet, Reply, Target};

/// Slack's limit on a button's label (characters).
const LABEL_LIMIT: usize = 75;
/// Slack's limit on the elements of an `actions` block.
const ACTIONS_LIMIT: usize = 25;

/// Where the messages already posted of a reply split in several are kept.
const PARTIAL: &str = "slack/partial";

/// Sends replies through Slack's Web API.
pub struct SlackOutlet {
    /// The HTTP client.
    pub http: reqwest::Client,
    /// The Web API's base, e.g. `https://slack.com/api`.
    pub api_url: String,
    /// The bot token (`xoxb-…`).
    pub token: String,
    /// The daemon's store, for the progress of replies in several messages.
    pub store: Arc<dyn DaemonStore>,
}

impl SlackOutlet {
    /// Calls Web API `method` with a JSON body; answers the response's JSON when `ok`.
    pub async fn call(&self, method: &str, body: &Value) -> Result<Value, DeliveryError> {
        let url = format!("{}/{method}", self.api_url.trim_end_matches('/'));
        let response = self
            .http
            .post(&url)
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .map_err(|e| DeliveryError::from_transport(&e))?;
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        if !(200..300).contains(&status) {
            return Err(DeliveryError::from_status(
                status,
                retry_after,
                format!("Slack {method} answered HTTP {status}"),
            ));
        }
        let value: Value = response
            .json()
            .await
            .map_err(|e| DeliveryError::Transient(format!("Slack {method} answered badly: {e}")))?;
        if value.get("ok").and_then(Value::as_bool) == Some(true) {
            return Ok(value);
        }
        let error = value
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("unknown_error");
        Err(classify(method, error, retry_after))
    }
}

/// How an `ok: false` answer's `error` classifies.
fn classify(method: &str, error: &str, retry_after: Option<Duration>) -> DeliveryError {
    let what = format!("Slack {method} refused: {error}");
    match error {
        "ratelimited" | "rate_limited" => {
            DeliveryError::RetryAfter(retry_after.unwrap_or(Duration::from_secs(1)), what)
        }
        "internal_error"
        | "fatal_error"
        | "service_unavailable"
        | "request_timeout"
        | "team_added_to_org" => DeliveryError::Transient(what),
        _ => DeliveryError::Permanent(what),
    }
}

/// A `Retry-After` header's seconds.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// The `chat.postMessage` bodies of a reply to `target`: one per chunk, the buttons under the
/// last.
pub fn messages(target: &Target, reply: &Reply) -> Vec<Value> {
    let mut chunks = slack_chunks(reply.text());
    if chunks.is_empty() {
        chunks.push("(no text)".into());
    }
    let last = chunks.len() - 1;
    chunks
        .into_iter()
        .enumerate()
        .map(|(n, chunk)| {
            let mut blocks = vec![json!({
                "type": "section",
                "text": {"type": "mrkdwn", "text": chunk},
            })];
            if n == last && !reply.buttons().is_empty() {
                blocks.push(actions(reply.buttons()));
            }
            let mut body = json!({"channel": target.chat, "text": chunk, "blocks": blocks});
            if let Some(thread) = &target.thread {
                body["thread_ts"] = json!(thread);
            }
            body
        })
        .collect()
}

/// The key of a reply's progress: a hash of its target and text.
fn progress_key(target: &str, reply: &Reply) -> String {
    let mut hash = Sha256::new();
    hash.update(target.as_bytes());
    hash.update([0]);
    hash.update(reply.text().as_bytes());
    hash.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An `actions` block of buttons (their data as `action_id` and `value`).
fn actions(buttons: &[Button]) -> Value {
    let elements: Vec<Value> = buttons
        .iter()
        .take(ACTIONS_LIMIT)
        .map(|button| {
            let label: String = button.label.chars().take(LABEL_LIMIT).collect();
            let mut element = json!({
                "type": "button",
                "text": {"type": "plain_text", "text": label},
                "action_id": button.data,
                "value": button.data,
            });
            if button.danger {
                element["style"] = json!("danger");
            }
            element
        })
        .collect();
    json!({"type": "actions", "elements": elements})
}

#[async_trait]
impl Outlet for SlackOutlet {
    fn channel(&self) -> &str {
        "slack"
    }

    async fn deliver(&self, target: &str, reply: &Reply) -> Result<String, DeliveryError> {
        let bodies = messages(&Target::decode(target)?, reply);
        let several = bodies.len() > 1;
        let key = progress_key(target, reply);
        let stored = |e: keel_core::StoreError| {
            DeliveryError::Transient(format!("cannot keep a reply's progress: {e}"))
        };
        let mut receipts: Vec<String> = if several {
            let kept = self
                .store
                .channel_state(PARTIAL, &key)
                .await
                .map_err(stored)?;
            kept.filter(|k| !k.is_empty())
                .map(|k| k.split(',').map(String::from).collect())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        for body in bodies.iter().skip(receipts.len()) {
            let answer = self.call("chat.postMessage", body).await?;
            let ts = answer.get("ts").and_then(Value::as_str).unwrap_or_default();
            receipts.push(ts.to_string());
            if several {
                let now = chrono::Utc::now();
                let value = if receipts.len() == bodies.len() {
                    String::new()
                } else {
                    receipts.join(",")
                };
                self.store
                    .set_channel_state(PARTIAL, &key, &value, now)
                    .await
                    .map_err(stored)?;
            }
        }
        Ok(receipts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_becomes_section_blocks_in_its_thread() {
        let target = Target {
            chat: "C1".into(),
            thread: Some("10.1".into()),
            ..Target::default()
        };
        let bodies = messages(
            &target,
            &Reply::Answer {
                text: "**hi** <there>".into(),
            },
        );
        assert_eq!(
            bodies,
            vec![
                json!({"channel": "C1", "thread_ts": "10.1", "text": "*hi* &lt;there&gt;",
                "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "*hi* &lt;there&gt;"}}]})
            ]
        );
    }

    #[test]
    fn buttons_go_under_the_last_chunk() {
        let target = Target {
            chat: "D1".into(),
            ..Target::default()
        };
        let button = |label: &str, data: &str, danger| Button {
            label: label.into(),
            data: data.into(),
            danger,
        };
        let reply = Reply::Approval {
            text: "word ".repeat(1000),
            buttons: vec![button("Approve", "7:y", false), button("Deny", "7:n", true)],
        };
        let bodies = messages(&target, &reply);
        assert_eq!(bodies.len(), 2);
        assert!(bodies[0].get("thread_ts").is_none());
        assert_eq!(bodies[0]["blocks"].as_array().unwrap().len(), 1);
        let actions = &bodies[1]["blocks"][1];
        assert_eq!(actions["type"], "actions");
        assert_eq!(actions["elements"][0]["value"], "7:y");
        assert_eq!(actions["elements"][0]["action_id"], "7:y");
        assert!(actions["elements"][0].get("style").is_none());
        assert_eq!(actions["elements"][1]["style"], "danger");
    }

    #[test]
    fn errors_classify() {
        let limited = classify(
            "chat.postMessage",
            "ratelimited",
            Some(Duration::from_secs(3)),
        );
        assert!(matches!(limited, DeliveryError::RetryAfter(d, _) if d == Duration::from_secs(3)));
        for permanent in [
            "channel_not_found",
            "not_in_channel",
            "invalid_auth",
            "whatever",
        ] {
            assert!(matches!(
                classify("m", permanent, None),
                DeliveryError::Permanent(_)
            ));
        }
        assert!(matches!(
            classify("m", "internal_error", None),
            DeliveryError::Transient(_)
        ));
    }
}
