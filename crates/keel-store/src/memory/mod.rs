//! An in-memory [`Store`], for tests, benchmarks and embedders who need no durability.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use chrono::{DateTime, Utc};
use keel_core::message::{Message, Role};

use keel_core::checkpoint::{Checkpoint, ToolCallRecord};
use keel_core::event::Event;
use keel_core::files::FileRecord;
use keel_core::journal::Journal;
use keel_core::lane::LanePolicy;
use keel_core::lane::{LaneClaim, LaneHolder, LaneOutcome};
use keel_core::provider::Usage;
use keel_core::store::{
    Commit, CommitOutcome, RunRecord, SessionInfo, Store, StoreError, StoredMessage, UserRecord,
    session_title,
};
use keel_core::token_log::TokenCharge;
use keel_platform::Persona;
use keel_platform::PlatformLink;
use keel_platform::api_key::ApiKeyRecord;
use keel_platform::conversation::QueuedRun;

mod channels;
mod daemon;
mod facts;
mod lane_policies;
mod platform;
mod queue;
mod schedules;
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
    /// Platform conversations' ids by key (see [`keel_platform::ConversationKey`]).
    platform_keys: HashMap<keel_platform::ConversationKey, String>,
    /// File records, oldest first.
    files: Vec<FileRecord>,
    /// File contents by SHA-256.
    blobs: HashMap<String, Vec<u8>>,
    /// Known facts, oldest first.
    facts: Vec<keel_platform::known_facts::Fact>,
    /// Channels' inbound events, the delivery routes, the outbox, state and pairings.
    channels: channels::Channels,
    /// Schedules and their slots' records.
    schedules: schedules::Schedules,
    /// Runs rolled back (the `rollback` policy), each with the run that replaced it.
    rolled_back: HashMap<String, String>,
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
    /// The messages of `messages` from index `start` that are sent to a model: those of runs
    /// rolled back are kept, not sent.
    fn sent_from(&self, messages: &[StoredMessage], start: usize) -> Vec<StoredMessage> {
        messages
            .get(start..)
            .unwrap_or_default()
            .iter()
            .filter(|stored| {
                stored
                    .run_id
                    .as_ref()
                    .is_none_or(|run| !self.rolled_back.contains_key(run))
            })
            .cloned()
            .collect()
    }

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
        let start = keel_core::store::latest_summary_end(messages).map_or(0, |last| {
            // Pinned messages the summary replaced come back with it (seq n is at n - 1).
            keel_core::context::context_start_seq(messages, last).saturating_sub(1) as usize
        });
        Ok(data.sent_from(messages, start))
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
        let previous = data.runs.get(&run.id).map(|r| r.state);
        if previous != Some(run.state) {
            data.add_outbox_row(run);
        }
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
        Ok(data.sent_from(messages, start))
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
        Ok(self.lock()?.heartbeat(run_id, at))
    }

    async fn request_cancel(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        Ok(self.lock()?.request_cancel(run_id, at))
    }

    async fn claim_session(&self, claim: &LaneClaim<'_>) -> Result<LaneOutcome, StoreError> {
        self.lock()?.claim_session(claim)
    }

    async fn release_session(&self, session_id: &str, run_id: &str) -> Result<bool, StoreError> {
        Ok(self.lock()?.release_session(session_id, run_id))
    }

    async fn active_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        Ok(self.lock()?.active_runs())
    }

    async fn messages_page(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        Ok(self.lock()?.messages_page(session_id, after, limit))
    }

    async fn events_after(
        &self,
        run_id: &str,
        after: u64,
    ) -> Result<Vec<(u64, Event)>, StoreError> {
        Ok(self.lock()?.events_after(run_id, after))
    }

    async fn adopt_session(&self, session_id: &str, user_id: &str) -> Result<bool, StoreError> {
        Ok(self.lock()?.adopt_session(session_id, user_id))
    }
}

/// A store in memory belongs to one process: nothing to tell.
impl keel_platform::StoreSignals for MemoryStore {}
