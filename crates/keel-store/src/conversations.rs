//! The SQLite store's conversations (`migrations/0008_daemon.sql`): conversations with owners
//! and lane policies, made for a user or found and made by a platform key, the pages the API
//! lists of them and of their runs, the lanes' queues of accepted messages, and their
//! attachments ([`ConversationStore`]). Writes go through the writer like every other
//! ([`crate::writer`]); an enqueue is one transaction that counts the lane's queue, so its limit
//! holds across processes.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::files::FileRecord;
use keel_core::{AgentState, RunRecord, SessionInfo, Store, StoreError};
use keel_platform::{
    ConversationFilter, ConversationKey, ConversationStore, EnqueueOutcome, NewConversation,
    QueuedRun, RunFilter,
};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::batch::Batch;
use crate::codec::sql_limit;
use crate::codec::{self, Place, column, json_column, optional_json, time_column, timestamp};
use crate::connections::Connections;
use crate::sqlite_store::{run_columns, session_columns};
use crate::{OrBackend, SqliteStore};

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
     AND (SELECT count(*) FROM run_queue WHERE session_id = $2) < $6 \
     AND NOT EXISTS (SELECT 1 FROM inbound_events WHERE source = $10 AND event_id = $11) \
     AND NOT EXISTS (SELECT 1 FROM schedule_slots WHERE schedule_id = $12 AND slot = $13)";

/// The platform event the queued run came from (`$10`, `$11`), recorded with its queue row.
const RECORD_INBOUND: &str = "INSERT INTO inbound_events (source, event_id, run_id, received_at) \
     SELECT $10, $11, $1, $5 WHERE $10 IS NOT NULL \
     AND EXISTS (SELECT 1 FROM run_queue WHERE run_id = $1)";

/// The schedule slot the queued run fires (`$12`, `$13`), recorded `fired` with its queue row
/// (`migrations/0030_schedules.sql`).
const RECORD_SLOT_FIRED: &str = "INSERT INTO schedule_slots \
     (schedule_id, slot, outcome, run_id, at) SELECT $12, $13, 'fired', $1, $5 \
     WHERE $12 IS NOT NULL AND EXISTS (SELECT 1 FROM run_queue WHERE run_id = $1)";

/// The run a recorded schedule slot became ('' for one recorded without a run).
const SLOT_RUN: &str =
    "SELECT COALESCE(run_id, '') FROM schedule_slots WHERE schedule_id = $1 AND slot = $2";

/// The run an inbound event became.
const INBOUND_RUN: &str = "SELECT run_id FROM inbound_events WHERE source = $1 AND event_id = $2";

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
        )?)
        .bind(run.inbound.as_ref().map(|key| key.source.as_str()))
        .bind(run.inbound.as_ref().map(|key| key.event_id.as_str()))
        .bind(run.slot.as_ref().map(|key| key.schedule_id.as_str()))
        .bind(run.slot.as_ref().map(|key| timestamp(key.slot)));
    batch.end_statement().sql(INSERT_QUEUED_RUN).end_statement();
    batch.sql(RECORD_INBOUND).end_statement();
    batch.sql(RECORD_SLOT_FIRED).end_statement();
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
    if let Some(key) = &run.inbound
        && let Some(first) = inbound_run(conns, key).await?
    {
        return Ok(EnqueueOutcome::Duplicate { run_id: first });
    }
    if let Some(key) = &run.slot {
        let first: Option<String> = sqlx::query_scalar(SLOT_RUN)
            .bind(&key.schedule_id)
            .bind(timestamp(key.slot))
            .fetch_optional(&mut *reader)
            .await
            .or_backend(doing)?;
        if let Some(run_id) = first {
            return Ok(EnqueueOutcome::Duplicate { run_id });
        }
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
        // Recorded in `inbound_events` and `schedule_slots` when it was queued; not needed again.
        inbound: None,
        slot: None,
    })
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
        enqueue(&self.conns, run, limit).await
    }

    async fn queued_runs(&self, session_id: &str) -> Result<Vec<QueuedRun>, StoreError> {
        queued_runs(&self.conns, session_id).await
    }

    async fn queued_sessions(&self) -> Result<Vec<String>, StoreError> {
        queued_sessions(&self.conns).await
    }

    async fn cancel_queued(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        cancel_queued(&self.conns, run_id, at).await
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
