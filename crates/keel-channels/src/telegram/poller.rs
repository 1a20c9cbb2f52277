//! The long poll: `getUpdates` from the offset kept in the store, each update handed on and
//! only then the offset advanced past it (in the store), so nothing is acknowledged before it
//! is recorded. A failing Bot API is polled again with backoff; a store or an intake that is
//! unavailable leaves the update to be polled again. While a run of a chat works, the chat shows
//! "typing" (`sendChatAction`, every four seconds).

use std::sync::Arc;
use std::time::Duration;

use keel_core::AgentState;
use keel_platform::{DeliveryRoute, InboundKey, IncomingAttachment};
use serde_json::{Value, json};

use super::client::{ApiError, Client};
use super::draft::{self, Drafts};
use super::outlet::{chat_id, thread_id};
use super::updates::{Bot, ForKeel, Press, Update, classify};
use super::{CHANNEL, TelegramConfig};
use crate::access::Access;
use crate::intake::{Inbound, IntakeError, Received};
use crate::outlet::Target;
use crate::runtime::Context;

/// The channel-state key of the next update to ask for.
pub const OFFSET: &str = "offset";

/// How often "typing" is sent again while a run works (Telegram shows it for five seconds).
const TYPING_EVERY: Duration = Duration::from_secs(4);
/// The longest a chat is shown "typing" for one run.
const TYPING_AT_MOST: Duration = Duration::from_secs(600);

/// Why an update was left to be polled again.
struct Later(String);

/// The Telegram poller.
pub struct Poller {
    ctx: Context,
    client: Arc<Client>,
    config: TelegramConfig,
    access: Access,
    drafts: Arc<Drafts>,
}

impl Poller {
    /// A poller of `client`'s bot, taking messages under `access`, showing streamed answers
    /// as `drafts` (when `config.stream`).
    pub fn new(
        ctx: Context,
        client: Arc<Client>,
        config: TelegramConfig,
        access: Access,
        drafts: Arc<Drafts>,
    ) -> Self {
        Poller {
            ctx,
            client,
            config,
            access,
            drafts,
        }
    }

    /// Polls until the daemon stops.
    pub async fn run(self) {
        let Some(bot) = self.whoami().await else {
            return;
        };
        tracing::info!(channel = CHANNEL, bot = ?bot.username, "polling Telegram for updates");
        let mut failures = 0u32;
        loop {
            let offset = match self.ctx.state.store.channel_state(CHANNEL, OFFSET).await {
                Ok(offset) => offset.and_then(|o| o.parse::<i64>().ok()).unwrap_or(0),
                Err(error) => {
                    self.ctx
                        .note_error(CHANNEL, &format!("cannot read the offset: {error}"))
                        .await;
                    failures += 1;
                    if self.rest(failures).await {
                        return;
                    }
                    continue;
                }
            };
            let updates = tokio::select! {
                _ = self.ctx.stop.cancelled() => return,
                updates = self.get_updates(offset) => updates,
            };
            let updates = match updates {
                Ok(updates) => updates,
                Err(error) => {
                    self.ctx.note_error(CHANNEL, &error.to_string()).await;
                    failures += 1;
                    if self.rest(failures).await {
                        return;
                    }
                    continue;
                }
            };
            failures = 0;
            for update in updates {
                if self.ctx.stop.is_cancelled() {
                    return;
                }
                let Some(id) = update.get("update_id").and_then(Value::as_i64) else {
                    tracing::warn!(channel = CHANNEL, %update, "an update without an update_id was skipped");
                    continue;
                };
                if let Err(Later(why)) = self.handle(id, &update, &bot).await {
                    self.ctx
                        .note_error(CHANNEL, &format!("update {id} is left for later: {why}"))
                        .await;
                    failures += 1;
                    if self.rest(failures).await {
                        return;
                    }
                    break;
                }
                self.ctx.note(CHANNEL, OFFSET, &(id + 1).to_string()).await;
            }
        }
    }

    /// Waits out the `failures`th failure in a row; true when the daemon stops meanwhile.
    async fn rest(&self, failures: u32) -> bool {
        let wait = (self.ctx.courier.first_backoff * 2u32.saturating_pow(failures.min(10)))
            .min(self.ctx.courier.max_backoff);
        tokio::select! {
            _ = self.ctx.stop.cancelled() => true,
            _ = tokio::time::sleep(wait) => false,
        }
    }

    /// The bot, from `getMe`, asked until Telegram answers.
    async fn whoami(&self) -> Option<Bot> {
        let mut failures = 0;
        loop {
            match self.client.call::<Bot>("getMe", &json!({})).await {
                Ok(bot) => return Some(bot),
                Err(error) => {
                    let hint = if matches!(error.code(), Some(401 | 404)) {
                        " (is the bot token right?)"
                    } else {
                        ""
                    };
                    self.ctx
                        .note_error(CHANNEL, &format!("{error}{hint}"))
                        .await;
                }
            }
            failures += 1;
            if self.rest(failures).await {
                return None;
            }
        }
    }

    async fn get_updates(&self, offset: i64) -> Result<Vec<Value>, ApiError> {
        let timeout = self.config.poll_timeout_secs;
        let body = json!({
            "offset": offset,
            "timeout": timeout,
            "allowed_updates": ["message", "callback_query"],
        });
        self.client
            .call_within("getUpdates", &body, Duration::from_secs(timeout + 15))
            .await
    }

