//! An in-memory [`Store`], for tests, benchmarks and embedders who need no durability.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::message::{Message, Role};
use crate::state::AgentState;
use chrono::{DateTime, Utc};

use crate::api_key::ApiKeyRecord;
use crate::checkpoint::{Checkpoint, ToolCallRecord};
use crate::conversation::{
    ConversationFilter, EnqueueOutcome, LanePolicy, NewConversation, QueuedRun, RunFilter,
};
use crate::event::Event;
use crate::files::FileRecord;
use crate::journal::Journal;
use crate::lane::{LaneClaim, LaneHolder, LaneOutcome, lane_is_held};
use crate::platform::Persona;
use crate::provider::Usage;
use crate::store::{
    Commit, CommitOutcome, PlatformLink, RunRecord, SessionInfo, Store, StoreError, StoredMessage,
    UserRecord, session_title,
};
use crate::token_log::{TokenCharge, UsageLine, UsageQuery};

mod facts;
mod platform;
mod search;

#[derive(Default)]
struct Data {
    sessions: HashMap<String, (SessionInfo, Vec<StoredMessage>)>,
    runs: HashMap<String, RunRecord>,
    users: HashMap<String, UserRecord>,
    usage: HashMap<(String, String), Usage>,
    checkpoints: HashMap<String, Vec<Checkpoint>>,
    tool_calls: HashMap<String, Vec<ToolCallRecord>>,
    events: HashMap<String, Vec<Event>>,
    journals: HashMap<String, Journal>,
    /// `approve_session` keys by session.
    approvals: HashMap<String, Vec<String>>,
    /// Each session's lane holder (its `paused` filled in when read).
    lanes: HashMap<String, LaneHolder>,
    /// Queued runs of every session, oldest first.
    queue: Vec<QueuedRun>,
    /// API keys, oldest first.
    api_keys: Vec<ApiKeyRecord>,
    /// Platform links by (platform, platform user id).
    links: HashMap<(String, String), PlatformLink>,
    /// The token log: (session id, run id, charge), oldest first.
    token_log: Vec<(String, String, TokenCharge)>,
    /// Personas by name.
    personas: std::collections::BTreeMap<String, Persona>,
    /// File records, oldest first.
    files: Vec<FileRecord>,
    /// File contents by SHA-256.
    blobs: HashMap<String, Vec<u8>>,
    /// Known facts, oldest first.
    facts: Vec<crate::known_facts::Fact>,
}

/// Keeps sessions, messages and runs in memory; everything is lost when it is dropped.
#[derive(Default)]
pub struct MemoryStore {
    data: Mutex<Data>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Data>, StoreError> {
        self.data
            .lock()
            .map_err(|_| StoreError::Backend("memory store lock poisoned".into()))
    }
}

impl Data {
    fn upsert_tool_calls(&mut self, calls: &[ToolCallRecord]) {
        for call in calls {
            let rows = self.tool_calls.entry(call.run_id.clone()).or_default();
            // From the end: a completion replaces the row its start wrote a boundary before,
            // so a long run's commits do not scan all its calls.
            match rows
                .iter_mut()
                .rev()
                .find(|row| row.call_id == call.call_id)
            {
                Some(row) => *row = call.clone(),
                None => rows.push(call.clone()),
            }
        }
    }

