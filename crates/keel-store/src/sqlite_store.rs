//! [`SqliteStore`]: the [`Store`] on an SQLite file in WAL mode.
//!
//! Writes go through one connection ([`crate::connections`]), so writers of this process queue in
//! order instead of sleeping in SQLite's busy handler. Each write of messages, and each commit of
//! a safe boundary, is one `BEGIN IMMEDIATE` transaction of multi-statement queries (see
//! [`crate::batch`] and [`crate::durability`]): for a typical boundary at most one hand-off to
//! the writer's thread ([`crate::writer`]), `BEGIN` and `COMMIT` included. The 5-second busy
//! timeout covers writers in other processes. Reads use separate read-only connections, which
//! WAL lets run alongside the writer. Statements are prepared once per connection and reused
//! (the writer's through rusqlite's statement cache, the readers' through sqlx's).

use std::path::Path;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::files::FileRecord;
use keel_core::store::{Commit, CommitOutcome};
use keel_core::{
    Checkpoint, Event, Journal, LaneClaim, LaneOutcome, Message, RunRecord, SessionInfo, Store,
    StoreError, StoredMessage, ToolCallRecord, Usage, UserRecord,
};

use crate::batch::{self, Batch};
use crate::codec::sql_limit;
use crate::codec::{self, timestamp};
use crate::connections::Connections;
use crate::{OrBackend, durability, lanes};

/// Every column of `runs` that a [`RunRecord`] holds.
macro_rules! run_columns {
    () => {
        "id, session_id, state, reason, provider, model, model_used, iterations, input_tokens, \
         output_tokens, cache_read_tokens, cache_write_tokens, final_text, error, started_at, \
         updated_at, finished_at, cost, heartbeat_at, cancel_requested_at, resume_available, \
         launch, worker"
    };
}

/// Every column of `sessions` that a [`SessionInfo`] holds.
macro_rules! session_columns {
    () => {
        "id, created_at, updated_at, title, message_count, owner, lane_policy, place, trusted"
    };
}
pub(crate) use {run_columns, session_columns};

/// Session `$1`.
pub(crate) const SELECT_SESSION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM sessions WHERE id = $1"
);

/// Up to `$1` sessions, most recently updated first.
pub(crate) const LIST_SESSIONS: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM sessions ORDER BY updated_at DESC, id DESC LIMIT $1"
);

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
/// The seq of the last message the latest summary of session `$1` replaced (0 without one),
/// found through the partial index `messages_summaries`.
macro_rules! replaced_up_to {
    () => {
        "COALESCE((SELECT summary_last FROM messages \
         WHERE session_id = $1 AND summary_last IS NOT NULL ORDER BY seq DESC LIMIT 1), 0)"
    };
}

/// The first pinned message among those, through the partial index `messages_pinned`.
macro_rules! first_pinned {
    () => {
        concat!(
            "(SELECT MIN(seq) FROM messages WHERE session_id = $1 AND pinned = 1 \
             AND summary_last IS NULL AND seq <= ",
            replaced_up_to!(),
            ")"
        )
    };
}

/// The context of a session (see `Store::context_messages`): the messages after those the
/// latest summary replaced, or, when it replaced pinned ones, from the first pinned message's
/// exchange on (its call, for a pinned result: keel_core::context::context_start_seq). The
/// latest summary is found through `summary_last`'s index and the first pinned message through
/// `messages_pinned` (schema 27); the replaced messages are read only when one was pinned.
const SELECT_CONTEXT_MESSAGES: &str = concat!(
    "SELECT seq, run_id, role, content, tool_calls, tool_call_id, reasoning, meta, created_at \
     FROM messages WHERE session_id = $1 AND seq >= COALESCE(",
    // The exchange's first message (the call of a pinned result)...
    "(SELECT seq FROM messages WHERE session_id = $1 AND role <> 'tool' AND seq <= ",
    first_pinned!(),
    " ORDER BY seq DESC LIMIT 1), ",
    // ...or the pinned message itself, or what follows the replaced messages.
    first_pinned!(),
    ", ",
    replaced_up_to!(),
    " + 1) ",
    // Messages of runs rolled back (`migrations/0029_lane_policies.sql`) are kept, not sent.
    "AND (run_id IS NULL OR run_id NOT IN (SELECT id FROM runs WHERE session_id = $1 \
     AND rolled_back_by IS NOT NULL)) ORDER BY seq"
);

