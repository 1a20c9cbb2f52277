//! The memory store's share of the daemon (DESIGN.md sections 9 and 13): session lanes, the
//! run queue, conversations and run listings, API keys and platform links.

use chrono::{DateTime, Utc};

use super::Data;
use async_trait::async_trait;
use keel_core::event::Event;
use keel_core::files::FileRecord;
use keel_core::lane::{LaneClaim, LaneHolder, LaneOutcome, lane_is_held};
use keel_core::provider::Usage;
use keel_core::state::AgentState;
use keel_core::store::{RunRecord, SessionInfo, StoreError, StoredMessage};
use keel_platform::ConversationKey;
use keel_platform::ConversationStore;
use keel_platform::PlatformLink;
use keel_platform::api_key::ApiKeyRecord;
use keel_platform::conversation::{
    ConversationFilter, EnqueueOutcome, NewConversation, QueueClaim, QueuedRun, RunFilter,
};
use keel_platform::schedule::{SlotOutcome, SlotRecord};

use super::MemoryStore;

impl Data {
    /// Takes the session's lane for a run unless another run holds it (see
    /// [`keel_core::Store::claim_session`]).
    pub(super) fn claim_session(
        &mut self,
        claim: &LaneClaim<'_>,
    ) -> Result<LaneOutcome, StoreError> {
        self.ensure(claim.session_id);
        if let Some(holder) = self.lanes.get(claim.session_id) {
            let run = self.runs.get(&holder.run_id);
            if lane_is_held(&holder.run_id, holder.claimed_at, run, claim) {
                let mut holder = holder.clone();
                holder.paused = run.is_some_and(|run| run.state == AgentState::WaitingOnHuman);
                return Ok(LaneOutcome::Busy(holder));
            }
        }
        let holder = LaneHolder {
            run_id: claim.run_id.to_string(),
            worker: claim.worker.to_string(),
            claimed_at: claim.at,
            paused: false,
        };
        self.lanes.insert(claim.session_id.to_string(), holder);
        Ok(LaneOutcome::Claimed)
    }

    /// Creates a conversation unless its id is taken (see [`keel_core::Store::create_conversation`]).
    pub(super) fn create_conversation(
        &mut self,
        conversation: &NewConversation,
    ) -> Result<Option<SessionInfo>, StoreError> {
        if self.sessions.contains_key(&conversation.id) {
            return Ok(None);
        }
        let info = SessionInfo {
            id: conversation.id.clone(),
            created_at: conversation.at,
            updated_at: conversation.at,
            title: None,
            message_count: 0,
            owner: conversation.owner.clone(),
            lane_policy: conversation.lane_policy,
            place: conversation.place.clone(),
            trusted: conversation.trusted,
        };
        self.sessions
            .insert(conversation.id.clone(), (info.clone(), Vec::new()));
        Ok(Some(info))
    }

    /// The conversation of a platform key (see [`keel_core::Store::platform_conversation`]).
    pub(super) fn platform_conversation(&self, key: &ConversationKey) -> Option<SessionInfo> {
        let id = self.platform_keys.get(key)?;
        self.sessions.get(id).map(|(info, _)| info.clone())
    }

    /// Creates a conversation with its platform key unless its id or key is taken (see
    /// [`keel_core::Store::create_platform_conversation`]).
    pub(super) fn create_platform_conversation(
        &mut self,
        conversation: &NewConversation,
        key: &ConversationKey,
    ) -> Result<Option<SessionInfo>, StoreError> {
        if conversation.place.as_ref() != Some(&key.place()) {
            return Err(StoreError::Conflict(format!(
                "conversation `{}` is not at its key's place",
                conversation.id
            )));
        }
        if self.platform_keys.contains_key(key) {
            return Ok(None);
        }
        let made = self.create_conversation(conversation)?;
        if made.is_some() {
            self.platform_keys
                .insert(key.clone(), conversation.id.clone());
        }
        Ok(made)
    }

