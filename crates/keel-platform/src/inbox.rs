//! The incoming-message pipeline of seed 003, in order (DESIGN.md section 9): resolve the user
//! (platform link → user; an unknown one becomes a guest with its link and the guest budget),
//! the persona (server → platform → default), the conversation (found by its key — platform,
//! server, channel, thread and, for an email trigger, the sender — never by an id, so a message
//! reaches only a conversation of its own place; created with its trust), then the run's
//! options (persona settings, allowed modules, trust, place), then keeps its attachments as
//! files and describes them in the message. The monthly budget is checked by [`Agent::run`]
//! before the loop, which stores the refusal; tools are filtered there by permission and module.
//!
//! Everything is checked before anything is written: bad input stores nothing.

use std::sync::Arc;

use chrono::Utc;
use serde::{Deserialize, Serialize};

use keel_core::agent::{Agent, AgentError, RunReport, RunRequest};
use keel_core::files::{DEFAULT_MAX_FILE_BYTES, FileRecord};
use keel_core::lane::LanePolicy;
use keel_core::store::{SessionInfo, StoreError, UserRecord};
use keel_core::tool::Permission;
use keel_core::{PlatformPlace, RunOptions, SessionKind};

use crate::attachments::{IncomingAttachment, check_attachments, register_attachments};
use crate::conversation::NewConversation;
use crate::link::PlatformLink;
use crate::persona::{Persona, choose_persona, run_options};
use crate::place::{ConversationKey, Source, check_platform_text, session_id_for};
use crate::store::DaemonStore;

/// Longest message text, in bytes.
pub const MAX_TEXT_BYTES: usize = 256 * 1024;

/// A message from a platform, as a bot or channel adapter hands it over.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IncomingMessage {
    /// The platform, e.g. `telegram`, `slack`, `discord`.
    pub platform: String,
    /// The sender's id there.
    pub platform_user_id: String,
    /// The sender's name there.
    #[serde(default)]
    pub platform_username: Option<String>,
    /// The server (Slack workspace, Discord guild), when the platform has them.
    #[serde(default)]
    pub platform_server_id: Option<String>,
    /// The channel (a Telegram chat id).
    pub platform_channel_id: String,
    /// The thread, when the message is in one: a thread is its own conversation.
    #[serde(default)]
    pub platform_thread_id: Option<String>,
    /// The message.
    pub text: String,
    /// Where it comes from (a chat unless said otherwise).
    #[serde(default)]
    pub source: Source,
    /// Files sent with it.
    #[serde(default)]
    pub attachments: Vec<IncomingAttachment>,
    /// The kind of chat it comes from, as its platform says (`dm` unless said): a channel's
    /// lane policy may differ by kind.
    #[serde(default)]
    pub chat_kind: crate::place::ChatKind,
}

impl IncomingMessage {
    /// The conversation's place.
    pub fn place(&self) -> PlatformPlace {
        PlatformPlace {
            platform: self.platform.clone(),
            channel_id: self.platform_channel_id.clone(),
            thread_id: self.platform_thread_id.clone(),
            server_id: self.platform_server_id.clone(),
        }
    }

    /// Checks every field, attachments up to `max_attachment_bytes` each: the first problem,
    /// as a message for the sender.
    pub fn check(&self, max_attachment_bytes: usize) -> Result<(), String> {
        check_platform_text("platform", &self.platform, true)?;
        check_platform_text("platform_user_id", &self.platform_user_id, false)?;
        check_platform_text("platform_channel_id", &self.platform_channel_id, false)?;
        for (what, value) in [
            ("platform_username", &self.platform_username),
            ("platform_server_id", &self.platform_server_id),
            ("platform_thread_id", &self.platform_thread_id),
        ] {
            if let Some(value) = value {
                check_platform_text(what, value, false)?;
            }
        }
        if self.text.trim().is_empty() {
            return Err("`text` must not be empty".into());
        }
        if self.text.len() > MAX_TEXT_BYTES {
            return Err(format!(
                "`text` is {} bytes; at most {MAX_TEXT_BYTES}",
                self.text.len()
            ));
        }
        check_attachments(&self.attachments, max_attachment_bytes)
    }
}

/// How the pipeline treats what it does not know.
#[derive(Clone, Debug, PartialEq)]
pub struct InboxSettings {
    /// The monthly token budget of a guest it creates; `None`: unlimited.
    pub guest_monthly_tokens: Option<u64>,
    /// The tool modules of a run no persona serves; `None`: every module.
    pub default_modules: Option<Vec<String>>,
    /// The lane policy of conversations it creates.
    pub lane_policy: LanePolicy,
    /// The most bytes one attachment may hold.
    pub max_attachment_bytes: usize,
}