/// The messages of a session from a seq on, through the primary key.
const SELECT_MESSAGES_SINCE: &str = "SELECT seq, run_id, role, content, tool_calls, \
     tool_call_id, reasoning, meta, created_at FROM messages \
     WHERE session_id = $1 AND seq >= $2 ORDER BY seq";

/// Run `$1`.
pub(crate) const SELECT_RUN: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE id = $1");

/// Up to `$1` runs, newest first.
pub(crate) const LIST_RUNS: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs ORDER BY started_at DESC, id DESC LIMIT $1"
);

/// Up to `$2` runs of session `$1`, newest first.
pub(crate) const LIST_SESSION_RUNS: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE session_id = $1 ORDER BY started_at DESC, id DESC LIMIT $2"
);

/// Runs not in a terminal state, oldest first, read in order from the partial index
/// `runs_active`: the WHERE clause must stay the index's (`migrations/0021_…`), word for word.
pub(crate) const ACTIVE_RUNS: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE state <> 'completed' AND state <> 'cancelled' AND state <> 'timed_out' \
     AND state <> 'max_steps' AND state <> 'budget_exceeded' AND state <> 'error' \
     ORDER BY started_at, id"
);

/// User `$1`.
pub(crate) const SELECT_USER: &str = "SELECT id, monthly_token_budget, created_at, updated_at, permission \
     FROM users WHERE id = $1";

/// Every user, by id.
pub(crate) const LIST_USERS: &str = "SELECT id, monthly_token_budget, created_at, updated_at, permission \
     FROM users ORDER BY id";

/// Creates or replaces a user's record.
pub(crate) const SAVE_USER: &str = "INSERT INTO users \
     (id, monthly_token_budget, created_at, updated_at, permission) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO UPDATE SET \
     monthly_token_budget = excluded.monthly_token_budget, updated_at = excluded.updated_at, \
     permission = excluded.permission";

