//! What the daemon keeps on SQL (`migrations/0008_daemon.sql`): conversations with owners and
//! lane policies, the lanes' queues of accepted messages, API keys, and the pages the API lists.
//! Writes go through the writer like every other ([`crate::writer`]); an enqueue is one
//! transaction that counts the lane's queue, so its limit holds across processes.

use chrono::{DateTime, Utc};
use keel_core::{AgentState, Event, RunRecord, SessionInfo, StoreError, StoredMessage};
use keel_platform::ConversationKey;
use keel_platform::{
    ApiKeyRecord, ConversationFilter, EnqueueOutcome, NewConversation, QueuedRun, RunFilter,
};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::OrBackend;
use crate::batch::Batch;
use crate::codec::{
    self, Place, column, json_column, optional_json, optional_time_column, time_column, timestamp,
};
use crate::connections::Connections;
use crate::sqlite_store::{run_columns, session_columns};

const CREATE_CONVERSATION: &str = "INSERT INTO sessions \
     (id, created_at, updated_at, title, message_count, owner, lane_policy, place, trusted) \
     VALUES ($1, $2, $2, NULL, 0, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING RETURNING 1";

/// Creates a platform conversation (the parameters of [`CREATE_CONVERSATION`], then its key
/// `$7`…`$12`) unless its id or its key is taken; [`KEEP_CONVERSATION_KEY`] follows it.
const CREATE_KEYED_CONVERSATION: &str = "INSERT INTO sessions \
     (id, created_at, updated_at, title, message_count, owner, lane_policy, place, trusted) \
     SELECT $1, $2, $2, NULL, 0, $3, $4, $5, $6 WHERE NOT EXISTS (SELECT 1 FROM \
     platform_conversations WHERE kind = $7 AND platform = $8 AND server_id = $9 AND \
     channel_id = $10 AND thread_id = $11 AND sender = $12) ON CONFLICT (id) DO NOTHING";

/// Keeps the key of the conversation [`CREATE_KEYED_CONVERSATION`] made, when it made it (only
/// then: a taken id is another session's, never given this key); returns a row then.
const KEEP_CONVERSATION_KEY: &str = "INSERT INTO platform_conversations \
     (kind, platform, server_id, channel_id, thread_id, sender, session_id) \
     SELECT $7, $8, $9, $10, $11, $12, $1 WHERE changes() = 1 RETURNING 1";

/// The session a platform key names.
const KEYED_CONVERSATION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM sessions WHERE id = (SELECT session_id FROM platform_conversations WHERE kind = $1 \
     AND platform = $2 AND server_id = $3 AND channel_id = $4 AND thread_id = $5 AND sender = $6)"
);

/// Queues run `$1` of session `$2` unless the session's queue holds `$6` rows already (or the
/// session does not exist).
const ENQUEUE: &str = "INSERT INTO run_queue \
     (run_id, session_id, user_id, message, enqueued_at, provider, model, options) \
     SELECT $1, $2, $3, $4, $5, $7, $8, $9 \
     WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $2) \
     AND (SELECT count(*) FROM run_queue WHERE session_id = $2) < $6";

/// The queued run's record, when its queue row was written.
const INSERT_QUEUED_RUN: &str = "INSERT INTO runs (id, session_id, state, provider, model, \
     iterations, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, started_at, \
     updated_at, cost, resume_available, event_count) \
     SELECT $1, $2, 'queued', $7, $8, 0, 0, 0, 0, 0, $5, $5, 0, 0, 0 \
     WHERE EXISTS (SELECT 1 FROM run_queue WHERE run_id = $1)";

/// Whether the run was queued.
const WAS_QUEUED: &str = "SELECT EXISTS (SELECT 1 FROM run_queue WHERE run_id = $1)";

const QUEUE_LENGTH: &str = "SELECT count(*) AS n FROM run_queue WHERE session_id = $1";

/// Queued runs of a session before `$2` (by arrival).
const QUEUED_AHEAD: &str = "SELECT count(*) AS n FROM run_queue \
     WHERE session_id = $1 AND seq < (SELECT seq FROM run_queue WHERE run_id = $2)";

const QUEUED_RUNS: &str = "SELECT run_id, session_id, user_id, message, enqueued_at, provider, \
     model, options FROM run_queue WHERE session_id = $1 ORDER BY seq";

const QUEUED_SESSIONS: &str =
    "SELECT session_id FROM run_queue GROUP BY session_id ORDER BY min(seq)";

/// Takes run `$1` out of the queue; returns a row when it was there.
const DEQUEUE: &str = "DELETE FROM run_queue WHERE run_id = $1 RETURNING 1";

/// Marks a run taken out of the queue cancelled, at `$2`.
const CANCEL_RUN: &str = "UPDATE runs SET state = 'cancelled', updated_at = $2, finished_at = $2, \
     cancel_requested_at = COALESCE(cancel_requested_at, $2) WHERE id = $1";

