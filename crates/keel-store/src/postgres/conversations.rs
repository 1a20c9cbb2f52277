//! keel-platform's `ConversationStore` on PostgreSQL: conversations made for a user or by a
//! platform key, their listings, lane policies and rolled-back runs, and their attachments,
//! with the SQLite store's statements and decoders wherever the text is the same; the lanes'
//! queues are in `queue.rs`.
//!
//! A platform conversation and its key are made in one transaction: of two workers making the
//! same key's conversation at once, the second waits on the key's primary key, finds it taken
//! and keeps nothing.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::files::FileRecord;
use keel_core::{RunRecord, SessionInfo, StoreError};
use keel_platform::{
    ConversationFilter, ConversationKey, ConversationStore, EnqueueOutcome, NewConversation,
    QueueClaim, QueuedRun, RunFilter,
};
use sqlx::postgres::{PgPool, PgRow};

use super::{PgStore, queue};
use crate::OrBackend;
use crate::codec::{self, optional_json, timestamp};
use crate::conversations::{
    CREATE_CONVERSATION, KEYED_CONVERSATION, conversations_sql, create_keyed_conversation,
    key_parts, runs_sql,
};
use crate::lane_policies::{ROLL_BACK, ROLLED_BACK, SET_POLICY};

/// `crate::conversations`' text for a platform conversation, returning a row when it made it.
const CREATE_KEYED_CONVERSATION: &str = concat!(create_keyed_conversation!(), " RETURNING 1");

/// Keeps key `$2`…`$7` of conversation `$1` unless the key (or the conversation) has one;
/// returns a row when it did.
const KEEP_CONVERSATION_KEY: &str = "INSERT INTO platform_conversations \
     (kind, platform, server_id, channel_id, thread_id, sender, session_id) \
     VALUES ($2, $3, $4, $5, $6, $7, $1) ON CONFLICT DO NOTHING RETURNING 1";

/// Every file of conversation `$1`, oldest first.
const OF_SESSION: &str = "SELECT id, name, media_type, size, sha256, session_id, user_id, \
     run_id, origin, created_at FROM files WHERE session_id = $1 ORDER BY created_at, id";

/// Forgets attachments no run has taken, by id (`$1`).
const FORGET_ATTACHMENTS: &str = "DELETE FROM files WHERE id = ANY($1) \
     AND origin = 'attachment' AND run_id IS NULL";

/// Locks the contents `$1` until the transaction ends: a record of one kept meanwhile by
/// another transaction is committed (and seen by [`FORGET_UNUSED_CONTENT`]) first.
const LOCK_CONTENT: &str = "SELECT 1 FROM file_blobs WHERE sha256 = ANY($1) FOR UPDATE";

/// Forgets the contents `$1` no record keeps.
const FORGET_UNUSED_CONTENT: &str = "DELETE FROM file_blobs WHERE sha256 = ANY($1) \
     AND NOT EXISTS (SELECT 1 FROM files WHERE files.sha256 = file_blobs.sha256)";

/// Runs a listing of `crate::conversations` (built from its constants and parameter numbers
/// only) with `binds` as `$1`, `$2`, ….
async fn fetch(
    pool: &PgPool,
    sql: String,
    binds: &[String],
    doing: &str,
) -> Result<Vec<PgRow>, StoreError> {
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    for value in binds {
        query = query.bind(value);
    }
    query.fetch_all(pool).await.or_backend(|| doing.to_string())
}

impl PgStore {
    /// Creates a platform conversation with its key in one transaction; `false` when its id or
    /// key is taken (nothing is kept then).
    async fn create_keyed(
        &self,
        conversation: &NewConversation,
        key: &ConversationKey,
    ) -> Result<bool, StoreError> {
        if conversation.place.as_ref() != Some(&key.place()) {
            return Err(StoreError::Conflict(format!(
                "conversation `{}` is not at its key's place",
                conversation.id
            )));
        }
        let doing = || format!("cannot create conversation `{}`", conversation.id);
        let place = optional_json(conversation.place.as_ref(), "a place")?;
        let mut tx = self.pool.begin().await.or_backend(doing)?;
        let mut create = sqlx::query(CREATE_KEYED_CONVERSATION)
            .bind(&conversation.id)
            .bind(timestamp(conversation.at))
            .bind(conversation.owner.as_deref())
            .bind(conversation.lane_policy.as_str())
            .bind(place.as_deref())
            .bind(conversation.trusted);
        let mut keep = sqlx::query(KEEP_CONVERSATION_KEY).bind(&conversation.id);
        for part in key_parts(key) {
            create = create.bind(part);
            keep = keep.bind(part);
        }
        let made = create.fetch_optional(&mut *tx).await.or_backend(doing)?;
        // The key's primary key decides a race between two workers making it.
        let kept = match made {
            Some(_) => keep.fetch_optional(&mut *tx).await.or_backend(doing)?,
            None => None,
        };
        if kept.is_none() {
            tx.rollback().await.or_backend(doing)?;
            return Ok(false);
        }
        tx.commit().await.or_backend(doing)?;
        Ok(true)
    }
}

