//! The `discord` outlet: a reply posted with `POST /channels/{chat}/messages`, split into
//! messages of at most 2,000 characters (code fences closed and reopened across a cut), the
//! first quoting the message answered, mentions never pinging anyone, and buttons (an
//! approval's decisions, a question's choices) as action rows of up to five under the last
//! part. The receipt is the message ids, comma-joined.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::CHANNEL;
use super::rest::Rest;
use crate::outlet::{Button, DeliveryError, Outlet, Reply, Target};

/// Discord's limit on a message's content, in characters.
pub const MAX_CONTENT: usize = 2_000;

/// Discord's limit on a button's label, in characters.
const MAX_LABEL: usize = 80;

/// Sends replies through Discord's REST API.
pub struct DiscordOutlet {
    rest: Rest,
}

impl DiscordOutlet {
    /// An outlet over `rest`.
    pub fn new(rest: Rest) -> Self {
        DiscordOutlet { rest }
    }
}

#[async_trait]
impl Outlet for DiscordOutlet {
    fn channel(&self) -> &str {
        CHANNEL
    }

    async fn deliver(&self, target: &str, reply: &Reply) -> Result<String, DeliveryError> {
        let target = Target::decode(target)?;
        let bodies = bodies(&target, reply);
        let mut ids = Vec::with_capacity(bodies.len());
        for body in &bodies {
            ids.push(self.rest.post_message(&target.chat, body).await?);
        }
        Ok(ids.join(","))
    }
}

/// The messages `reply` is posted as, in order.
pub fn bodies(target: &Target, reply: &Reply) -> Vec<Value> {
    let mut parts = chunks(reply.text());
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

/// `text` in parts of at most [`MAX_CONTENT`] characters, cut at line ends where it can; a
/// part that cuts a fenced code block closes it, and the next reopens it with its language.
/// (keel's shared formatter, `crate::format`, takes this over when it has Discord's.)
pub fn chunks(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut fence: Option<String> = None;
    let room = |fence: &Option<String>| MAX_CONTENT - if fence.is_some() { 4 } else { 0 };
    for line in text.split_inclusive('\n') {
        let mut rest = line;
        while !rest.is_empty() {
            let used = current.chars().count();
            let space = room(&fence).saturating_sub(used);
            let length = rest.chars().count();
            if length <= space {
                current.push_str(rest);
                break;
            }
            if used > 0 && length <= room(&fence) - opening(&fence).chars().count() {
                // The line fits whole in the next part.
                close(&mut parts, &mut current, &fence);
                continue;
            }
            // A line longer than a part: cut it.
            let cut: String = rest.chars().take(space).collect();
            current.push_str(&cut);
            rest = &rest[cut.len()..];
            close(&mut parts, &mut current, &fence);
        }
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                // The language only (a long info string would not fit a reopened part).
                None => Some(info.trim().chars().take(20).collect()),
            };
        }
    }
    if !current.trim().is_empty() {
        parts.push(current);
    }
    parts
}

/// The line that reopens `fence` in a new part.
fn opening(fence: &Option<String>) -> String {
    fence
        .as_ref()
        .map(|info| format!("```{info}\n"))
        .unwrap_or_default()
}

/// Ends the current part (closing an open fence) and starts the next (reopening it).
fn close(parts: &mut Vec<String>, current: &mut String, fence: &Option<String>) {
    let mut part = std::mem::take(current);
    if fence.is_some() {
        if !part.ends_with('\n') {
            part.push('\n');
        }
        part.push_str("```");
    }
    if !part.trim().is_empty() {
        parts.push(part);
    }
    *current = opening(fence);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_one_part() {
        assert_eq!(chunks("hello"), vec!["hello".to_string()]);
    }

    #[test]
    fn long_text_is_cut_at_lines_within_the_limit() {
        let text = (0..400)
            .map(|n| format!("line {n} of the answer\n"))
            .collect::<String>();
        let parts = chunks(&text);
        assert!(parts.len() >= 4, "{}", parts.len());
        assert!(parts.iter().all(|p| p.chars().count() <= MAX_CONTENT));
        assert_eq!(parts.concat(), text);
        let long_line = "é".repeat(5_000);
        let parts = chunks(&long_line);
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| p.chars().count() <= MAX_CONTENT));
    }

    #[test]
    fn a_cut_code_block_is_closed_and_reopened() {
        let code = (0..300)
            .map(|n| format!("let x{n} = {n};\n"))
            .collect::<String>();
        let text = format!("Here:\n```rust\n{code}```\nDone.");
        let parts = chunks(&text);
        assert!(parts.len() >= 2);
        for part in &parts {
            assert!(part.chars().count() <= MAX_CONTENT);
            assert_eq!(part.matches("```").count() % 2, 0, "unbalanced: {part}");
        }
        assert!(parts[1].starts_with("```rust\n"));
        assert!(parts.last().unwrap().ends_with("Done."));
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
