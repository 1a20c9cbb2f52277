//! keel-core's `Store` on PostgreSQL: each method is one statement or one transaction of the
//! files beside this one (sessions and runs `runs.rs`, messages `messages.rs`, the boundary's
//! commit `commit.rs`, what makes a run survive its worker `durability.rs`, lanes `lanes.rs`,
//! users `users.rs`, files and approvals `files.rs`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::files::FileRecord;
use keel_core::store::{Commit, CommitOutcome};
use keel_core::{
    Checkpoint, Event, Journal, LaneClaim, LaneOutcome, Message, RunRecord, SessionInfo, Store,
    StoreError, StoredMessage, ToolCallRecord, Usage, UserRecord,
};

use super::{PgStore, commit, durability, files, lanes, messages, runs, users};
use crate::OrBackend;
use crate::codec::timestamp;

#[async_trait]
impl Store for PgStore {
    async fn ensure_session(&self, session_id: &str) -> Result<(), StoreError> {
        sqlx::query(crate::batch::ENSURE_SESSION)
            .bind(session_id)
            .bind(timestamp(Utc::now()))
            .execute(&self.pool)
            .await
            .map(drop)
            .or_backend(|| format!("cannot create session `{session_id}`"))
    }

    async fn session(&self, session_id: &str) -> Result<Option<SessionInfo>, StoreError> {
        runs::session(&self.pool, session_id).await
    }

    async fn list_sessions(&self, limit: usize) -> Result<Vec<SessionInfo>, StoreError> {
        runs::sessions(&self.pool, limit).await
    }

    async fn messages(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        messages::all(&self.pool, session_id).await
    }

    async fn context_messages(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        messages::context(&self.pool, session_id).await
    }

    async fn append_messages(
        &self,
        session_id: &str,
        run_id: Option<&str>,
        messages: &[Message],
    ) -> Result<(), StoreError> {
        let doing = || format!("cannot append messages to session `{session_id}`");
        let mut tx = self.pool.begin().await.or_backend(doing)?;
        if let Some(run_id) = run_id.filter(|_| !messages.is_empty()) {
            lanes::fence(&mut tx, session_id, run_id, None, true).await?;
        }
        let now = timestamp(Utc::now());
        messages::append(&mut tx, session_id, run_id, messages, &now).await?;
        tx.commit().await.or_backend(doing)
    }

    async fn commit(&self, commit: &Commit<'_>) -> Result<CommitOutcome, StoreError> {
        commit::commit(&self.pool, commit).await
    }

    async fn messages_since(
        &self,
        session_id: &str,
        from: u64,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        messages::since(&self.pool, session_id, from).await
    }

    async fn record_tool_calls(&self, calls: &[ToolCallRecord]) -> Result<(), StoreError> {
        durability::record_tool_calls(&self.pool, calls).await
    }

    async fn tool_calls(&self, run_id: &str) -> Result<Vec<ToolCallRecord>, StoreError> {
        durability::tool_calls(&self.pool, run_id).await
    }

    async fn checkpoints(&self, run_id: &str) -> Result<Vec<Checkpoint>, StoreError> {
        durability::checkpoints(&self.pool, run_id).await
    }

    async fn latest_checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        durability::latest_checkpoint(&self.pool, run_id).await
    }

    async fn events(&self, run_id: &str) -> Result<Vec<Event>, StoreError> {
        durability::events(&self.pool, run_id).await
    }

    async fn journal(&self, session_id: &str) -> Result<Option<Journal>, StoreError> {
        durability::journal(&self.pool, session_id).await
    }

    async fn session_approvals(&self, session_id: &str) -> Result<Vec<String>, StoreError> {
        files::approvals(&self.pool, session_id).await
    }

    async fn approve_for_session(
        &self,
        session_id: &str,
        key: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        files::approve(&self.pool, session_id, key, at).await
    }

    async fn heartbeat(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        durability::heartbeat(&self.pool, run_id, at).await
    }

    async fn request_cancel(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        durability::request_cancel(&self.pool, run_id, at).await
    }

    async fn claim_session(&self, claim: &LaneClaim<'_>) -> Result<LaneOutcome, StoreError> {
        lanes::claim(&self.pool, claim).await
    }

    async fn release_session(&self, session_id: &str, run_id: &str) -> Result<bool, StoreError> {
        lanes::release(&self.pool, session_id, run_id).await
    }

    async fn close(&self) {
        self.pool.close().await;
    }

    async fn active_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        runs::active(&self.pool).await
    }

    async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        runs::run(&self.pool, run_id).await
    }

    async fn list_runs(
        &self,
        session_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        runs::runs(&self.pool, session_id, limit).await
    }

    async fn user(&self, user_id: &str) -> Result<Option<UserRecord>, StoreError> {
        users::user(&self.pool, user_id).await
    }

    async fn save_user(&self, user: &UserRecord) -> Result<(), StoreError> {
        users::save(&self.pool, user).await
    }

    async fn list_users(&self) -> Result<Vec<UserRecord>, StoreError> {
        users::users(&self.pool).await
    }

    async fn monthly_usage(&self, user_id: &str, month: &str) -> Result<Usage, StoreError> {
        users::monthly_usage(&self.pool, user_id, month).await
    }

    async fn messages_page(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        messages::page(&self.pool, session_id, after, limit).await
    }

    async fn events_after(
        &self,
        run_id: &str,
        after: u64,
    ) -> Result<Vec<(u64, Event)>, StoreError> {
        durability::events_after(&self.pool, run_id, after).await
    }

    async fn save_file(&self, record: &FileRecord, content: &[u8]) -> Result<(), StoreError> {
        files::save(&self.pool, record, content).await
    }

    async fn file(&self, file_id: &str) -> Result<Option<FileRecord>, StoreError> {
        files::file(&self.pool, file_id).await
    }

    async fn file_content(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        files::content(&self.pool, sha256).await
    }

    async fn run_files(&self, run_id: &str) -> Result<Vec<FileRecord>, StoreError> {
        files::of_run(&self.pool, run_id).await
    }

    async fn adopt_session(&self, session_id: &str, user_id: &str) -> Result<bool, StoreError> {
        users::adopt(&self.pool, session_id, user_id).await
    }
}