const SAVE_KEY: &str = "INSERT INTO api_keys \
     (id, hash, user_id, admin, created_at, revoked_at, platforms) VALUES ($1, $2, $3, $4, $5, $6, $7)";

const KEY_BY_HASH: &str = "SELECT id, hash, user_id, admin, created_at, revoked_at, platforms \
     FROM api_keys WHERE hash = $1";

const LIST_KEYS: &str = "SELECT id, hash, user_id, admin, created_at, revoked_at, platforms \
     FROM api_keys ORDER BY created_at, id";

const REVOKE_KEY: &str =
    "UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL RETURNING 1";

const MESSAGES_PAGE: &str = "SELECT seq, run_id, role, content, tool_calls, tool_call_id, \
     reasoning, meta, created_at FROM messages WHERE session_id = $1 AND seq > $2 ORDER BY seq \
     LIMIT $3";

/// The rows holding events above `$2` (a row holds a commit's events, see
/// `migrations/0020_events_per_commit.sql`): of `run_events`, from the last row that starts at
/// or below `$2`, which may hold some of them, both found through the primary key; of the run's
/// checkpoints (`migrations/0023_events_with_their_checkpoint.sql`), those whose last event is
/// above `$2`, and any without a number, which the decoder reports as corrupt rather than
/// skip.
const EVENTS_AFTER: &str = crate::durability::select_event_rows!(
    " AND seq >= IFNULL((SELECT max(seq) FROM run_events WHERE run_id = $1 AND seq <= $2), 0)",
    " AND (first_event IS NULL OR first_event + events > $2)"
);

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
fn key_parts(key: &ConversationKey) -> [&str; 6] {
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
    let rows = fetch(conns, sql, &binds, "cannot list conversations").await?;
    rows.iter().map(codec::decode_session).collect()
}

