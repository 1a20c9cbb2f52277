//! keel-core's `Store` on PostgreSQL: sessions, messages, runs, commits, checkpoints, the envelope, events, journals, heartbeats, cancel requests, lanes, users, files.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::files::FileRecord;
use keel_core::store::*;
use keel_core::*;

use super::PgStore;

#[async_trait]
impl Store for PgStore {
    async fn ensure_session(&self, _session_id: &str) -> Result<(), StoreError> {
        Err(super::not_yet("Store::ensure_session"))
    }

    async fn session(&self, _session_id: &str) -> Result<Option<SessionInfo>, StoreError> {
        Err(super::not_yet("Store::session"))
    }

    async fn list_sessions(&self, _limit: usize) -> Result<Vec<SessionInfo>, StoreError> {
        Err(super::not_yet("Store::list_sessions"))
    }

    async fn messages(&self, _session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        Err(super::not_yet("Store::messages"))
    }

    async fn append_messages(
        &self,
        _session_id: &str,
        _run_id: Option<&str>,
        _messages: &[Message],
    ) -> Result<(), StoreError> {
        Err(super::not_yet("Store::append_messages"))
    }

    async fn commit(&self, _commit: &Commit<'_>) -> Result<CommitOutcome, StoreError> {
        Err(super::not_yet("Store::commit"))
    }

    async fn messages_since(
        &self,
        _session_id: &str,
        _from: u64,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        Err(super::not_yet("Store::messages_since"))
    }

    async fn record_tool_calls(&self, _calls: &[ToolCallRecord]) -> Result<(), StoreError> {
        Err(super::not_yet("Store::record_tool_calls"))
    }

    async fn tool_calls(&self, _run_id: &str) -> Result<Vec<ToolCallRecord>, StoreError> {
        Err(super::not_yet("Store::tool_calls"))
    }

    async fn checkpoints(&self, _run_id: &str) -> Result<Vec<Checkpoint>, StoreError> {
        Err(super::not_yet("Store::checkpoints"))
    }

    async fn latest_checkpoint(&self, _run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        Err(super::not_yet("Store::latest_checkpoint"))
    }

    async fn events(&self, _run_id: &str) -> Result<Vec<Event>, StoreError> {
        Err(super::not_yet("Store::events"))
    }

    async fn journal(&self, _session_id: &str) -> Result<Option<Journal>, StoreError> {
        Err(super::not_yet("Store::journal"))
    }

    async fn session_approvals(&self, _session_id: &str) -> Result<Vec<String>, StoreError> {
        Err(super::not_yet("Store::session_approvals"))
    }

    async fn approve_for_session(
        &self,
        _session_id: &str,
        _key: &str,
        _at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        Err(super::not_yet("Store::approve_for_session"))
    }

    async fn heartbeat(&self, _run_id: &str, _at: DateTime<Utc>) -> Result<bool, StoreError> {
        Err(super::not_yet("Store::heartbeat"))
    }

    async fn request_cancel(&self, _run_id: &str, _at: DateTime<Utc>) -> Result<bool, StoreError> {
        Err(super::not_yet("Store::request_cancel"))
    }

    async fn claim_session(&self, _claim: &LaneClaim<'_>) -> Result<LaneOutcome, StoreError> {
        Err(super::not_yet("Store::claim_session"))
    }

    async fn release_session(&self, _session_id: &str, _run_id: &str) -> Result<bool, StoreError> {
        Err(super::not_yet("Store::release_session"))
    }

    async fn active_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        Err(super::not_yet("Store::active_runs"))
    }

    async fn run(&self, _run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        Err(super::not_yet("Store::run"))
    }

    async fn list_runs(
        &self,
        _session_id: Option<&str>,
        _limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        Err(super::not_yet("Store::list_runs"))
    }

    async fn user(&self, _user_id: &str) -> Result<Option<UserRecord>, StoreError> {
        Err(super::not_yet("Store::user"))
    }

    async fn save_user(&self, _user: &UserRecord) -> Result<(), StoreError> {
        Err(super::not_yet("Store::save_user"))
    }

    async fn list_users(&self) -> Result<Vec<UserRecord>, StoreError> {
        Err(super::not_yet("Store::list_users"))
    }

    async fn monthly_usage(&self, _user_id: &str, _month: &str) -> Result<Usage, StoreError> {
        Err(super::not_yet("Store::monthly_usage"))
    }

    async fn messages_page(
        &self,
        _session_id: &str,
        _after: u64,
        _limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        Err(super::not_yet("Store::messages_page"))
    }

    async fn events_after(
        &self,
        _run_id: &str,
        _after: u64,
    ) -> Result<Vec<(u64, Event)>, StoreError> {
        Err(super::not_yet("Store::events_after"))
    }

    async fn save_file(&self, _record: &FileRecord, _content: &[u8]) -> Result<(), StoreError> {
        Err(super::not_yet("Store::save_file"))
    }

    async fn file(&self, _file_id: &str) -> Result<Option<FileRecord>, StoreError> {
        Err(super::not_yet("Store::file"))
    }

    async fn file_content(&self, _sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Err(super::not_yet("Store::file_content"))
    }

    async fn run_files(&self, _run_id: &str) -> Result<Vec<FileRecord>, StoreError> {
        Err(super::not_yet("Store::run_files"))
    }

    async fn adopt_session(&self, _session_id: &str, _user_id: &str) -> Result<bool, StoreError> {
        Err(super::not_yet("Store::adopt_session"))
    }
}