    /// Conversations newest first, by owner and page (see [`keel_core::Store::list_conversations`]).
    pub(super) fn list_conversations(&self, filter: &ConversationFilter) -> Vec<SessionInfo> {
        let key = |info: &SessionInfo| (info.created_at, info.id.clone());
        let before = match &filter.before {
            Some(id) => match self.sessions.get(id) {
                Some((info, _)) => Some(key(info)),
                None => return Vec::new(),
            },
            None => None,
        };
        let mut sessions: Vec<SessionInfo> = self
            .sessions
            .values()
            .map(|(info, _)| info)
            .filter(|info| filter.owner.is_none() || info.owner == filter.owner)
            .filter(|info| before.as_ref().is_none_or(|before| key(info) < *before))
            .cloned()
            .collect();
        sessions.sort_by_key(|info| std::cmp::Reverse(key(info)));
        sessions.truncate(filter.limit);
        sessions
    }

    /// Runs newest first, by session, state, owner and page (see [`keel_core::Store::find_runs`]).
    pub(super) fn find_runs(&self, filter: &RunFilter) -> Vec<RunRecord> {
        let key = |run: &RunRecord| (run.started_at, run.id.clone());
        let before = match &filter.before {
            Some(id) => match self.runs.get(id) {
                Some(run) => Some(key(run)),
                None => return Vec::new(),
            },
            None => None,
        };
        let owner_of = |session_id: &str| {
            self.sessions
                .get(session_id)
                .and_then(|(info, _)| info.owner.clone())
        };
        let mut runs: Vec<RunRecord> = self
            .runs
            .values()
            .filter(|run| {
                filter
                    .session_id
                    .as_ref()
                    .is_none_or(|s| run.session_id == *s)
            })
            .filter(|run| filter.state.is_none_or(|state| run.state == state))
            .filter(|run| filter.owner.is_none() || owner_of(&run.session_id) == filter.owner)
            .filter(|run| before.as_ref().is_none_or(|before| key(run) < *before))
            .cloned()
            .collect();
        runs.sort_by_key(|run| std::cmp::Reverse(key(run)));
        runs.truncate(filter.limit);
        runs
    }

    /// Queues a run behind its session's lane unless the queue is full (see
    /// [`keel_core::Store::enqueue_run`]).
    pub(super) fn enqueue_run(
        &mut self,
        run: &QueuedRun,
        limit: usize,
    ) -> Result<EnqueueOutcome, StoreError> {
        if !self.sessions.contains_key(&run.session_id) {
            return Err(StoreError::NotFound(format!(
                "session `{}`",
                run.session_id
            )));
        }
        let queued = self
            .queue
            .iter()
            .filter(|queued| queued.session_id == run.session_id)
            .count();
        if let Some(key) = &run.inbound
            && let Some(first) = self.channels.inbound.get(key)
        {
            return Ok(EnqueueOutcome::Duplicate {
                run_id: first.clone(),
            });
        }
        if let Some(run_id) = run
            .slot
            .as_ref()
            .and_then(|key| self.schedules.slot_run(key))
        {
            return Ok(EnqueueOutcome::Duplicate { run_id });
        }
        if queued >= limit {
            return Ok(EnqueueOutcome::Full { queued });
        }
        if let Some(key) = &run.inbound {
            self.channels
                .inbound
                .insert(key.clone(), run.run_id.clone());
        }
        if let Some(key) = &run.slot {
            self.schedules.record(&SlotRecord {
                schedule_id: key.schedule_id.clone(),
                slot: key.slot,
                outcome: SlotOutcome::Fired,
                run_id: Some(run.run_id.clone()),
                reason: None,
                at: run.enqueued_at,
            });
        }
        self.queue.push(run.clone());
        self.runs.insert(
            run.run_id.clone(),
            RunRecord {
                id: run.run_id.clone(),
                session_id: run.session_id.clone(),
                state: AgentState::Queued,
                reason: None,
                provider: run.provider.clone(),
                model: run.model.clone(),
                model_used: None,
                iterations: 0,
                usage: Usage::default(),
                final_text: None,
                error: None,
                started_at: run.enqueued_at,
                updated_at: run.enqueued_at,
                finished_at: None,
                cost: 0.0,
                heartbeat_at: None,
                cancel_requested_at: None,
                resume_available: false,
                launch: None,
                worker: None,
            },
        );
        Ok(EnqueueOutcome::Queued { ahead: queued })
    }

    /// Takes a run out of the queue, cancelled (see [`keel_core::Store::cancel_queued`]).
    pub(super) fn cancel_queued(
        &mut self,
        run_id: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let before = self.queue.len();
        self.queue.retain(|queued| queued.run_id != run_id);
        if self.queue.len() == before {
            return Ok(false);
        }
        if let Some(run) = self.runs.get_mut(run_id) {
            run.state = AgentState::Cancelled;
            run.updated_at = at;
            run.finished_at = Some(at);
            run.cancel_requested_at.get_or_insert(at);
        }
        Ok(true)
    }