    /// Refuses messages of a run that does not hold the session's lane while another does.
    fn fence(
        &self,
        session_id: &str,
        run_id: Option<&str>,
        messages: &[Message],
    ) -> Result<(), StoreError> {
        match (run_id, self.lanes.get(session_id)) {
            (Some(run_id), Some(holder)) if !messages.is_empty() && holder.run_id != run_id => {
                Err(StoreError::LaneLost {
                    run_id: run_id.to_string(),
                    session_id: session_id.to_string(),
                    holder: holder.run_id.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    fn ensure(&mut self, session_id: &str) -> &mut (SessionInfo, Vec<StoredMessage>) {
        self.sessions
            .entry(session_id.to_string())
            .or_insert_with(|| {
                let now = Utc::now();
                (
                    SessionInfo {
                        id: session_id.to_string(),
                        created_at: now,
                        updated_at: now,
                        title: None,
                        message_count: 0,
                        owner: None,
                        lane_policy: LanePolicy::default(),
                        place: None,
                        trusted: true,
                    },
                    Vec::new(),
                )
            })
    }

    fn append(&mut self, session_id: &str, run_id: Option<&str>, messages: &[Message]) {
        let (info, stored) = self.ensure(session_id);
        let now = Utc::now();
        for message in messages {
            if info.title.is_none() && message.role == Role::User && !message.is_internal() {
                info.title = Some(session_title(&message.content));
            }
            stored.push(StoredMessage {
                seq: stored.len() as u64 + 1,
                run_id: run_id.map(str::to_string),
                created_at: now,
                message: message.clone(),
            });
        }
        if !messages.is_empty() {
            info.updated_at = now;
        }
        info.message_count = stored.len() as u64;
    }
}

/// Where checkpoint `seq` is among a run's checkpoints, kept in order of seq (as SQLite's
/// store reads them): `Ok` if it is there, else where it goes (at the end, but for a stale
/// worker's). A binary search, so that a long run's commits do not scan all its checkpoints.
fn position(stored: &[Checkpoint], seq: u32) -> Result<usize, usize> {
    stored.binary_search_by_key(&seq, |c| c.seq)
}

#[async_trait]
impl Store for MemoryStore {
    async fn ensure_session(&self, session_id: &str) -> Result<(), StoreError> {
        self.lock()?.ensure(session_id);
        Ok(())
    }

    async fn session(&self, session_id: &str) -> Result<Option<SessionInfo>, StoreError> {
        Ok(self
            .lock()?
            .sessions
            .get(session_id)
            .map(|(info, _)| info.clone()))
    }

    async fn list_sessions(&self, limit: usize) -> Result<Vec<SessionInfo>, StoreError> {
        let data = self.lock()?;
        let mut sessions: Vec<SessionInfo> = data
            .sessions
            .values()
            .map(|(info, _)| info.clone())
            .collect();
        sessions.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.id.cmp(&a.id)));
        sessions.truncate(limit);
        Ok(sessions)
    }

    async fn context_messages(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        let data = self.lock()?;
        let Some((_, messages)) = data.sessions.get(session_id) else {
            return Ok(Vec::new());
        };
        // Seqs are 1, 2, ...: the messages after seq `last` start at index `last`. The scan for
        // the latest summary reads references only; just the live context is cloned.
        let start = crate::store::latest_summary_end(messages).map_or(0, |last| last as usize);
        Ok(messages.get(start..).map(<[_]>::to_vec).unwrap_or_default())
    }

    async fn messages(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        Ok(self
            .lock()?
            .sessions
            .get(session_id)
            .map(|(_, messages)| messages.clone())
            .unwrap_or_default())
    }

    async fn append_messages(
        &self,
        session_id: &str,
        run_id: Option<&str>,
        messages: &[Message],
    ) -> Result<(), StoreError> {
        let mut data = self.lock()?;
        data.fence(session_id, run_id, messages)?;
        data.append(session_id, run_id, messages);
        Ok(())
    }

    async fn commit(&self, commit: &Commit<'_>) -> Result<CommitOutcome, StoreError> {
        let mut data = self.lock()?;
        let run = commit.run;
        if let Some(checkpoint) = commit.checkpoint
            && data
                .checkpoints
                .get(&run.id)
                .is_some_and(|stored| position(stored, checkpoint.seq).is_ok())
        {
            return Err(StoreError::Superseded {
                run_id: run.id.clone(),
                seq: checkpoint.seq,
            });
        }
        data.fence(&run.session_id, Some(&run.id), commit.messages)?;
        data.append(&run.session_id, Some(&run.id), commit.messages);
        data.queue.retain(|queued| queued.run_id != run.id);
        if run.state.is_terminal()
            && data
                .lanes
                .get(&run.session_id)
                .is_some_and(|holder| holder.run_id == run.id)
        {
            data.lanes.remove(&run.session_id);
        }
        let cancel_requested_at = data.runs.get(&run.id).and_then(|r| r.cancel_requested_at);
        let mut record = run.clone();
        record.cancel_requested_at = cancel_requested_at;
        data.runs.insert(run.id.clone(), record);
        if let Some(checkpoint) = commit.checkpoint {
            let stored = data.checkpoints.entry(run.id.clone()).or_default();
            if let Err(at) = position(stored, checkpoint.seq) {
                stored.insert(at, checkpoint.clone());
            }
        }
        data.upsert_tool_calls(commit.tool_calls);
        data.events
            .entry(run.id.clone())
            .or_default()
            .extend(commit.events.iter().cloned());
        if let Some(journal) = commit.journal {
            data.journals
                .insert(run.session_id.clone(), journal.clone());
        }
        data.log_tokens(run, commit.charges);
        Ok(CommitOutcome {
            cancel_requested: cancel_requested_at.is_some(),
        })
    }

    async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        Ok(self.lock()?.runs.get(run_id).cloned())
    }

    async fn list_runs(
        &self,
        session_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let data = self.lock()?;
        let mut runs: Vec<RunRecord> = data
            .runs
            .values()
            .filter(|r| session_id.is_none_or(|s| r.session_id == s))
            .cloned()
            .collect();
        runs.sort_by(|a, b| b.started_at.cmp(&a.started_at).then(b.id.cmp(&a.id)));
        runs.truncate(limit);
        Ok(runs)
    }

    async fn user(&self, user_id: &str) -> Result<Option<UserRecord>, StoreError> {
        Ok(self.lock()?.users.get(user_id).cloned())
    }

    async fn save_user(&self, user: &UserRecord) -> Result<(), StoreError> {
        self.lock()?.users.insert(user.id.clone(), user.clone());
        Ok(())
    }

    async fn list_users(&self) -> Result<Vec<UserRecord>, StoreError> {
        let mut users: Vec<UserRecord> = self.lock()?.users.values().cloned().collect();
        users.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(users)
    }

    async fn monthly_usage(&self, user_id: &str, month: &str) -> Result<Usage, StoreError> {
        Ok(self
            .lock()?
            .usage
            .get(&(user_id.to_string(), month.to_string()))
            .copied()
            .unwrap_or_default())
    }

    async fn usage_lines(&self, query: &UsageQuery) -> Result<Vec<UsageLine>, StoreError> {
        Ok(self.lock()?.usage_lines(query))
    }

    async fn save_persona(&self, persona: &Persona) -> Result<(), StoreError> {
        self.lock()?.save_persona(persona)
    }

    async fn personas(&self) -> Result<Vec<Persona>, StoreError> {
        Ok(self.lock()?.personas.values().cloned().collect())
    }

    async fn save_file(&self, record: &FileRecord, content: &[u8]) -> Result<(), StoreError> {
        self.lock()?.save_file(record, content)
    }

    async fn file(&self, file_id: &str) -> Result<Option<FileRecord>, StoreError> {
        let data = self.lock()?;
        Ok(data.files.iter().find(|file| file.id == file_id).cloned())
    }

    async fn file_content(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.lock()?.blobs.get(sha256).cloned())
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

    // — known facts (keel-memory) —

    async fn save_fact(
        &self,
        fact: &crate::known_facts::Fact,
    ) -> Result<Option<String>, StoreError> {
        self.lock()?.save_fact(fact)
    }

    async fn facts(
        &self,
        user_id: &str,
        with_superseded: bool,
    ) -> Result<Vec<crate::known_facts::Fact>, StoreError> {
        Ok(self.lock()?.facts(user_id, with_superseded))
    }

    async fn forget_fact(&self, user_id: &str, fact_id: &str) -> Result<bool, StoreError> {
        Ok(self.lock()?.forget_fact(user_id, fact_id))
    }

    async fn search_facts(
        &self,
        user_id: &str,
        text: &str,
        limit: usize,
    ) -> Result<Vec<crate::known_facts::FactHit>, StoreError> {
        Ok(self.lock()?.search_facts(user_id, text, limit))
    }

    async fn run_files(&self, run_id: &str) -> Result<Vec<FileRecord>, StoreError> {
        let data = self.lock()?;
        Ok(data
            .files
            .iter()
            .filter(|file| file.run_id.as_deref() == Some(run_id))
            .cloned()
            .collect())
    }

    async fn messages_since(
        &self,
        session_id: &str,
        from: u64,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let data = self.lock()?;
        let Some((_, messages)) = data.sessions.get(session_id) else {
            return Ok(Vec::new());
        };
        // Seqs are 1, 2, ...: seq `from` is at index `from - 1`.
        let start = from.saturating_sub(1) as usize;
        Ok(messages.get(start..).map(<[_]>::to_vec).unwrap_or_default())
    }

    async fn record_tool_calls(&self, calls: &[ToolCallRecord]) -> Result<(), StoreError> {
        self.lock()?.upsert_tool_calls(calls);
        Ok(())
    }

    async fn tool_calls(&self, run_id: &str) -> Result<Vec<ToolCallRecord>, StoreError> {
        Ok(self
            .lock()?
            .tool_calls
            .get(run_id)
            .cloned()
            .unwrap_or_default())
    }

    async fn checkpoints(&self, run_id: &str) -> Result<Vec<Checkpoint>, StoreError> {
        Ok(self
            .lock()?
            .checkpoints
            .get(run_id)
            .cloned()
            .unwrap_or_default())
    }

    async fn latest_checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        let data = self.lock()?;
        let Some(all) = data.checkpoints.get(run_id) else {
            return Ok(None);
        };
        Ok(all.last().map(|latest| {
            let mut latest = latest.clone();
            if latest.frame.is_none() {
                latest.frame = all.iter().rev().find_map(|c| c.frame.clone());
            }
            latest
        }))
    }

    async fn events(&self, run_id: &str) -> Result<Vec<Event>, StoreError> {
        Ok(self.lock()?.events.get(run_id).cloned().unwrap_or_default())
    }

    async fn journal(&self, session_id: &str) -> Result<Option<Journal>, StoreError> {
        Ok(self.lock()?.journals.get(session_id).cloned())
    }

    async fn session_approvals(&self, session_id: &str) -> Result<Vec<String>, StoreError> {
        Ok(self
            .lock()?
            .approvals
            .get(session_id)
            .cloned()
            .unwrap_or_default())
    }

    async fn approve_for_session(
        &self,
        session_id: &str,
        key: &str,
        _at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut data = self.lock()?;
        let keys = data.approvals.entry(session_id.to_string()).or_default();
        if !keys.iter().any(|k| k == key) {
            keys.push(key.to_string());
        }
        Ok(())
    }

    async fn heartbeat(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let mut data = self.lock()?;
        Ok(match data.runs.get_mut(run_id) {
            Some(run) => {
                run.heartbeat_at = Some(at);
                run.cancel_requested_at.is_some()
            }
            None => false,
        })
    }

    async fn request_cancel(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let mut data = self.lock()?;
        Ok(match data.runs.get_mut(run_id) {
            Some(run) => {
                run.cancel_requested_at.get_or_insert(at);
                true
            }
            None => false,
        })
    }

    async fn claim_session(&self, claim: &LaneClaim<'_>) -> Result<LaneOutcome, StoreError> {
        let mut data = self.lock()?;
        data.ensure(claim.session_id);
        if let Some(holder) = data.lanes.get(claim.session_id) {
            let run = data.runs.get(&holder.run_id);
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
        data.lanes.insert(claim.session_id.to_string(), holder);
        Ok(LaneOutcome::Claimed)
    }

    async fn release_session(&self, session_id: &str, run_id: &str) -> Result<bool, StoreError> {
        let mut data = self.lock()?;
        if data
            .lanes
            .get(session_id)
            .is_some_and(|holder| holder.run_id == run_id)
        {
            data.lanes.remove(session_id);
            return Ok(true);
        }
        Ok(false)
    }

    async fn active_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let mut runs: Vec<RunRecord> = self
            .lock()?
            .runs
            .values()
            .filter(|run| !run.state.is_terminal())
            .cloned()
            .collect();
        runs.sort_by(|a, b| a.started_at.cmp(&b.started_at).then(a.id.cmp(&b.id)));
        Ok(runs)
    }

    async fn create_conversation(
        &self,
        conversation: &NewConversation,
    ) -> Result<Option<SessionInfo>, StoreError> {
        let mut data = self.lock()?;
        if data.sessions.contains_key(&conversation.id) {
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
        data.sessions
            .insert(conversation.id.clone(), (info.clone(), Vec::new()));
        Ok(Some(info))
    }

    async fn list_conversations(
        &self,
        filter: &ConversationFilter,
    ) -> Result<Vec<SessionInfo>, StoreError> {
        let data = self.lock()?;
        let key = |info: &SessionInfo| (info.created_at, info.id.clone());
        let before = match &filter.before {
            Some(id) => match data.sessions.get(id) {
                Some((info, _)) => Some(key(info)),
                None => return Ok(Vec::new()),
            },
            None => None,
        };
        let mut sessions: Vec<SessionInfo> = data
            .sessions
            .values()
            .map(|(info, _)| info)
            .filter(|info| filter.owner.is_none() || info.owner == filter.owner)
            .filter(|info| before.as_ref().is_none_or(|before| key(info) < *before))
            .cloned()
            .collect();
        sessions.sort_by_key(|info| std::cmp::Reverse(key(info)));
        sessions.truncate(filter.limit);
        Ok(sessions)
    }

    async fn messages_page(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let data = self.lock()?;
        let Some((_, messages)) = data.sessions.get(session_id) else {
            return Ok(Vec::new());
        };
        // Seqs are 1, 2, ...: the messages after seq `after` start at index `after`.
        let start = usize::try_from(after).unwrap_or(usize::MAX);
        Ok(messages.iter().skip(start).take(limit).cloned().collect())
    }

    async fn find_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let data = self.lock()?;
        let key = |run: &RunRecord| (run.started_at, run.id.clone());
        let before = match &filter.before {
            Some(id) => match data.runs.get(id) {
                Some(run) => Some(key(run)),
                None => return Ok(Vec::new()),
            },
            None => None,
        };
        let owner_of = |session_id: &str| {
            data.sessions
                .get(session_id)
                .and_then(|(info, _)| info.owner.clone())
        };
        let mut runs: Vec<RunRecord> = data
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
        Ok(runs)
    }

    async fn events_after(
        &self,
        run_id: &str,
        after: u64,
    ) -> Result<Vec<(u64, Event)>, StoreError> {
        let data = self.lock()?;
        Ok(data
            .events
            .get(run_id)
            .map(|events| {
                (1u64..)
                    .zip(events.iter())
                    .filter(|(seq, _)| *seq > after)
                    .map(|(seq, event)| (seq, event.clone()))
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn enqueue_run(
        &self,
        run: &QueuedRun,
        limit: usize,
    ) -> Result<EnqueueOutcome, StoreError> {
        let mut data = self.lock()?;
        if !data.sessions.contains_key(&run.session_id) {
            return Err(StoreError::NotFound(format!(
                "session `{}`",
                run.session_id
            )));
        }
        let queued = data
            .queue
            .iter()
            .filter(|queued| queued.session_id == run.session_id)
            .count();
        if queued >= limit {
            return Ok(EnqueueOutcome::Full { queued });
        }
        data.queue.push(run.clone());
        data.runs.insert(
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
        let data = self.lock()?;
        let mut sessions: Vec<String> = Vec::new();
        for queued in &data.queue {
            if !sessions.contains(&queued.session_id) {
                sessions.push(queued.session_id.clone());
            }
        }
        Ok(sessions)
    }

    async fn cancel_queued(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let mut data = self.lock()?;
        let before = data.queue.len();
        data.queue.retain(|queued| queued.run_id != run_id);
        if data.queue.len() == before {
            return Ok(false);
        }
        if let Some(run) = data.runs.get_mut(run_id) {
            run.state = AgentState::Cancelled;
            run.updated_at = at;
            run.finished_at = Some(at);
            run.cancel_requested_at.get_or_insert(at);
        }
        Ok(true)
    }

    async fn save_api_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        let mut data = self.lock()?;
        if data
            .api_keys
            .iter()
            .any(|k| k.id == key.id || k.hash == key.hash)
        {
            return Err(StoreError::Backend(format!("API key `{}` exists", key.id)));
        }
        data.api_keys.push(key.clone());
        Ok(())
    }

    async fn api_key_by_hash(&self, hash: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        Ok(self
            .lock()?
            .api_keys
            .iter()
            .find(|k| k.hash == hash)
            .cloned())
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        Ok(self.lock()?.api_keys.clone())
    }

    async fn revoke_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let mut data = self.lock()?;
        Ok(
            match data
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

    async fn link_user(&self, link: &PlatformLink) -> Result<(), StoreError> {
        let mut data = self.lock()?;
        if !data.users.contains_key(&link.user_id) {
            return Err(StoreError::NotFound(format!("user `{}`", link.user_id)));
        }
        let key = (link.platform.clone(), link.platform_user_id.clone());
        match data.links.get(&key) {
            Some(existing) if existing.user_id == link.user_id => Ok(()),
            Some(existing) => Err(StoreError::Backend(format!(
                "{}:{} is linked to user `{}` already",
                link.platform, link.platform_user_id, existing.user_id
            ))),
            None => {
                data.links.insert(key, link.clone());
                Ok(())
            }
        }
    }

    async fn user_by_link(
        &self,
        platform: &str,
        platform_user_id: &str,
    ) -> Result<Option<UserRecord>, StoreError> {
        let data = self.lock()?;
        Ok(data
            .links
            .get(&(platform.to_string(), platform_user_id.to_string()))
            .and_then(|link| data.users.get(&link.user_id))
            .cloned())
    }

    async fn user_links(&self, user_id: &str) -> Result<Vec<PlatformLink>, StoreError> {
        let mut links: Vec<PlatformLink> = self
            .lock()?
            .links
            .values()
            .filter(|link| link.user_id == user_id)
            .cloned()
            .collect();
        links.sort_by(|a, b| {
            (&a.platform, &a.platform_user_id).cmp(&(&b.platform, &b.platform_user_id))
        });
        Ok(links)
    }

    // --- Session search (`session_search`, issue 16) ---

    async fn search_sessions(
        &self,
        search: &crate::session_search::SessionSearch,
    ) -> Result<Vec<crate::session_search::SessionHit>, StoreError> {
        Ok(self.lock()?.search_sessions(search))
    }

    async fn adopt_session(&self, session_id: &str, user_id: &str) -> Result<bool, StoreError> {
        let mut data = self.lock()?;
        match data.sessions.get_mut(session_id) {
            Some((info, messages)) if info.owner.is_none() && messages.is_empty() => {
                info.owner = Some(user_id.to_string());
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
