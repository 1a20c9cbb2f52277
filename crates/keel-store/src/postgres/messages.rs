//! Messages on PostgreSQL: appending a batch to a session (its count, `updated_at` and title
//! bumped, the rows numbered from the count) inside a caller's transaction, with the plain
//! columns SQLite computes from `meta` (`importance`, `model`, `output_tokens`, `pinned`,
//! `internal`) filled here from the message's metadata; and the reads of a session's messages.

use keel_core::store::session_title;
use keel_core::{Message, Role, StoreError, StoredMessage};
use sqlx::postgres::{PgExecutor, PgPool};

use super::text;
use crate::OrBackend;
use crate::codec::{self, MessageColumns, sql_limit};

/// Bumps session `$1` by `$4` messages at `$2` (title candidate `$3`), creating it if missing,
/// and answers its new count (SQLite's statement, with the count returned).
const BUMP_SESSION: &str = "INSERT INTO sessions (id, created_at, updated_at, title, message_count) \
     VALUES ($1, $2, $2, $3, $4) \
     ON CONFLICT (id) DO UPDATE SET \
         updated_at = excluded.updated_at, \
         title = COALESCE(sessions.title, excluded.title), \
         message_count = sessions.message_count + excluded.message_count \
     RETURNING message_count";

/// Inserts the messages of session `$1` numbered from `$2 + 1`, of run `$3`, at `$4`: one row
/// per element of the arrays `$5`… (one array per column).
const INSERT_MESSAGES: &str = "INSERT INTO messages (session_id, seq, run_id, role, content, \
     tool_calls, tool_call_id, reasoning, meta, summary_last, created_at, importance, model, \
     output_tokens, pinned, internal) \
     SELECT $1, $2 + t.n, $3, t.role, t.content, t.tool_calls, t.tool_call_id, t.reasoning, \
         t.meta, t.summary_last, $4, t.importance, t.model, t.output_tokens, t.pinned, t.internal \
     FROM UNNEST($5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], \
         $11::bigint[], $12::float8[], $13::text[], $14::bigint[], $15::bool[], $16::bool[]) \
         WITH ORDINALITY AS t(role, content, tool_calls, tool_call_id, reasoning, meta, \
         summary_last, importance, model, output_tokens, pinned, internal, n)";

/// The messages of a session with the pinned ones of its context (see
/// `Store::context_messages`): SQLite's statement, with PostgreSQL's boolean `pinned`.
const SELECT_CONTEXT_MESSAGES: &str = "SELECT seq, run_id, role, content, tool_calls, \
     tool_call_id, reasoning, meta, created_at FROM messages WHERE session_id = $1 AND seq >= \
     COALESCE((SELECT seq FROM messages WHERE session_id = $1 AND role <> 'tool' AND seq <= \
         (SELECT MIN(seq) FROM messages WHERE session_id = $1 AND pinned \
             AND summary_last IS NULL AND seq <= COALESCE((SELECT summary_last FROM messages \
             WHERE session_id = $1 AND summary_last IS NOT NULL ORDER BY seq DESC LIMIT 1), 0)) \
         ORDER BY seq DESC LIMIT 1), \
     (SELECT MIN(seq) FROM messages WHERE session_id = $1 AND pinned \
         AND summary_last IS NULL AND seq <= COALESCE((SELECT summary_last FROM messages \
         WHERE session_id = $1 AND summary_last IS NOT NULL ORDER BY seq DESC LIMIT 1), 0)), \
     COALESCE((SELECT summary_last FROM messages WHERE session_id = $1 \
         AND summary_last IS NOT NULL ORDER BY seq DESC LIMIT 1), 0) + 1) \
     AND (run_id IS NULL OR run_id NOT IN (SELECT id FROM runs WHERE session_id = $1 \
         AND rolled_back_by IS NOT NULL)) ORDER BY seq";

const SELECT_MESSAGES: &str = "SELECT seq, run_id, role, content, tool_calls, tool_call_id, \
     reasoning, meta, created_at FROM messages WHERE session_id = $1 ORDER BY seq";

const SELECT_MESSAGES_SINCE: &str = "SELECT seq, run_id, role, content, tool_calls, \
     tool_call_id, reasoning, meta, created_at FROM messages \
     WHERE session_id = $1 AND seq >= $2 ORDER BY seq";

const MESSAGES_PAGE: &str = "SELECT seq, run_id, role, content, tool_calls, tool_call_id, \
     reasoning, meta, created_at FROM messages WHERE session_id = $1 AND seq > $2 ORDER BY seq \
     LIMIT $3";

/// The columns of a batch of messages, one array per column.
#[derive(Default)]
struct Rows {
    role: Vec<&'static str>,
    content: Vec<String>,
    tool_calls: Vec<Option<String>>,
    tool_call_id: Vec<Option<String>>,
    reasoning: Vec<Option<String>>,
    meta: Vec<Option<String>>,
    summary_last: Vec<Option<i64>>,
    importance: Vec<Option<f64>>,
    model: Vec<Option<String>>,
    output_tokens: Vec<Option<i64>>,
    pinned: Vec<bool>,
    internal: Vec<bool>,
}

