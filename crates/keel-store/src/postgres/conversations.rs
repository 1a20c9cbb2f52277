//! keel-platform's `ConversationStore` on PostgreSQL.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::files::FileRecord;
use keel_core::*;
use keel_platform::*;

use super::PgStore;

#[async_trait]
impl ConversationStore for PgStore {
    async fn create_conversation(
        &self,
        _conversation: &NewConversation,
    ) -> Result<Option<SessionInfo>, StoreError> {
        Err(super::not_yet("ConversationStore::create_conversation"))
    }

    async fn platform_conversation(
        &self,
        _key: &ConversationKey,
    ) -> Result<Option<SessionInfo>, StoreError> {
        Err(super::not_yet("ConversationStore::platform_conversation"))
    }

    async fn create_platform_conversation(
        &self,
        _conversation: &NewConversation,
        _key: &ConversationKey,
    ) -> Result<Option<SessionInfo>, StoreError> {
        Err(super::not_yet(
            "ConversationStore::create_platform_conversation",
        ))
    }

    async fn set_lane_policy(
        &self,
        _session_id: &str,
        _policy: keel_core::LanePolicy,
    ) -> Result<bool, StoreError> {
        Err(super::not_yet("ConversationStore::set_lane_policy"))
    }

    async fn list_conversations(
        &self,
        _filter: &ConversationFilter,
    ) -> Result<Vec<SessionInfo>, StoreError> {
        Err(super::not_yet("ConversationStore::list_conversations"))
    }

    async fn find_runs(&self, _filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        Err(super::not_yet("ConversationStore::find_runs"))
    }

    async fn enqueue_run(
        &self,
        _run: &QueuedRun,
        _limit: usize,
    ) -> Result<EnqueueOutcome, StoreError> {
        Err(super::not_yet("ConversationStore::enqueue_run"))
    }

    async fn queued_runs(&self, _session_id: &str) -> Result<Vec<QueuedRun>, StoreError> {
        Err(super::not_yet("ConversationStore::queued_runs"))
    }

    async fn queued_sessions(&self) -> Result<Vec<String>, StoreError> {
        Err(super::not_yet("ConversationStore::queued_sessions"))
    }

    async fn cancel_queued(&self, _run_id: &str, _at: DateTime<Utc>) -> Result<bool, StoreError> {
        Err(super::not_yet("ConversationStore::cancel_queued"))
    }

    async fn claim_queued(&self, _claim: &QueueClaim<'_>) -> Result<Vec<QueuedRun>, StoreError> {
        Err(super::not_yet("ConversationStore::claim_queued"))
    }

    async fn absorb_queued(
        &self,
        _into: &str,
        _absorbed: &[String],
        _message: Option<&str>,
        _how: &str,
        _at: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        Err(super::not_yet("ConversationStore::absorb_queued"))
    }

    async fn roll_back_run(
        &self,
        _run_id: &str,
        _by: &str,
        _at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Err(super::not_yet("ConversationStore::roll_back_run"))
    }

    async fn rolled_back_runs(
        &self,
        _session_id: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Err(super::not_yet("ConversationStore::rolled_back_runs"))
    }

    async fn session_files(&self, _session_id: &str) -> Result<Vec<FileRecord>, StoreError> {
        Err(super::not_yet("ConversationStore::session_files"))
    }

    async fn forget_attachments(&self, _files: &[FileRecord]) -> Result<(), StoreError> {
        Err(super::not_yet("ConversationStore::forget_attachments"))
    }
}
