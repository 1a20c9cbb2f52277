//! [`SqliteStore`]: the [`Store`] on an SQLite file in WAL mode.
//!
//! Writes go through a pool of one connection, so writers of this process queue in order instead
//! of sleeping in SQLite's busy handler. Each write is one `BEGIN IMMEDIATE` transaction holding
//! one multi-statement query (see [`crate::batch`]): three trips to the connection's worker
//! thread however many messages it carries. The 5-second busy timeout covers writers in other
//! processes. Reads use a separate pool of
//! read-only connections, which WAL lets run alongside the writer. Statements are prepared once
//! per connection and reused through sqlx's statement cache.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use keel_core::{
    Message, RunRecord, SessionInfo, Store, StoreError, StoredMessage, Usage, UserRecord,
};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::batch::{self, RunWrite};
use crate::codec::{self, RunCounts, timestamp};
use crate::schema;

/// How long a write waits for another process's write transaction before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Read-only connections; readers never block each other or the writer under WAL.
const READERS: u32 = 4;

/// Every column of `runs` that a [`RunRecord`] holds.
macro_rules! run_columns {
    () => {
        "id, session_id, state, reason, provider, model, model_used, iterations, input_tokens, \
         output_tokens, cache_read_tokens, cache_write_tokens, final_text, error, started_at, \
         updated_at, finished_at"
    };
}

const SELECT_SESSION: &str =
    "SELECT id, created_at, updated_at, title, message_count FROM sessions WHERE id = $1";

const LIST_SESSIONS: &str = "SELECT id, created_at, updated_at, title, message_count FROM sessions \
     ORDER BY updated_at DESC, id DESC LIMIT $1";

const SELECT_MESSAGES: &str = "SELECT seq, run_id, role, content, tool_calls, tool_call_id, \
     reasoning, meta, created_at FROM messages WHERE session_id = $1 ORDER BY seq";

/// The messages a new run needs: those after the range the session's latest compaction summary
/// replaces (every message when there is none), in one statement of two indexed lookups.
///
/// Indexed, because this is read at the start of every run of a session that may hold thousands
/// of replaced messages: the subquery finds the latest summary in the partial index
/// `messages_summaries` (summaries only, a handful per session, and covering, so one short seek
/// reads `summary_last` without touching the table; it applies because the query repeats the
/// index's `summary_last IS NOT NULL`), then the primary key `(session_id, seq)` seeks straight
/// to the first message after it. Neither reads nor decodes a replaced message. `COALESCE(…, 0)`
/// keeps every message (seqs start at 1) when there is no summary.
const SELECT_CONTEXT_MESSAGES: &str = "SELECT seq, run_id, role, content, tool_calls, \
     tool_call_id, reasoning, meta, created_at FROM messages \
     WHERE session_id = $1 AND seq > COALESCE(( \
         SELECT summary_last FROM messages \
         WHERE session_id = $1 AND summary_last IS NOT NULL \
         ORDER BY seq DESC LIMIT 1), 0) \
     ORDER BY seq";

const SELECT_RUN: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE id = $1");

const LIST_RUNS: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs ORDER BY started_at DESC, id DESC LIMIT $1"
);

const LIST_SESSION_RUNS: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE session_id = $1 ORDER BY started_at DESC, id DESC LIMIT $2"
);

const SELECT_USER: &str =
    "SELECT id, monthly_token_budget, created_at, updated_at FROM users WHERE id = $1";

const LIST_USERS: &str =
    "SELECT id, monthly_token_budget, created_at, updated_at FROM users ORDER BY id";

const SAVE_USER: &str = "INSERT INTO users (id, monthly_token_budget, created_at, updated_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO UPDATE SET \
     monthly_token_budget = excluded.monthly_token_budget, updated_at = excluded.updated_at";

