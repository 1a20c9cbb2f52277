//! The SQLite store's conversations: made for a user or a platform place, listed with their
//! runs, the lane queue, and their attachments ([`ConversationStore`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::Store;
use keel_core::files::FileRecord;
use keel_core::{RunRecord, SessionInfo, StoreError};
use keel_platform::*;

use crate::{SqliteStore, daemon};

#[async_trait]
impl ConversationStore for SqliteStore {
    async fn create_conversation(
        &self,
        conversation: &NewConversation,
    ) -> Result<Option<SessionInfo>, StoreError> {
        if !daemon::create_conversation(&self.conns, conversation).await? {
            return Ok(None);
        }
        self.session(&conversation.id).await
    }

    async fn platform_conversation(
        &self,
        key: &keel_platform::ConversationKey,
    ) -> Result<Option<SessionInfo>, StoreError> {
        daemon::platform_conversation(&self.conns, key).await
    }

    async fn create_platform_conversation(
        &self,
        conversation: &NewConversation,
        key: &keel_platform::ConversationKey,
    ) -> Result<Option<SessionInfo>, StoreError> {
        if !daemon::create_platform_conversation(&self.conns, conversation, key).await? {
            return Ok(None);
        }
        self.session(&conversation.id).await
    }

    async fn list_conversations(
        &self,
        filter: &ConversationFilter,
    ) -> Result<Vec<SessionInfo>, StoreError> {
        daemon::list_conversations(&self.conns, filter).await
    }

    async fn find_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        daemon::find_runs(&self.conns, filter).await
    }

    async fn enqueue_run(
        &self,
        run: &QueuedRun,
        limit: usize,
    ) -> Result<EnqueueOutcome, StoreError> {
        daemon::enqueue(&self.conns, run, limit).await
    }

    async fn queued_runs(&self, session_id: &str) -> Result<Vec<QueuedRun>, StoreError> {
        daemon::queued_runs(&self.conns, session_id).await
    }

    async fn queued_sessions(&self) -> Result<Vec<String>, StoreError> {
        daemon::queued_sessions(&self.conns).await
    }

    async fn cancel_queued(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        daemon::cancel_queued(&self.conns, run_id, at).await
    }

    async fn session_files(&self, session_id: &str) -> Result<Vec<FileRecord>, StoreError> {
        crate::files::of_session(&self.conns, session_id).await
    }

    async fn forget_attachments(&self, files: &[FileRecord]) -> Result<(), StoreError> {
        crate::files::forget_attachments(&self.conns, files).await
    }
}
