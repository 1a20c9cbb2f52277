//! The SQLite store's conversations (`migrations/0008_daemon.sql`): conversations with owners
//! and lane policies, made for a user or found and made by a platform key, the pages the API
//! lists of them and of their runs, the lanes' queues of accepted messages, and their
//! attachments ([`ConversationStore`]). Writes go through the writer like every other
//! ([`crate::writer`]); an enqueue is one transaction that counts the lane's queue, so its limit
//! holds across processes.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::files::FileRecord;
use keel_core::{RunRecord, SessionInfo, Store, StoreError};
use keel_platform::{
    ConversationFilter, ConversationKey, ConversationStore, EnqueueOutcome, NewConversation,
    QueueClaim, QueuedRun, RunFilter,
};
use sqlx::sqlite::SqliteRow;

use crate::batch::Batch;
use crate::codec::sql_limit;
use crate::codec::{self, optional_json, timestamp};
use crate::connections::Connections;
use crate::sqlite_store::{run_columns, session_columns};
use crate::{OrBackend, SqliteStore};

/// Creates conversation `$1` at `$2` unless its id is taken; returns a row when it did.
pub(crate) const CREATE_CONVERSATION: &str = "INSERT INTO sessions \
     (id, created_at, updated_at, title, message_count, owner, lane_policy, place, trusted) \
     VALUES ($1, $2, $2, NULL, 0, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING RETURNING 1";

/// Creates a platform conversation (the parameters of [`CREATE_CONVERSATION`], then its key
/// `$7`…`$12`) unless its id or its key is taken; [`KEEP_CONVERSATION_KEY`] follows it on
/// SQLite. A macro, so that PostgreSQL's text adds `RETURNING` to the same words.
macro_rules! create_keyed_conversation {
    () => {
        "INSERT INTO sessions \
         (id, created_at, updated_at, title, message_count, owner, lane_policy, place, trusted) \
         SELECT $1, $2, $2, NULL, 0, $3, $4, $5, $6 WHERE NOT EXISTS (SELECT 1 FROM \
         platform_conversations WHERE kind = $7 AND platform = $8 AND server_id = $9 AND \
         channel_id = $10 AND thread_id = $11 AND sender = $12) ON CONFLICT (id) DO NOTHING"
    };
}
pub(crate) use create_keyed_conversation;

/// See [`create_keyed_conversation`].
const CREATE_KEYED_CONVERSATION: &str = create_keyed_conversation!();

/// Keeps the key of the conversation [`CREATE_KEYED_CONVERSATION`] made, when it made it (only
/// then: a taken id is another session's, never given this key); returns a row then.
const KEEP_CONVERSATION_KEY: &str = "INSERT INTO platform_conversations \
     (kind, platform, server_id, channel_id, thread_id, sender, session_id) \
     SELECT $7, $8, $9, $10, $11, $12, $1 WHERE changes() = 1 RETURNING 1";

/// The session a platform key names.
pub(crate) const KEYED_CONVERSATION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM sessions WHERE id = (SELECT session_id FROM platform_conversations WHERE kind = $1 \
     AND platform = $2 AND server_id = $3 AND channel_id = $4 AND thread_id = $5 AND sender = $6)"
);

/// The run an inbound event became.
pub(crate) const INBOUND_RUN: &str =
    "SELECT run_id FROM inbound_events WHERE source = $1 AND event_id = $2";

/// Creates a conversation; `None` when the id is taken.
pub(crate) async fn create_conversation(
    conns: &Connections,
    conversation: &NewConversation,
) -> Result<bool, StoreError> {
    let batch = Batch::of(CREATE_CONVERSATION)
        .bind(&conversation.id)
        .bind(timestamp(conversation.at))
        .bind(conversation.owner.as_deref())
        .bind(conversation.lane_policy.as_str())
        .bind(optional_json(conversation.place.as_ref(), "a place")?)
        .bind(conversation.trusted);
    let created = conns
        .transaction(vec![batch])
        .await
        .or_backend(|| format!("cannot create conversation `{}`", conversation.id))?;
    Ok(created.is_some())
}

/// A platform key's parts as stored: '' for an absent one (ids from outside are never empty).
pub(crate) fn key_parts(key: &ConversationKey) -> [&str; 6] {
    [
        key.kind.as_str(),
        &key.platform,
        key.server_id.as_deref().unwrap_or_default(),
        &key.channel_id,
        key.thread_id.as_deref().unwrap_or_default(),
        key.sender.as_deref().unwrap_or_default(),
    ]
}