const ADD_USAGE: &str = "INSERT INTO usage_log (user_id, month, input_tokens, output_tokens, \
     cache_read_tokens, cache_write_tokens) VALUES ($1, $2, $3, $4, $5, $6) \
     ON CONFLICT (user_id, month) DO UPDATE SET \
     input_tokens = usage_log.input_tokens + excluded.input_tokens, \
     output_tokens = usage_log.output_tokens + excluded.output_tokens, \
     cache_read_tokens = usage_log.cache_read_tokens + excluded.cache_read_tokens, \
     cache_write_tokens = usage_log.cache_write_tokens + excluded.cache_write_tokens";

const SELECT_USAGE: &str = "SELECT input_tokens, output_tokens, cache_read_tokens, \
     cache_write_tokens FROM usage_log WHERE user_id = $1 AND month = $2";

/// Adds what was being done to a database error.
trait OrBackend<T> {
    fn or_backend(self, doing: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T> OrBackend<T> for Result<T, sqlx::Error> {
    fn or_backend(self, doing: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::Backend(format!("{}: {e}", doing())))
    }
}

/// A [`Store`] on SQLite: one file, WAL journal, `synchronous=NORMAL` (a commit survives a crash
/// of the process; a power loss may undo the last commits but never corrupts the file). Clones
/// share the same connections.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
}

impl SqliteStore {
    /// Opens the store at `path`, creating the file and its parent directories if missing, and
    /// brings the schema up to date.
    pub async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let fail = |what: String| {
            StoreError::Backend(format!("cannot open store at {}: {what}", path.display()))
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| fail(format!("cannot create directory {}: {e}", parent.display())))?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true)
            .synchronous(SqliteSynchronous::Normal);
        let writer = pool_options(1)
            .connect_with(
                options
                    .clone()
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal),
            )
            .await
            .map_err(|e| fail(e.to_string()))?;
        schema::migrate(&writer).await.map_err(fail)?;
        let reader = pool_options(READERS)
            .connect_with(options.read_only(true))
            .await
            .map_err(|e| fail(format!("cannot open a reader: {e}")))?;
        Ok(SqliteStore { writer, reader })
    }

    /// An empty store in memory, for tests: one connection that lives as long as the store, so
    /// every call sees the same database.
    pub async fn open_in_memory() -> Result<SqliteStore, StoreError> {
        let fail =
            |what: String| StoreError::Backend(format!("cannot open in-memory store: {what}"));
        let pool = pool_options(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(
                SqliteConnectOptions::new()
                    .in_memory(true)
                    .foreign_keys(true),
            )
            .await
            .map_err(|e| fail(e.to_string()))?;
        schema::migrate(&pool).await.map_err(fail)?;
        Ok(SqliteStore {
            writer: pool.clone(),
            reader: pool,
        })
    }

    /// Closes every connection, waiting for those in use to be returned. Dropping the store
    /// without closing it loses nothing that was committed.
    pub async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }
}

/// Pool settings shared by every pool: local connections do not go stale, so they are not
/// pinged before use.
fn pool_options(max_connections: u32) -> SqlitePoolOptions {
    SqlitePoolOptions::new()
        .max_connections(max_connections)
        .test_before_acquire(false)
}

/// A `LIMIT` value: any `usize` beyond SQLite's range means "no limit".
fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

#[async_trait]
impl Store for SqliteStore {
    async fn ensure_session(&self, session_id: &str) -> Result<(), StoreError> {
        sqlx::query(batch::ENSURE_SESSION)
            .bind(session_id)
            .bind(timestamp(Utc::now()))
            .execute(&self.writer)
            .await
            .or_backend(|| format!("cannot create session `{session_id}`"))?;
        Ok(())
    }

    async fn session(&self, session_id: &str) -> Result<Option<SessionInfo>, StoreError> {
        let row = sqlx::query(SELECT_SESSION)
            .bind(session_id)
            .fetch_optional(&self.reader)
            .await
            .or_backend(|| format!("cannot read session `{session_id}`"))?;
        row.as_ref().map(codec::decode_session).transpose()
    }

    async fn list_sessions(&self, limit: usize) -> Result<Vec<SessionInfo>, StoreError> {
        let rows = sqlx::query(LIST_SESSIONS)
            .bind(sql_limit(limit))
            .fetch_all(&self.reader)
            .await
            .or_backend(|| "cannot list sessions".into())?;
        rows.iter().map(codec::decode_session).collect()
    }