    /// Keeps a new API key; its id and hash must be new (see [`keel_core::Store::save_api_key`]).
    pub(super) fn save_api_key(&mut self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        if self
            .api_keys
            .iter()
            .any(|k| k.id == key.id || k.hash == key.hash)
        {
            return Err(StoreError::Backend(format!("API key `{}` exists", key.id)));
        }
        self.api_keys.push(key.clone());
        Ok(())
    }

    /// Revokes a key not revoked yet (see [`keel_core::Store::revoke_api_key`]).
    pub(super) fn revoke_api_key(
        &mut self,
        id: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Ok(
            match self
                .api_keys
                .iter_mut()
                .find(|k| k.id == id && k.revoked_at.is_none())
            {
                Some(key) => {
                    key.revoked_at = Some(at);
                    true
                }
                None => false,
            },
        )
    }

    /// Links a platform account to a user, once (see [`keel_core::Store::link_user`]).
    pub(super) fn link_user(&mut self, link: &PlatformLink) -> Result<(), StoreError> {
        if !self.users.contains_key(&link.user_id) {
            return Err(StoreError::NotFound(format!("user `{}`", link.user_id)));
        }
        let key = (link.platform.clone(), link.platform_user_id.clone());
        match self.links.get(&key) {
            Some(existing) if existing.user_id == link.user_id => Ok(()),
            Some(existing) => Err(StoreError::Backend(format!(
                "{}:{} is linked to user `{}` already",
                link.platform, link.platform_user_id, existing.user_id
            ))),
            None => {
                self.links.insert(key, link.clone());
                Ok(())
            }
        }
    }

    /// Marks a run alive; whether it was asked to stop (see [`keel_core::Store::heartbeat`]).
    pub(super) fn heartbeat(&mut self, run_id: &str, at: DateTime<Utc>) -> bool {
        match self.runs.get_mut(run_id) {
            Some(run) => {
                run.heartbeat_at = Some(at);
                run.cancel_requested_at.is_some()
            }
            None => false,
        }
    }

    /// Asks a run to stop; whether the run exists (see [`keel_core::Store::request_cancel`]).
    pub(super) fn request_cancel(&mut self, run_id: &str, at: DateTime<Utc>) -> bool {
        match self.runs.get_mut(run_id) {
            Some(run) => {
                run.cancel_requested_at.get_or_insert(at);
                true
            }
            None => false,
        }
    }

    /// Frees a session's lane if this run holds it (see [`keel_core::Store::release_session`]).
    pub(super) fn release_session(&mut self, session_id: &str, run_id: &str) -> bool {
        if self
            .lanes
            .get(session_id)
            .is_some_and(|holder| holder.run_id == run_id)
        {
            self.lanes.remove(session_id);
            return true;
        }
        false
    }