/// A message's importance as SQLite reads it out of the JSON: the `f32`'s shortest decimal
/// text read as a double (0.9, not 0.8999999761581421), so `importance >= 0.9` agrees.
fn importance(value: f32) -> Option<f64> {
    value
        .is_finite()
        .then(|| value.to_string().parse().ok())
        .flatten()
}

/// Appends `messages` to session `session_id` (created if missing) at `now`, for `run_id`:
/// bumps the session and inserts the rows. The caller's transaction makes it atomic.
pub(super) async fn append(
    tx: &mut sqlx::PgConnection,
    session_id: &str,
    run_id: Option<&str>,
    messages: &[Message],
    now: &str,
) -> Result<(), StoreError> {
    let doing = || format!("cannot append messages to session `{session_id}`");
    if messages.is_empty() {
        return sqlx::query(crate::batch::ENSURE_SESSION)
            .bind(session_id)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map(drop)
            .or_backend(doing);
    }
    let title = messages
        .iter()
        .find(|m| m.role == Role::User && !m.is_internal())
        // PostgreSQL's text holds no NUL.
        .map(|m| session_title(&m.content).replace('\0', "\u{FFFD}"));
    let added = i64::try_from(messages.len()).unwrap_or(i64::MAX);
    let count: i64 = sqlx::query_scalar(BUMP_SESSION)
        .bind(session_id)
        .bind(now)
        .bind(title)
        .bind(added)
        .fetch_one(&mut *tx)
        .await
        .or_backend(doing)?;
    let mut rows = Rows::default();
    for message in messages {
        let columns = MessageColumns::encode(message)?;
        rows.role.push(columns.role);
        rows.content
            .push(text::to_column(&message.content).into_owned());
        rows.tool_calls.push(columns.tool_calls);
        rows.tool_call_id.push(message.tool_call_id.clone());
        rows.reasoning.push(columns.reasoning);
        rows.meta.push(columns.meta);
        rows.summary_last.push(columns.summary_last);
        let meta = &message.meta;
        rows.importance.push(meta.importance.and_then(importance));
        rows.model.push(meta.model.clone());
        rows.output_tokens
            .push(meta.output_tokens.and_then(|n| i64::try_from(n).ok()));
        rows.pinned.push(meta.pinned);
        rows.internal.push(meta.internal.is_some());
    }
    sqlx::query(INSERT_MESSAGES)
        .bind(session_id)
        .bind(count - added)
        .bind(run_id)
        .bind(now)
        .bind(rows.role)
        .bind(rows.content)
        .bind(rows.tool_calls)
        .bind(rows.tool_call_id)
        .bind(rows.reasoning)
        .bind(rows.meta)
        .bind(rows.summary_last)
        .bind(rows.importance)
        .bind(rows.model)
        .bind(rows.output_tokens)
        .bind(rows.pinned)
        .bind(rows.internal)
        .execute(&mut *tx)
        .await
        .or_backend(doing)?;
    Ok(())
}

/// Every message of `session_id`, in order.
pub(super) async fn all(pool: &PgPool, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
    read(
        pool,
        sqlx::query(SELECT_MESSAGES).bind(session_id),
        session_id,
    )
    .await
}

/// The context of `session_id` (see `Store::context_messages`).
pub(super) async fn context(
    pool: &PgPool,
    session_id: &str,
) -> Result<Vec<StoredMessage>, StoreError> {
    let query = sqlx::query(SELECT_CONTEXT_MESSAGES).bind(session_id);
    read(pool, query, session_id).await
}

/// The messages of `session_id` from seq `from` on.
pub(super) async fn since(
    pool: &PgPool,
    session_id: &str,
    from: u64,
) -> Result<Vec<StoredMessage>, StoreError> {
    let query = sqlx::query(SELECT_MESSAGES_SINCE)
        .bind(session_id)
        .bind(i64::try_from(from).unwrap_or(i64::MAX));
    read(pool, query, session_id).await
}

/// Up to `limit` messages of `session_id` after seq `after`.
pub(super) async fn page(
    pool: &PgPool,
    session_id: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<StoredMessage>, StoreError> {
    let query = sqlx::query(MESSAGES_PAGE)
        .bind(session_id)
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(sql_limit(limit));
    read(pool, query, session_id).await
}

/// Runs a query of messages of `session_id` and decodes its rows.
async fn read<'q>(
    executor: impl PgExecutor<'_>,
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    session_id: &str,
) -> Result<Vec<StoredMessage>, StoreError> {
    let rows = query
        .fetch_all(executor)
        .await
        .or_backend(|| format!("cannot read messages of session `{session_id}`"))?;
    rows.iter()
        .map(|row| {
            let mut stored = codec::decode_message(row, session_id)?;
            let content = std::mem::take(&mut stored.message.content);
            stored.message.content = text::from_column(content);
            Ok(stored)
        })
        .collect()
}