    async fn messages(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = sqlx::query(SELECT_MESSAGES)
            .bind(session_id)
            .fetch_all(&self.reader)
            .await
            .or_backend(|| format!("cannot read messages of session `{session_id}`"))?;
        rows.iter()
            .map(|row| codec::decode_message(row, session_id))
            .collect()
    }

    async fn context_messages(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = sqlx::query(SELECT_CONTEXT_MESSAGES)
            .bind(session_id)
            .fetch_all(&self.reader)
            .await
            .or_backend(|| format!("cannot read the context of session `{session_id}`"))?;
        rows.iter()
            .map(|row| codec::decode_message(row, session_id))
            .collect()
    }

    async fn append_messages(
        &self,
        session_id: &str,
        run_id: Option<&str>,
        messages: &[Message],
    ) -> Result<(), StoreError> {
        let doing = || format!("cannot append messages to session `{session_id}`");
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .or_backend(doing)?;
        batch::write(&mut tx, session_id, run_id, messages, None, &doing).await?;
        tx.commit().await.or_backend(doing)
    }

    async fn save_run(&self, run: &RunRecord, new_messages: &[Message]) -> Result<(), StoreError> {
        let doing = || format!("cannot save run `{}`", run.id);
        let write = RunWrite {
            run,
            counts: RunCounts::of(run)?,
        };
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .or_backend(doing)?;
        batch::write(
            &mut tx,
            &run.session_id,
            Some(&run.id),
            new_messages,
            Some(&write),
            &doing,
        )
        .await?;
        tx.commit().await.or_backend(doing)
    }