    /// Hands update `id` on; `Err` leaves it to be polled again.
    async fn handle(&self, id: i64, update: &Value, bot: &Bot) -> Result<(), Later> {
        match classify(update, bot, self.config.group_mode) {
            Update::Message(message) => {
                self.ctx.note_event(CHANNEL).await;
                self.message(id, *message).await
            }
            Update::Press(press) => {
                self.ctx.note_event(CHANNEL).await;
                self.press(press).await
            }
            Update::Ignored(why) => {
                tracing::debug!(channel = CHANNEL, update = id, "ignored {why}");
                Ok(())
            }
            Update::Malformed(why) => {
                tracing::warn!(channel = CHANNEL, update = id, "skipped {why}");
                let at = chrono::Utc::now().to_rfc3339();
                self.ctx
                    .note(
                        CHANNEL,
                        "last_skipped",
                        &format!("{at}: update {id}: {why}"),
                    )
                    .await;
                Ok(())
            }
        }
    }

    async fn message(&self, id: i64, mut got: ForKeel) -> Result<(), Later> {
        self.fetch_files(&mut got).await?;
        let target = got.target.clone();
        let route = DeliveryRoute {
            channel: CHANNEL.into(),
            target: target.encode(),
        };
        let inbound = Inbound::new(InboundKey::new(CHANNEL, id.to_string()), got.message, route);
        match self.ctx.intake.receive(inbound, &self.access).await {
            Ok(Received::Queued { run_id, .. } | Received::Answered { run_id }) => {
                if self.config.stream {
                    draft::spawn(
                        &self.ctx,
                        self.client.clone(),
                        self.drafts.clone(),
                        target.clone(),
                        run_id.clone(),
                    );
                }
                self.show_typing(target, run_id);
                Ok(())
            }
            Ok(received) => {
                tracing::info!(channel = CHANNEL, update = id, ?received, "a message taken");
                Ok(())
            }
            Err(IntakeError::Invalid(why)) => {
                tracing::warn!(
                    channel = CHANNEL,
                    update = id,
                    why,
                    "a message keel cannot take was dropped"
                );
                Ok(())
            }
            Err(IntakeError::Unavailable(why)) => Err(Later(why)),
        }
    }

    /// Downloads the message's files, each at most the inbox's attachment size; one too big or
    /// refused is left out and the message says so.
    async fn fetch_files(&self, got: &mut ForKeel) -> Result<(), Later> {
        let max = self.ctx.state.inbox.settings().max_attachment_bytes;
        for file in std::mem::take(&mut got.files) {
            let fetched = if file.size.is_some_and(|size| size > max as u64) {
                Err(ApiError::Refused {
                    method: "getFile".into(),
                    code: 413,
                    description: format!("the file is larger than {max} bytes"),
                    retry_after: None,
                })
            } else {
                self.fetch(&file.file_id, max).await
            };
            match fetched {
                Ok(content) => got.message.attachments.push(IncomingAttachment {
                    name: file.name,
                    media_type: file.media_type,
                    content,
                }),
                Err(error) if error.is_transient() => return Err(Later(error.to_string())),
                Err(error) => {
                    tracing::warn!(channel = CHANNEL, file = file.name, %error, "an attachment was left out");
                    got.message.text.push_str(&format!(
                        "\n\n[The attachment {} could not be received: {error}]",
                        file.name
                    ));
                }
            }
        }
        Ok(())
    }

    async fn fetch(&self, file_id: &str, max: usize) -> Result<Vec<u8>, ApiError> {
        #[derive(serde::Deserialize)]
        struct File {
            file_path: Option<String>,
        }
        let file: File = self
            .client
            .call("getFile", &json!({ "file_id": file_id }))
            .await?;
        let Some(path) = file.file_path else {
            return Err(ApiError::Refused {
                method: "getFile".into(),
                code: 400,
                description: "no file_path".into(),
                retry_after: None,
            });
        };
        self.client.download(&path, max).await
    }

    async fn press(&self, press: Press) -> Result<(), Later> {
        let pressed = match press.data.as_deref() {
            Some(data) => {
                let key = InboundKey::new(CHANNEL, format!("cb:{}", press.id));
                self.ctx
                    .decider
                    .press(CHANNEL, CHANNEL, &press.from, data, Some(&key))
                    .await
                    .map_err(|e| Later(e.to_string()))?
            }
            None => crate::decide::Pressed::Refused("This button is not one of keel's.".into()),
        };
        if let crate::decide::Pressed::Refused(why) = &pressed {
            tracing::warn!(
                channel = CHANNEL,
                from = press.from,
                why,
                "a button press was refused"
            );
        }
        let body = json!({"callback_query_id": press.id, "text": pressed.text()});
        if let Err(error) = self
            .client
            .call::<Value>("answerCallbackQuery", &body)
            .await
        {
            tracing::warn!(channel = CHANNEL, %error, "cannot answer a button press");
        }
        Ok(())
    }

    /// Shows "typing" in the target's chat while `run_id` works.
    fn show_typing(&self, target: Target, run_id: String) {
        let (client, store, stop) = (
            self.client.clone(),
            self.ctx.state.store.clone(),
            self.ctx.stop.clone(),
        );
        self.ctx.tasks.spawn(async move {
            let mut body = json!({"chat_id": chat_id(&target.chat), "action": "typing"});
            if let Some(thread) = thread_id(&target) {
                body["message_thread_id"] = json!(thread);
            }
            let until = tokio::time::Instant::now() + TYPING_AT_MOST;
            while tokio::time::Instant::now() < until {
                match store.run(&run_id).await {
                    Ok(Some(run))
                        if !run.state.is_terminal() && run.state != AgentState::WaitingOnHuman => {}
                    _ => return,
                }
                if let Err(error) = client.call::<Value>("sendChatAction", &body).await {
                    tracing::debug!(channel = CHANNEL, %error, "cannot show typing");
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(TYPING_EVERY) => {}
                }
            }
        });
    }
}