#[async_trait]
impl ConversationStore for PgStore {
    async fn create_conversation(
        &self,
        conversation: &NewConversation,
    ) -> Result<Option<SessionInfo>, StoreError> {
        let created = sqlx::query(CREATE_CONVERSATION)
            .bind(&conversation.id)
            .bind(timestamp(conversation.at))
            .bind(conversation.owner.as_deref())
            .bind(conversation.lane_policy.as_str())
            .bind(optional_json(conversation.place.as_ref(), "a place")?)
            .bind(conversation.trusted)
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| format!("cannot create conversation `{}`", conversation.id))?;
        if created.is_none() {
            return Ok(None);
        }
        super::runs::session(&self.pool, &conversation.id).await
    }

    async fn platform_conversation(
        &self,
        key: &ConversationKey,
    ) -> Result<Option<SessionInfo>, StoreError> {
        let mut query = sqlx::query(KEYED_CONVERSATION);
        for part in key_parts(key) {
            query = query.bind(part);
        }
        let row = query
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| format!("cannot find the conversation of `{}`", key.readable_id()))?;
        row.as_ref().map(codec::decode_session).transpose()
    }

    async fn create_platform_conversation(
        &self,
        conversation: &NewConversation,
        key: &ConversationKey,
    ) -> Result<Option<SessionInfo>, StoreError> {
        if !self.create_keyed(conversation, key).await? {
            return Ok(None);
        }
        super::runs::session(&self.pool, &conversation.id).await
    }

    async fn set_lane_policy(
        &self,
        session_id: &str,
        policy: keel_core::LanePolicy,
    ) -> Result<bool, StoreError> {
        let set = sqlx::query(SET_POLICY)
            .bind(session_id)
            .bind(policy.as_str())
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| format!("cannot set the lane policy of `{session_id}`"))?;
        Ok(set.is_some())
    }

    async fn list_conversations(
        &self,
        filter: &ConversationFilter,
    ) -> Result<Vec<SessionInfo>, StoreError> {
        let (sql, binds) = conversations_sql(filter);
        let rows = fetch(&self.pool, sql, &binds, "cannot list conversations").await?;
        rows.iter().map(codec::decode_session).collect()
    }

    async fn find_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let (sql, binds) = runs_sql(filter);
        let rows = fetch(&self.pool, sql, &binds, "cannot list runs").await?;
        rows.iter().map(codec::decode_run).collect()
    }

    async fn enqueue_run(
        &self,
        run: &QueuedRun,
        limit: usize,
    ) -> Result<EnqueueOutcome, StoreError> {
        queue::enqueue(&self.pool, run, limit).await
    }

    async fn queued_runs(&self, session_id: &str) -> Result<Vec<QueuedRun>, StoreError> {
        queue::queued_runs(&self.pool, session_id).await
    }

    async fn queued_sessions(&self) -> Result<Vec<String>, StoreError> {
        queue::queued_sessions(&self.pool).await
    }

    async fn cancel_queued(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        queue::cancel_queued(&self.pool, run_id, at).await
    }

    async fn claim_queued(&self, claim: &QueueClaim<'_>) -> Result<Vec<QueuedRun>, StoreError> {
        queue::claim_queued(&self.pool, claim).await
    }

    async fn absorb_queued(
        &self,
        into: &str,
        absorbed: &[String],
        message: Option<&str>,
        how: &str,
        at: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        queue::absorb_queued(&self.pool, into, absorbed, message, how, at).await
    }

    async fn roll_back_run(
        &self,
        run_id: &str,
        by: &str,
        _at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let marked = sqlx::query(ROLL_BACK)
            .bind(run_id)
            .bind(by)
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| format!("cannot roll back run `{run_id}`"))?;
        Ok(marked.is_some())
    }

    async fn rolled_back_runs(
        &self,
        session_id: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        sqlx::query_as(ROLLED_BACK)
            .bind(session_id)
            .fetch_all(&self.pool)
            .await
            .or_backend(|| format!("cannot read the rolled-back runs of `{session_id}`"))
    }

    async fn session_files(&self, session_id: &str) -> Result<Vec<FileRecord>, StoreError> {
        let rows = sqlx::query(OF_SESSION)
            .bind(session_id)
            .fetch_all(&self.pool)
            .await
            .or_backend(|| format!("cannot read the files of conversation `{session_id}`"))?;
        rows.iter().map(crate::files::decode).collect()
    }

    async fn forget_attachments(&self, files: &[FileRecord]) -> Result<(), StoreError> {
        if files.is_empty() {
            return Ok(());
        }
        let doing = || "cannot forget a refused message's attachments".to_string();
        let ids: Vec<&str> = files.iter().map(|file| file.id.as_str()).collect();
        let hashes: Vec<&str> = files.iter().map(|file| file.sha256.as_str()).collect();
        let mut tx = self.pool.begin().await.or_backend(doing)?;
        sqlx::query(FORGET_ATTACHMENTS)
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .or_backend(doing)?;
        sqlx::query(LOCK_CONTENT)
            .bind(&hashes)
            .execute(&mut *tx)
            .await
            .or_backend(doing)?;
        sqlx::query(FORGET_UNUSED_CONTENT)
            .bind(&hashes)
            .execute(&mut *tx)
            .await
            .or_backend(doing)?;
        tx.commit().await.or_backend(doing)
    }
}
