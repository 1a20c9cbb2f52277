//! An in-memory [`Store`], for tests, benchmarks and embedders who need no durability.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::Utc;

use crate::message::{Message, Role};
use crate::provider::Usage;
use crate::store::{
    RunRecord, SessionInfo, Store, StoreError, StoredMessage, UserRecord, session_title,
};

#[derive(Default)]
struct Data {
    sessions: HashMap<String, (SessionInfo, Vec<StoredMessage>)>,
    runs: HashMap<String, RunRecord>,
    users: HashMap<String, UserRecord>,
    usage: HashMap<(String, String), Usage>,
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
        self.lock()?.append(session_id, run_id, messages);
        Ok(())
    }

    async fn save_run(&self, run: &RunRecord, new_messages: &[Message]) -> Result<(), StoreError> {
        let mut data = self.lock()?;
        data.append(&run.session_id, Some(&run.id), new_messages);
        data.runs.insert(run.id.clone(), run.clone());
        Ok(())
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

    async fn add_usage(&self, user_id: &str, month: &str, usage: Usage) -> Result<(), StoreError> {
        *self
            .lock()?
            .usage
            .entry((user_id.to_string(), month.to_string()))
            .or_default() += usage;
        Ok(())
    }

    async fn monthly_usage(&self, user_id: &str, month: &str) -> Result<Usage, StoreError> {
        Ok(self
            .lock()?
            .usage
            .get(&(user_id.to_string(), month.to_string()))
            .copied()
            .unwrap_or_default())
    }
}