impl Default for InboxSettings {
    fn default() -> Self {
        InboxSettings {
            guest_monthly_tokens: None,
            default_modules: None,
            lane_policy: LanePolicy::default(),
            max_attachment_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }
}

/// What the pipeline resolved a message to.
#[derive(Clone, Debug, PartialEq)]
pub struct Prepared {
    /// The sender.
    pub user: UserRecord,
    /// Whether the sender was unknown and is now a guest.
    pub new_guest: bool,
    /// The persona chosen, if any.
    pub persona: Option<Persona>,
    /// The conversation.
    pub conversation: SessionInfo,
    /// What the run uses beyond its message.
    pub options: RunOptions,
    /// The message as the model sees it: its attachments described.
    pub text: String,
    /// Its attachments, kept as files of the conversation.
    pub files: Vec<FileRecord>,
}

impl Prepared {
    /// The run request for the message in the resolved conversation.
    pub fn request(&self) -> RunRequest {
        let mut request = RunRequest::new(self.text.clone())
            .session(self.conversation.id.clone())
            .user(self.user.id.clone());
        request.options = self.options.clone();
        request
    }
}

/// Why a message was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The message is malformed; the text says how. Nothing was stored.
    #[error("{0}")]
    Invalid(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The incoming-message pipeline over a store.
pub struct Inbox {
    store: Arc<dyn DaemonStore>,
    settings: InboxSettings,
}

impl Inbox {
    /// A pipeline writing to `store`.
    pub fn new(store: Arc<dyn DaemonStore>, settings: InboxSettings) -> Self {
        Inbox { store, settings }
    }

    /// Resolves `incoming` to a user, a persona, a conversation and the run's options.
    pub async fn prepare(&self, incoming: &IncomingMessage) -> Result<Prepared, InboxError> {
        self.prepare_with_policy(incoming, None).await
    }

    /// [`Inbox::prepare`], a conversation it makes getting `lane_policy` (a channel's default
    /// for the chat's kind) rather than the daemon's. A conversation found keeps its own.
    pub async fn prepare_with_policy(
        &self,
        incoming: &IncomingMessage,
        lane_policy: Option<LanePolicy>,
    ) -> Result<Prepared, InboxError> {
        incoming
            .check(self.settings.max_attachment_bytes)
            .map_err(InboxError::Invalid)?;
        let place = incoming.place();
        // Trust: a chat is trusted, a trigger is not, a sub-agent is as trusted as its parent.
        let untrusted = match &incoming.source {
            Source::Chat => false,
            Source::EmailTrigger | Source::Event => true,
            Source::SubAgent { parent } => {
                let Some(parent) = self.store.session(parent).await? else {
                    return Err(InboxError::Invalid(format!(
                        "the parent conversation `{parent}` does not exist"
                    )));
                };
                !parent.trusted || SessionKind::of(&parent.id).untrusted()
            }
        };
        let personas = self.store.personas().await?;
        let persona = choose_persona(
            &personas,
            &incoming.platform,
            incoming.platform_server_id.as_deref(),
        )
        .cloned();
        let (user, new_guest) = self.resolve_user(incoming).await?;
        let conversation = self
            .resolve_conversation(incoming, &place, &user, untrusted, lane_policy)
            .await?;
        let mut options = run_options(persona.as_ref(), self.settings.default_modules.as_deref());
        options.untrusted = untrusted || !conversation.trusted;
        options.place = Some(place);
        let (text, files) = register_attachments(
            self.store.as_ref() as &dyn keel_core::Store,
            incoming.text.clone(),
            &incoming.attachments,
            &conversation.id,
            Some(&user.id),
            Utc::now(),
        )
        .await?;
        Ok(Prepared {
            user,
            new_guest,
            persona,
            conversation,
            options,
            text,
            files,
        })
    }

    /// How it treats what it does not know.
    pub fn settings(&self) -> &InboxSettings {
        &self.settings
    }

    /// The run options of a message sent straight to `conversation` (not through
    /// [`Inbox::prepare`]): the persona its platform place chooses (or the default one), the
    /// default modules without one, its trust and its place. A message to an untrusted
    /// conversation is untrusted however it arrives.
    pub async fn options_for(&self, conversation: &SessionInfo) -> Result<RunOptions, InboxError> {
        let persona = match &conversation.place {
            Some(place) => {
                let personas = self.store.personas().await?;
                choose_persona(&personas, &place.platform, place.server_id.as_deref()).cloned()
            }
            None => None,
        };
        let mut options = run_options(persona.as_ref(), self.settings.default_modules.as_deref());
        options.untrusted = !conversation.trusted || SessionKind::of(&conversation.id).untrusted();
        options.place = conversation.place.clone();
        Ok(options)
    }

    /// Prepares `incoming` and runs it through `agent` (whose store should be this one's).
    pub async fn run(
        &self,
        agent: &Agent,
        incoming: &IncomingMessage,
    ) -> Result<RunReport, InboxError> {
        let prepared = self.prepare(incoming).await?;
        agent
            .run(prepared.request())
            .await
            .map_err(|error| match error {
                AgentError::Store(error) => InboxError::Store(error),
                other => InboxError::Store(StoreError::Backend(other.to_string())),
            })
    }

    /// The user linked to the sender; an unknown sender becomes a guest, linked.
    async fn resolve_user(
        &self,
        incoming: &IncomingMessage,
    ) -> Result<(UserRecord, bool), InboxError> {
        let (platform, id) = (&incoming.platform, &incoming.platform_user_id);
        if let Some(user) = self.store.user_by_link(platform, id).await? {
            return Ok((user, false));
        }
        let now = Utc::now();
        let guest_id = format!("{platform}:{id}");
        let guest = match self.store.user(&guest_id).await? {
            Some(existing) => existing,
            None => {
                let guest = UserRecord {
                    id: guest_id,
                    monthly_token_budget: self.settings.guest_monthly_tokens,
                    created_at: now,
                    updated_at: now,
                    permission: Permission::Guest,
                };
                self.store.save_user(&guest).await?;
                guest
            }
        };
        let link = PlatformLink {
            platform: platform.clone(),
            platform_user_id: id.clone(),
            user_id: guest.id.clone(),
            username: incoming.platform_username.clone(),
            created_at: now,
        };
        if let Err(error) = self.store.link_user(&link).await {
            // Another message from the same sender linked it first: use that.
            return match self.store.user_by_link(platform, id).await? {
                Some(user) => Ok((user, false)),
                None => Err(error.into()),
            };
        }
        Ok((guest, true))
    }

    /// The conversation of a message at `place`: a chat's or an email trigger's found by its
    /// key and made when there is none; an event or a sub-agent makes one of its own.
    async fn resolve_conversation(
        &self,
        incoming: &IncomingMessage,
        place: &PlatformPlace,
        user: &UserRecord,
        untrusted: bool,
        lane_policy: Option<LanePolicy>,
    ) -> Result<SessionInfo, InboxError> {
        let source = &incoming.source;
        let new = |id: String| NewConversation {
            id,
            owner: Some(user.id.clone()),
            lane_policy: lane_policy.unwrap_or(self.settings.lane_policy),
            at: Utc::now(),
            place: Some(place.clone()),
            trusted: !untrusted,
        };
        let Some(key) = ConversationKey::of(source, place, &incoming.platform_user_id) else {
            // A new UUID: taken only if something is very wrong, and never reused then.
            let id = session_id_for(source, place, &incoming.platform_user_id);
            return self
                .store
                .create_conversation(&new(id.clone()))
                .await?
                .ok_or_else(|| {
                    InboxError::Store(StoreError::Conflict(format!(
                        "a new conversation's id `{id}` is taken"
                    )))
                });
        };
        if let Some(found) = self.conversation_of(&key, place).await? {
            return Ok(found);
        }
        // Seed 000's readable id; when it names another session (a CLI one, another place's,
        // one made before keys were kept), a fresh one: never that session.
        for id in [key.readable_id(), key.fallback_id()] {
            if let Some(made) = self
                .store
                .create_platform_conversation(&new(id), &key)
                .await?
            {
                return Ok(made);
            }
            // Another message of the same place may have made it at the same moment.
            if let Some(found) = self.conversation_of(&key, place).await? {
                return Ok(found);
            }
        }
        Err(InboxError::Store(StoreError::Conflict(format!(
            "no free id for the conversation of `{}`",
            key.readable_id()
        ))))
    }

    /// The conversation whose key is `key`, when there is one. Its stored place is compared
    /// too: a conversation of another place is never returned, whatever the store says.
    async fn conversation_of(
        &self,
        key: &ConversationKey,
        place: &PlatformPlace,
    ) -> Result<Option<SessionInfo>, InboxError> {
        match self.store.platform_conversation(key).await? {
            Some(found) if found.place.as_ref() == Some(place) => Ok(Some(found)),
            Some(found) => Err(InboxError::Store(StoreError::Corrupt(format!(
                "conversation `{}` is kept under the key of another place",
                found.id
            )))),
            None => Ok(None),
        }
    }
}