    async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let row = sqlx::query(SELECT_RUN)
            .bind(run_id)
            .fetch_optional(&self.reader)
            .await
            .or_backend(|| format!("cannot read run `{run_id}`"))?;
        row.as_ref().map(codec::decode_run).transpose()
    }

    async fn list_runs(
        &self,
        session_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let query = match session_id {
            Some(session_id) => sqlx::query(LIST_SESSION_RUNS)
                .bind(session_id)
                .bind(sql_limit(limit)),
            None => sqlx::query(LIST_RUNS).bind(sql_limit(limit)),
        };
        let rows = query
            .fetch_all(&self.reader)
            .await
            .or_backend(|| "cannot list runs".into())?;
        rows.iter().map(codec::decode_run).collect()
    }

    async fn user(&self, user_id: &str) -> Result<Option<UserRecord>, StoreError> {
        let row = sqlx::query(SELECT_USER)
            .bind(user_id)
            .fetch_optional(&self.reader)
            .await
            .or_backend(|| format!("cannot read user `{user_id}`"))?;
        row.as_ref().map(codec::decode_user).transpose()
    }

    async fn save_user(&self, user: &UserRecord) -> Result<(), StoreError> {
        let budget = user
            .monthly_token_budget
            .map(|b| codec::stored_count(b, "monthly_token_budget"))
            .transpose()?;
        sqlx::query(SAVE_USER)
            .bind(&user.id)
            .bind(budget)
            .bind(timestamp(user.created_at))
            .bind(timestamp(user.updated_at))
            .execute(&self.writer)
            .await
            .or_backend(|| format!("cannot save user `{}`", user.id))?;
        Ok(())
    }

    async fn list_users(&self) -> Result<Vec<UserRecord>, StoreError> {
        let rows = sqlx::query(LIST_USERS)
            .fetch_all(&self.reader)
            .await
            .or_backend(|| "cannot list users".into())?;
        rows.iter().map(codec::decode_user).collect()
    }

    async fn add_usage(&self, user_id: &str, month: &str, usage: Usage) -> Result<(), StoreError> {
        sqlx::query(ADD_USAGE)
            .bind(user_id)
            .bind(month)
            .bind(codec::stored_count(usage.input_tokens, "input_tokens")?)
            .bind(codec::stored_count(usage.output_tokens, "output_tokens")?)
            .bind(codec::stored_count(
                usage.cache_read_tokens,
                "cache_read_tokens",
            )?)
            .bind(codec::stored_count(
                usage.cache_write_tokens,
                "cache_write_tokens",
            )?)
            .execute(&self.writer)
            .await
            .or_backend(|| format!("cannot record usage of user `{user_id}`"))?;
        Ok(())
    }

    async fn monthly_usage(&self, user_id: &str, month: &str) -> Result<Usage, StoreError> {
        let row = sqlx::query(SELECT_USAGE)
            .bind(user_id)
            .bind(month)
            .fetch_optional(&self.reader)
            .await
            .or_backend(|| format!("cannot read usage of user `{user_id}`"))?;
        Ok(row
            .as_ref()
            .map(|row| codec::decode_usage(row, user_id))
            .transpose()?
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::AssertSqlSafe;

    async fn pragma(pool: &SqlitePool, sql: &'static str) -> i64 {
        sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
    }

    #[tokio::test]
    async fn connections_are_set_up_once_as_documented() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("keel.db"))
            .await
            .unwrap();
        for pool in [&store.writer, &store.reader] {
            // 1 = NORMAL
            assert_eq!(pragma(pool, "PRAGMA synchronous").await, 1);
            assert_eq!(pragma(pool, "PRAGMA busy_timeout").await, 5000);
            assert_eq!(pragma(pool, "PRAGMA foreign_keys").await, 1);
        }
        let write =
            sqlx::query("INSERT INTO sessions (id, created_at, updated_at) VALUES ('x', '', '')")
                .execute(&store.reader)
                .await;
        assert!(write.is_err(), "reader connections are read-only");
    }

    /// The details of `EXPLAIN QUERY PLAN` for the context query, one step a line.
    async fn context_plan(store: &SqliteStore) -> String {
        // Rows of EXPLAIN QUERY PLAN are (id, parent, notused, detail).
        let rows: Vec<(i64, i64, i64, String)> = sqlx::query_as(AssertSqlSafe(format!(
            "EXPLAIN QUERY PLAN {SELECT_CONTEXT_MESSAGES}"
        )))
        .bind("s")
        .fetch_all(&store.reader)
        .await
        .unwrap();
        rows.into_iter()
            .map(|row| row.3)
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[tokio::test]
    async fn the_context_is_found_through_indexes_without_a_scan() {
        let store = SqliteStore::open_in_memory().await.unwrap();
        let mut plans = vec![context_plan(&store).await];
        // Also once the planner has statistics of a long, twice compacted session.
        let mut messages: Vec<Message> = (0..500)
            .map(|i| Message::assistant(i.to_string()))
            .collect();
        for (at, last) in [(200, 200), (400, 400)] {
            messages[at].meta.summary_of = Some(keel_core::SeqRange { first: 1, last });
        }
        store.append_messages("s", None, &messages).await.unwrap();
        store.append_messages("t", None, &messages).await.unwrap();
        sqlx::query("ANALYZE").execute(&store.writer).await.unwrap();
        plans.push(context_plan(&store).await);

        for text in plans {
            assert!(
                text.contains("COVERING INDEX messages_summaries (session_id=?)"),
                "the latest summary comes from the partial index:\n{text}"
            );
            assert!(
                text.contains("sqlite_autoindex_messages_1 (session_id=? AND seq>?)"),
                "the messages after it come from the primary key:\n{text}"
            );
            assert!(!text.contains("SCAN"), "nothing is scanned:\n{text}");
            assert!(!text.contains("TEMP B-TREE"), "nothing is sorted:\n{text}");
        }
        assert_eq!(store.context_messages("s").await.unwrap().len(), 100);
    }

    #[tokio::test]
    async fn foreign_keys_hold_messages_to_their_session() {
        let store = SqliteStore::open_in_memory().await.unwrap();
        let orphan = sqlx::query(
            "INSERT INTO messages (session_id, seq, role, content, created_at) \
             VALUES ('nobody', 1, 'user', 'hi', '')",
        )
        .execute(&store.writer)
        .await;
        assert!(orphan.is_err());
    }
}