/// Creates a platform conversation with its key; `false` when its id or key is taken.
pub(crate) async fn create_platform_conversation(
    conns: &Connections,
    conversation: &NewConversation,
    key: &ConversationKey,
) -> Result<bool, StoreError> {
    if conversation.place.as_ref() != Some(&key.place()) {
        return Err(StoreError::Conflict(format!(
            "conversation `{}` is not at its key's place",
            conversation.id
        )));
    }
    let mut batch = Batch::of(CREATE_KEYED_CONVERSATION)
        .bind(&conversation.id)
        .bind(timestamp(conversation.at))
        .bind(conversation.owner.as_deref())
        .bind(conversation.lane_policy.as_str())
        .bind(optional_json(conversation.place.as_ref(), "a place")?)
        .bind(conversation.trusted);
    for part in key_parts(key) {
        batch.param(part);
    }
    batch.end_statement().sql(KEEP_CONVERSATION_KEY);
    let created = conns
        .transaction(vec![batch])
        .await
        .or_backend(|| format!("cannot create conversation `{}`", conversation.id))?;
    Ok(created.is_some())
}

/// The conversation a platform key names.
pub(crate) async fn platform_conversation(
    conns: &Connections,
    key: &ConversationKey,
) -> Result<Option<SessionInfo>, StoreError> {
    let mut query = sqlx::query(KEYED_CONVERSATION);
    for part in key_parts(key) {
        query = query.bind(part);
    }
    let row = query
        .fetch_optional(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot find the conversation of `{}`", key.readable_id()))?;
    row.as_ref().map(codec::decode_session).transpose()
}

/// Conversations, newest first, as `filter` says (keyset pages by creation time and id).
pub(crate) async fn list_conversations(
    conns: &Connections,
    filter: &ConversationFilter,
) -> Result<Vec<SessionInfo>, StoreError> {
    let (sql, binds) = conversations_sql(filter);
    let rows = fetch(conns, sql, &binds, "cannot list conversations").await?;
    rows.iter().map(codec::decode_session).collect()
}

/// The query listing conversations as `filter` says, from this module's constants and
/// parameter numbers only, and its parameters (`$1`, `$2`, …); the same text on both databases.
pub(crate) fn conversations_sql(filter: &ConversationFilter) -> (String, Vec<String>) {
    let mut sql = format!("SELECT {} FROM sessions s WHERE 1 = 1", session_columns!());
    let mut binds: Vec<String> = Vec::new();
    if let Some(owner) = &filter.owner {
        binds.push(owner.clone());
        sql.push_str(&format!(" AND owner = ${}", binds.len()));
    }
    if let Some(before) = &filter.before {
        binds.push(before.clone());
        let n = binds.len();
        sql.push_str(&format!(
            " AND EXISTS (SELECT 1 FROM sessions c WHERE c.id = ${n}) AND (s.created_at, s.id) < \
             (SELECT created_at, id FROM sessions WHERE id = ${n})"
        ));
    }
    sql.push_str(&format!(
        " ORDER BY s.created_at DESC, s.id DESC LIMIT {}",
        sql_limit(filter.limit)
    ));
    (sql, binds)
}

/// Implied by a filter on an unfinished state, and said outright so that the planner may read
/// the partial index of unfinished runs (`runs_active`, whose WHERE clause this is word for
/// word, `migrations/0021_…`; PostgreSQL's `NOT IN` list is the same set) instead of walking
/// every run newest first to find the few running or waiting ones.
const UNFINISHED: &str = " AND r.state <> 'completed' AND r.state <> 'cancelled' \
     AND r.state <> 'timed_out' AND r.state <> 'max_steps' AND r.state <> 'budget_exceeded' \
     AND r.state <> 'error'";

/// Runs, newest first, as `filter` says (keyset pages by start time and id).
pub(crate) async fn find_runs(
    conns: &Connections,
    filter: &RunFilter,
) -> Result<Vec<RunRecord>, StoreError> {
    let (sql, binds) = runs_sql(filter);
    let rows = fetch(conns, sql, &binds, "cannot list runs").await?;
    rows.iter().map(codec::decode_run).collect()
}

/// The query listing runs as `filter` says, from this module's constants and parameter
/// numbers only, and its parameters (`$1`, `$2`, …); the same text on both databases.
pub(crate) fn runs_sql(filter: &RunFilter) -> (String, Vec<String>) {
    let columns = run_columns!()
        .split(", ")
        .map(|c| format!("r.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut sql = format!("SELECT {columns} FROM runs r WHERE 1 = 1");
    let mut binds: Vec<String> = Vec::new();
    let mut bind = |value: &str, sql: &mut String, clause: &dyn Fn(usize) -> String| {
        binds.push(value.to_string());
        sql.push_str(&clause(binds.len()));
    };
    if let Some(session) = &filter.session_id {
        bind(session, &mut sql, &|n| format!(" AND r.session_id = ${n}"));
    }
    if let Some(state) = filter.state {
        bind(state.as_str(), &mut sql, &|n| {
            format!(" AND r.state = ${n}")
        });
        if !state.is_terminal() {
            sql.push_str(UNFINISHED);
        }
    }
    if let Some(owner) = &filter.owner {
        bind(owner, &mut sql, &|n| {
            format!(" AND r.session_id IN (SELECT id FROM sessions WHERE owner = ${n})")
        });
    }
    if let Some(before) = &filter.before {
        bind(before, &mut sql, &|n| {
            format!(
                " AND EXISTS (SELECT 1 FROM runs c WHERE c.id = ${n}) AND (r.started_at, r.id) < \
                 (SELECT started_at, id FROM runs WHERE id = ${n})"
            )
        });
    }
    sql.push_str(&format!(
        " ORDER BY r.started_at DESC, r.id DESC LIMIT {}",
        sql_limit(filter.limit)
    ));
    (sql, binds)
}

/// Runs a listing built from this module's constants and parameter numbers (no outside text
/// in `sql`), with `binds` as `$1`, `$2`, ….
async fn fetch(
    conns: &Connections,
    sql: String,
    binds: &[String],
    doing: &str,
) -> Result<Vec<SqliteRow>, StoreError> {
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    for value in binds {
        query = query.bind(value);
    }
    query
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| doing.to_string())
}

/// The run an inbound event became, when it was received before.
pub(crate) async fn inbound_run(
    conns: &Connections,
    key: &keel_platform::InboundKey,
) -> Result<Option<String>, StoreError> {
    sqlx::query_scalar(INBOUND_RUN)
        .bind(&key.source)
        .bind(&key.event_id)
        .fetch_optional(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read inbound event `{}`", key.event_id))
}

#[async_trait]
impl ConversationStore for SqliteStore {
    async fn create_conversation(
        &self,
        conversation: &NewConversation,
    ) -> Result<Option<SessionInfo>, StoreError> {
        if !create_conversation(&self.conns, conversation).await? {
            return Ok(None);
        }
        self.session(&conversation.id).await
    }

    async fn platform_conversation(
        &self,
        key: &keel_platform::ConversationKey,
    ) -> Result<Option<SessionInfo>, StoreError> {
        platform_conversation(&self.conns, key).await
    }

    async fn create_platform_conversation(
        &self,
        conversation: &NewConversation,
        key: &keel_platform::ConversationKey,
    ) -> Result<Option<SessionInfo>, StoreError> {
        if !create_platform_conversation(&self.conns, conversation, key).await? {
            return Ok(None);
        }
        self.session(&conversation.id).await
    }

    async fn set_lane_policy(
        &self,
        session_id: &str,
        policy: keel_core::LanePolicy,
    ) -> Result<bool, StoreError> {
        crate::lane_policies::set_lane_policy(&self.conns, session_id, policy).await
    }

    async fn list_conversations(
        &self,
        filter: &ConversationFilter,
    ) -> Result<Vec<SessionInfo>, StoreError> {
        list_conversations(&self.conns, filter).await
    }

    async fn find_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        find_runs(&self.conns, filter).await
    }

    async fn enqueue_run(
        &self,
        run: &QueuedRun,
        limit: usize,
    ) -> Result<EnqueueOutcome, StoreError> {
        crate::queue::enqueue(&self.conns, run, limit).await
    }

    async fn queued_runs(&self, session_id: &str) -> Result<Vec<QueuedRun>, StoreError> {
        crate::queue::queued_runs(&self.conns, session_id).await
    }

    async fn queued_sessions(&self) -> Result<Vec<String>, StoreError> {
        crate::queue::queued_sessions(&self.conns).await
    }

    async fn cancel_queued(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        crate::queue::cancel_queued(&self.conns, run_id, at).await
    }

    async fn claim_queued(&self, claim: &QueueClaim<'_>) -> Result<Vec<QueuedRun>, StoreError> {
        crate::queue::claim_queued(&self.conns, claim).await
    }

    async fn absorb_queued(
        &self,
        into: &str,
        absorbed: &[String],
        message: Option<&str>,
        how: &str,
        at: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        crate::lane_policies::absorb_queued(&self.conns, into, absorbed, message, how, at).await
    }

    async fn roll_back_run(
        &self,
        run_id: &str,
        by: &str,
        _at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        crate::lane_policies::roll_back_run(&self.conns, run_id, by).await
    }

    async fn rolled_back_runs(
        &self,
        session_id: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        crate::lane_policies::rolled_back_runs(&self.conns, session_id).await
    }

    async fn session_files(&self, session_id: &str) -> Result<Vec<FileRecord>, StoreError> {
        crate::files::of_session(&self.conns, session_id).await
    }

    async fn forget_attachments(&self, files: &[FileRecord]) -> Result<(), StoreError> {
        crate::files::forget_attachments(&self.conns, files).await
    }
}