    /// A page of a session's messages after a seq (see [`keel_core::Store::messages_page`]).
    pub(super) fn messages_page(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Vec<StoredMessage> {
        let Some((_, messages)) = self.sessions.get(session_id) else {
            return Vec::new();
        };
        // Seqs are 1, 2, ...: the messages after seq `after` start at index `after`.
        let start = usize::try_from(after).unwrap_or(usize::MAX);
        messages.iter().skip(start).take(limit).cloned().collect()
    }

    /// A run's events after a seq, numbered (see [`keel_core::Store::events_after`]).
    pub(super) fn events_after(&self, run_id: &str, after: u64) -> Vec<(u64, Event)> {
        self.events
            .get(run_id)
            .map(|events| {
                (1u64..)
                    .zip(events.iter())
                    .filter(|(seq, _)| *seq > after)
                    .map(|(seq, event)| (seq, event.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Gives an empty session without an owner to a user (see [`keel_core::Store::adopt_session`]).
    pub(super) fn adopt_session(&mut self, session_id: &str, user_id: &str) -> bool {
        match self.sessions.get_mut(session_id) {
            Some((info, messages)) if info.owner.is_none() && messages.is_empty() => {
                info.owner = Some(user_id.to_string());
                true
            }
            _ => false,
        }
    }

    /// Runs not finished, oldest first (see [`keel_core::Store::active_runs`]).
    pub(super) fn active_runs(&self) -> Vec<RunRecord> {
        let mut runs: Vec<RunRecord> = self
            .runs
            .values()
            .filter(|run| !run.state.is_terminal())
            .cloned()
            .collect();
        runs.sort_by(|a, b| a.started_at.cmp(&b.started_at).then(a.id.cmp(&b.id)));
        runs
    }

    /// Sessions with queued runs, in the order of their first (see
    /// [`keel_core::Store::queued_sessions`]).
    pub(super) fn queued_sessions(&self) -> Vec<String> {
        let mut sessions: Vec<String> = Vec::new();
        for queued in &self.queue {
            if !sessions.contains(&queued.session_id) {
                sessions.push(queued.session_id.clone());
            }
        }
        sessions
    }

    /// A user's platform links, by platform and account (see [`keel_core::Store::user_links`]).
    pub(super) fn user_links(&self, user_id: &str) -> Vec<PlatformLink> {
        let mut links: Vec<PlatformLink> = self
            .links
            .values()
            .filter(|link| link.user_id == user_id)
            .cloned()
            .collect();
        links.sort_by(|a, b| {
            (&a.platform, &a.platform_user_id).cmp(&(&b.platform, &b.platform_user_id))
        });
        links
    }
}

#[async_trait]
impl ConversationStore for MemoryStore {
    async fn create_conversation(
        &self,
        conversation: &NewConversation,
    ) -> Result<Option<SessionInfo>, StoreError> {
        self.lock()?.create_conversation(conversation)
    }

    async fn platform_conversation(
        &self,
        key: &keel_platform::ConversationKey,
    ) -> Result<Option<SessionInfo>, StoreError> {
        Ok(self.lock()?.platform_conversation(key))
    }

    async fn create_platform_conversation(
        &self,
        conversation: &NewConversation,
        key: &keel_platform::ConversationKey,
    ) -> Result<Option<SessionInfo>, StoreError> {
        self.lock()?.create_platform_conversation(conversation, key)
    }

    async fn set_lane_policy(
        &self,
        session_id: &str,
        policy: keel_core::LanePolicy,
    ) -> Result<bool, StoreError> {
        Ok(self.lock()?.set_lane_policy(session_id, policy))
    }

    async fn list_conversations(
        &self,
        filter: &ConversationFilter,
    ) -> Result<Vec<SessionInfo>, StoreError> {
        Ok(self.lock()?.list_conversations(filter))
    }

    async fn find_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        Ok(self.lock()?.find_runs(filter))
    }

    async fn enqueue_run(
        &self,
        run: &QueuedRun,
        limit: usize,
    ) -> Result<EnqueueOutcome, StoreError> {
        self.lock()?.enqueue_run(run, limit)
    }

    async fn queued_runs(&self, session_id: &str) -> Result<Vec<QueuedRun>, StoreError> {
        Ok(self
            .lock()?
            .queue
            .iter()
            .filter(|queued| queued.session_id == session_id)
            .cloned()
            .collect())
    }

    async fn queued_sessions(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.lock()?.queued_sessions())
    }

    async fn cancel_queued(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        self.lock()?.cancel_queued(run_id, at)
    }

    async fn claim_queued(&self, claim: &QueueClaim<'_>) -> Result<Vec<QueuedRun>, StoreError> {
        Ok(self.lock()?.claim_queued(claim))
    }

    async fn absorb_queued(
        &self,
        into: &str,
        absorbed: &[String],
        message: Option<&str>,
        how: &str,
        at: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        Ok(self.lock()?.absorb_queued(into, absorbed, message, how, at))
    }

    async fn roll_back_run(
        &self,
        run_id: &str,
        by: &str,
        _at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Ok(self.lock()?.roll_back_run(run_id, by))
    }

    async fn rolled_back_runs(
        &self,
        session_id: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Ok(self.lock()?.rolled_back_runs(session_id))
    }

    async fn session_files(&self, session_id: &str) -> Result<Vec<FileRecord>, StoreError> {
        let data = self.lock()?;
        Ok(data
            .files
            .iter()
            .filter(|file| file.session_id == session_id)
            .cloned()
            .collect())
    }

    async fn forget_attachments(&self, files: &[FileRecord]) -> Result<(), StoreError> {
        self.lock()?.forget_attachments(files);
        Ok(())
    }
}