/// A [`Store`] on SQLite: one file, WAL journal, `synchronous=NORMAL` (a commit survives a crash
/// of the process; a power loss may undo the last commits but never corrupts the file). Clones
/// share the same connections.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pub(crate) conns: Connections,
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
        let conns = Connections::open(path).await.map_err(fail)?;
        Ok(SqliteStore { conns })
    }

    /// A new, empty store in a temporary directory of its own, removed when the store (its last
    /// clone) is dropped: for tests and benchmarks. It behaves exactly as a store opened on a
    /// file, because it is one.
    pub async fn open_temporary() -> Result<SqliteStore, StoreError> {
        let conns = Connections::open_temporary().await.map_err(|what| {
            StoreError::Backend(format!("cannot open a temporary store: {what}"))
        })?;
        Ok(SqliteStore { conns })
    }

    /// Runs `batch` as one transaction on the writer.
    async fn write(&self, batch: Batch, doing: impl FnOnce() -> String) -> Result<(), StoreError> {
        self.conns
            .transaction(vec![batch])
            .await
            .map(drop)
            .or_backend(doing)
    }

    /// Closes every connection, waiting for those in use to be returned, after emptying the
    /// write-ahead log into the database file; the store refuses every call afterwards.
    /// Dropping the store without closing it loses nothing that was committed, but leaves the
    /// log for the next open to read.
    pub async fn close(&self) {
        self.conns.close().await;
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn ensure_session(&self, session_id: &str) -> Result<(), StoreError> {
        let batch = Batch::of(batch::ENSURE_SESSION)
            .bind(session_id)
            .bind(timestamp(Utc::now()));
        self.write(batch, || format!("cannot create session `{session_id}`"))
            .await
    }

    async fn session(&self, session_id: &str) -> Result<Option<SessionInfo>, StoreError> {
        let row = sqlx::query(SELECT_SESSION)
            .bind(session_id)
            .fetch_optional(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| format!("cannot read session `{session_id}`"))?;
        row.as_ref().map(codec::decode_session).transpose()
    }

    async fn list_sessions(&self, limit: usize) -> Result<Vec<SessionInfo>, StoreError> {
        let rows = sqlx::query(LIST_SESSIONS)
            .bind(sql_limit(limit))
            .fetch_all(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| "cannot list sessions".into())?;
        rows.iter().map(codec::decode_session).collect()
    }

    async fn messages(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = sqlx::query(SELECT_MESSAGES)
            .bind(session_id)
            .fetch_all(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| format!("cannot read messages of session `{session_id}`"))?;
        rows.iter()
            .map(|row| codec::decode_message(row, session_id))
            .collect()
    }

    async fn context_messages(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = sqlx::query(SELECT_CONTEXT_MESSAGES)
            .bind(session_id)
            .fetch_all(&mut *self.conns.reader().await?)
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
        match batch::write(&self.conns, session_id, run_id, messages, None, &doing).await {
            Ok(_) => Ok(()),
            Err(error) => Err(lanes::lost(&self.conns, session_id, run_id, messages)
                .await
                .unwrap_or(error)),
        }
    }

    async fn commit(&self, commit: &Commit<'_>) -> Result<CommitOutcome, StoreError> {
        let run = commit.run;
        let doing = || format!("cannot save run `{}`", run.id);
        let written = batch::write(
            &self.conns,
            &run.session_id,
            Some(&run.id),
            commit.messages,
            Some(commit),
            &doing,
        )
        .await;
        match written {
            Ok(cancel_requested) => Ok(CommitOutcome { cancel_requested }),
            Err(error) => Err(match durability::superseded(&self.conns, commit).await {
                Some(superseded) => superseded,
                None => lanes::lost(&self.conns, &run.session_id, Some(&run.id), commit.messages)
                    .await
                    .unwrap_or(error),
            }),
        }
    }

    async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let row = sqlx::query(SELECT_RUN)
            .bind(run_id)
            .fetch_optional(&mut *self.conns.reader().await?)
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
            .fetch_all(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| "cannot list runs".into())?;
        rows.iter().map(codec::decode_run).collect()
    }

    async fn user(&self, user_id: &str) -> Result<Option<UserRecord>, StoreError> {
        let row = sqlx::query(SELECT_USER)
            .bind(user_id)
            .fetch_optional(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| format!("cannot read user `{user_id}`"))?;
        row.as_ref().map(codec::decode_user).transpose()
    }

    async fn save_user(&self, user: &UserRecord) -> Result<(), StoreError> {
        let budget = user
            .monthly_token_budget
            .map(|b| codec::stored_count(b, "monthly_token_budget"))
            .transpose()?;
        let batch = Batch::of(SAVE_USER)
            .bind(&user.id)
            .bind(budget)
            .bind(timestamp(user.created_at))
            .bind(timestamp(user.updated_at))
            .bind(codec::permission_name(user.permission));
        self.write(batch, || format!("cannot save user `{}`", user.id))
            .await
    }

    async fn list_users(&self) -> Result<Vec<UserRecord>, StoreError> {
        let rows = sqlx::query(LIST_USERS)
            .fetch_all(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| "cannot list users".into())?;
        rows.iter().map(codec::decode_user).collect()
    }

    async fn monthly_usage(&self, user_id: &str, month: &str) -> Result<Usage, StoreError> {
        crate::token_log::monthly_usage(&mut *self.conns.reader().await?, user_id, month).await
    }

    async fn messages_since(
        &self,
        session_id: &str,
        from: u64,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = sqlx::query(SELECT_MESSAGES_SINCE)
            .bind(session_id)
            .bind(i64::try_from(from).unwrap_or(i64::MAX))
            .fetch_all(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| format!("cannot read messages of session `{session_id}`"))?;
        rows.iter()
            .map(|row| codec::decode_message(row, session_id))
            .collect()
    }

    async fn record_tool_calls(&self, calls: &[ToolCallRecord]) -> Result<(), StoreError> {
        durability::record_tool_calls(&self.conns, calls).await
    }

    async fn tool_calls(&self, run_id: &str) -> Result<Vec<ToolCallRecord>, StoreError> {
        durability::tool_calls(&mut *self.conns.reader().await?, run_id).await
    }

    async fn checkpoints(&self, run_id: &str) -> Result<Vec<Checkpoint>, StoreError> {
        durability::checkpoints(&mut *self.conns.reader().await?, run_id).await
    }

    async fn latest_checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        durability::latest_checkpoint(&mut *self.conns.reader().await?, run_id).await
    }

    async fn events(&self, run_id: &str) -> Result<Vec<Event>, StoreError> {
        durability::events(&mut *self.conns.reader().await?, run_id).await
    }

    async fn journal(&self, session_id: &str) -> Result<Option<Journal>, StoreError> {
        durability::journal(&mut *self.conns.reader().await?, session_id).await
    }

    async fn heartbeat(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        durability::heartbeat(&self.conns, run_id, at).await
    }

    async fn request_cancel(&self, run_id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        durability::request_cancel(&self.conns, run_id, at).await
    }

    async fn close(&self) {
        self.conns.close().await;
    }

    async fn claim_session(&self, claim: &LaneClaim<'_>) -> Result<LaneOutcome, StoreError> {
        lanes::claim(&self.conns, claim).await
    }

    async fn release_session(&self, session_id: &str, run_id: &str) -> Result<bool, StoreError> {
        lanes::release(&self.conns, session_id, run_id).await
    }

    async fn messages_page(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        crate::pages::messages_page(&self.conns, session_id, after, limit).await
    }

    async fn events_after(
        &self,
        run_id: &str,
        after: u64,
    ) -> Result<Vec<(u64, Event)>, StoreError> {
        crate::pages::events_after(&self.conns, run_id, after).await
    }

    async fn session_approvals(&self, session_id: &str) -> Result<Vec<String>, StoreError> {
        crate::approvals::of_session(&self.conns, session_id).await
    }

    async fn approve_for_session(
        &self,
        session_id: &str,
        key: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        crate::approvals::approve(&self.conns, session_id, key, at).await
    }

    async fn save_file(&self, record: &FileRecord, content: &[u8]) -> Result<(), StoreError> {
        crate::files::save(&self.conns, record, content).await
    }

    async fn file(&self, file_id: &str) -> Result<Option<FileRecord>, StoreError> {
        crate::files::file(&self.conns, file_id).await
    }

    async fn file_content(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        crate::files::content(&self.conns, sha256).await
    }

    async fn run_files(&self, run_id: &str) -> Result<Vec<FileRecord>, StoreError> {
        crate::files::of_run(&self.conns, run_id).await
    }

    async fn active_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query(ACTIVE_RUNS)
            .fetch_all(&mut *self.conns.reader().await?)
            .await
            .or_backend(|| "cannot list active runs".into())?;
        rows.iter().map(codec::decode_run).collect()
    }

    async fn adopt_session(&self, session_id: &str, user_id: &str) -> Result<bool, StoreError> {
        crate::session_search::adopt(&self.conns, session_id, user_id).await
    }
}

#[cfg(test)]
#[path = "sqlite_store_tests.rs"]
mod tests;

/// One process at a time uses a SQLite file (`keel serve` holds a lock on it): nothing to tell.
impl keel_platform::StoreSignals for SqliteStore {}