/// Runs, newest first, as `filter` says (keyset pages by start time and id).
pub(crate) async fn find_runs(
    conns: &Connections,
    filter: &RunFilter,
) -> Result<Vec<RunRecord>, StoreError> {
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
    let rows = fetch(conns, sql, &binds, "cannot list runs").await?;
    rows.iter().map(codec::decode_run).collect()
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

/// Up to `limit` messages of a session after seq `after`.
pub(crate) async fn messages_page(
    conns: &Connections,
    session_id: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<StoredMessage>, StoreError> {
    let rows = sqlx::query(MESSAGES_PAGE)
        .bind(session_id)
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(sql_limit(limit))
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read messages of session `{session_id}`"))?;
    rows.iter()
        .map(|row| codec::decode_message(row, session_id))
        .collect()
}

/// The run's events after seq `after`, with their seqs.
pub(crate) async fn events_after(
    conns: &Connections,
    run_id: &str,
    after: u64,
) -> Result<Vec<(u64, Event)>, StoreError> {
    let rows = sqlx::query(EVENTS_AFTER)
        .bind(run_id)
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read the events of run `{run_id}`"))?;
    codec::decode_events(&rows, run_id, i64::try_from(after).unwrap_or(i64::MAX))
}

/// Queues a run (see [`keel_core::Store::enqueue_run`]).
pub(crate) async fn enqueue(
    conns: &Connections,
    run: &QueuedRun,
    limit: usize,
) -> Result<EnqueueOutcome, StoreError> {
    let doing = || format!("cannot queue run `{}`", run.run_id);
    let mut batch = Batch::of(ENQUEUE)
        .bind(&run.run_id)
        .bind(&run.session_id)
        .bind(run.user_id.as_deref())
        .bind(&run.message)
        .bind(timestamp(run.enqueued_at))
        .bind(sql_limit(limit))
        .bind(&run.provider)
        .bind(&run.model)
        .bind(optional_json(
            (run.options != Default::default()).then_some(&run.options),
            "run options",
        )?);
    batch.end_statement().sql(INSERT_QUEUED_RUN).end_statement();
    batch.sql(WAS_QUEUED);
    let queued = conns
        .transaction(vec![batch])
        .await
        .or_backend(doing)?
        .unwrap_or(false);
    let mut reader = conns.reader().await?;
    if queued {
        let ahead: i64 = sqlx::query(QUEUED_AHEAD)
            .bind(&run.session_id)
            .bind(&run.run_id)
            .fetch_one(&mut *reader)
            .await
            .or_backend(doing)?
            .try_get("n")
            .or_backend(doing)?;
        return Ok(EnqueueOutcome::Queued {
            ahead: usize::try_from(ahead).unwrap_or(0),
        });
    }
    let exists = sqlx::query("SELECT 1 FROM sessions WHERE id = $1")
        .bind(&run.session_id)
        .fetch_optional(&mut *reader)
        .await
        .or_backend(doing)?;
    if exists.is_none() {
        return Err(StoreError::NotFound(format!(
            "session `{}`",
            run.session_id
        )));
    }
    let queued: i64 = sqlx::query(QUEUE_LENGTH)
        .bind(&run.session_id)
        .fetch_one(&mut *reader)
        .await
        .or_backend(doing)?
        .try_get("n")
        .or_backend(doing)?;
    Ok(EnqueueOutcome::Full {
        queued: usize::try_from(queued).unwrap_or(0),
    })
}

/// The session's queued runs, oldest first.
pub(crate) async fn queued_runs(
    conns: &Connections,
    session_id: &str,
) -> Result<Vec<QueuedRun>, StoreError> {
    let rows = sqlx::query(QUEUED_RUNS)
        .bind(session_id)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read the queue of session `{session_id}`"))?;
    rows.iter().map(decode_queued).collect()
}

/// Sessions with queued runs, oldest queued first.
pub(crate) async fn queued_sessions(conns: &Connections) -> Result<Vec<String>, StoreError> {
    let rows = sqlx::query(QUEUED_SESSIONS)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| "cannot read the run queue".into())?;
    rows.iter()
        .map(|row| column(row, "session_id", Place::Table("run_queue")))
        .collect()
}

/// Cancels a queued run: out of the queue, its record cancelled, in one transaction.
pub(crate) async fn cancel_queued(
    conns: &Connections,
    run_id: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    // The update first, guarded by the queue row; the delete's returned row is the answer.
    let guarded = format!(
        "{CANCEL_RUN} AND EXISTS (SELECT 1 FROM run_queue WHERE run_id = $1) AND state = '{}'",
        AgentState::Queued.as_str()
    );
    let mut batch = Batch::of(&guarded).bind(run_id).bind(timestamp(at));
    batch.end_statement().sql(DEQUEUE);
    let cancelled = conns
        .transaction(vec![batch])
        .await
        .or_backend(|| format!("cannot cancel queued run `{run_id}`"))?;
    Ok(cancelled.is_some())
}

/// Stores a key.
pub(crate) async fn save_key(conns: &Connections, key: &ApiKeyRecord) -> Result<(), StoreError> {
    let batch = Batch::of(SAVE_KEY)
        .bind(&key.id)
        .bind(&key.hash)
        .bind(key.user_id.as_deref())
        .bind(key.admin)
        .bind(timestamp(key.created_at))
        .bind(key.revoked_at.map(timestamp))
        .bind(optional_json(
            (!key.platforms.is_empty()).then_some(&key.platforms),
            "platforms",
        )?);
    conns
        .transaction(vec![batch])
        .await
        .map(drop)
        .or_backend(|| format!("cannot save API key `{}`", key.id))
}

/// The key with this hash.
pub(crate) async fn key_by_hash(
    conns: &Connections,
    hash: &str,
) -> Result<Option<ApiKeyRecord>, StoreError> {
    let row = sqlx::query(KEY_BY_HASH)
        .bind(hash)
        .fetch_optional(&mut *conns.reader().await?)
        .await
        .or_backend(|| "cannot read an API key".into())?;
    row.as_ref().map(decode_key).transpose()
}

/// Every key.
pub(crate) async fn list_keys(conns: &Connections) -> Result<Vec<ApiKeyRecord>, StoreError> {
    let rows = sqlx::query(LIST_KEYS)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| "cannot list API keys".into())?;
    rows.iter().map(decode_key).collect()
}

/// Revokes a key; false when it does not exist or was revoked already.
pub(crate) async fn revoke_key(
    conns: &Connections,
    id: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let batch = Batch::of(REVOKE_KEY).bind(id).bind(timestamp(at));
    let revoked = conns
        .transaction(vec![batch])
        .await
        .or_backend(|| format!("cannot revoke API key `{id}`"))?;
    Ok(revoked.is_some())
}

fn decode_queued(row: &SqliteRow) -> Result<QueuedRun, StoreError> {
    let place = Place::Table("run_queue");
    Ok(QueuedRun {
        run_id: column(row, "run_id", place)?,
        session_id: column(row, "session_id", place)?,
        user_id: column(row, "user_id", place)?,
        message: column(row, "message", place)?,
        enqueued_at: time_column(row, "enqueued_at", place)?,
        provider: column(row, "provider", place)?,
        model: column(row, "model", place)?,
        options: json_column::<keel_core::RunOptions>(row, "options", place)?.unwrap_or_default(),
    })
}

fn decode_key(row: &SqliteRow) -> Result<ApiKeyRecord, StoreError> {
    let place = Place::Table("api_keys");
    Ok(ApiKeyRecord {
        id: column(row, "id", place)?,
        hash: column(row, "hash", place)?,
        user_id: column(row, "user_id", place)?,
        admin: column(row, "admin", place)?,
        platforms: json_column(row, "platforms", place)?.unwrap_or_default(),
        created_at: time_column(row, "created_at", place)?,
        revoked_at: optional_time_column(row, "revoked_at", place)?,
    })
}

/// A `LIMIT` value: any `usize` beyond SQLite's range means "no limit".
fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}
