//! One write of the store (append messages to a session, optionally upsert the run that wrote
//! them) in as few trips to the connection's worker thread as SQLite allows.
//!
//! Inside the caller's transaction, each chunk of up to [`ROWS_PER_QUERY`] messages is a single
//! multi-statement query that (1) creates the session or bumps its count, `updated_at` and title,
//! (2) inserts the rows, numbering them from the session's new count, so nothing is read back
//! (a compaction summary's `summary_of.last` also goes to the `summary_last` column, see
//! `migrations/0003_summaries.sql`), and, in the last chunk, (3) upserts the run. The statements
//! share numbered parameters:
//!
//! | parameter | value |
//! | --- | --- |
//! | `$1` | session id |
//! | `$2` | now (message `created_at`, session `updated_at`) |
//! | `$3` | title candidate (first non-internal user message), or NULL |
//! | `$4` | number of messages in this chunk |
//! | `$5` | run id, or NULL |
//! | `$6…` | [`MESSAGE_PARAMS`] per message, then the run's columns |
//!
//! SQLite prepares each distinct text once per connection (sqlx's statement cache); the text only
//! varies with the chunk's size and whether a run is saved.

use std::fmt::Write;

use keel_core::store::session_title;
use keel_core::{Message, Role, RunRecord, StoreError};
use sqlx::sqlite::SqliteConnection;
use sqlx::{AssertSqlSafe, SqlSafeStr};

use crate::codec::{MessageColumns, RunCounts, timestamp};

/// Messages per query: keeps parameter numbers far below SQLite's limit (32766) and the number
/// of distinct statement texts small.
const ROWS_PER_QUERY: usize = 64;

/// Parameters bound per message: role, content, tool_calls, tool_call_id, reasoning, meta,
/// summary_last.
const MESSAGE_PARAMS: usize = 7;

/// The first per-message parameter.
const FIRST_MESSAGE_PARAM: usize = 6;

/// Creates the session `$1` at `$2` unless it exists.
pub(crate) const ENSURE_SESSION: &str = "INSERT INTO sessions (id, created_at, updated_at, title, message_count) \
     VALUES ($1, $2, $2, NULL, 0) ON CONFLICT (id) DO NOTHING";

const BUMP_SESSION: &str = "INSERT INTO sessions (id, created_at, updated_at, title, message_count) \
     VALUES ($1, $2, $2, $3, $4) \
     ON CONFLICT (id) DO UPDATE SET \
         updated_at = excluded.updated_at, \
         title = COALESCE(sessions.title, excluded.title), \
         message_count = sessions.message_count + excluded.message_count";

const INSERT_MESSAGES: &str = "INSERT INTO messages \
     (session_id, seq, run_id, role, content, tool_calls, tool_call_id, reasoning, meta, \
     summary_last, created_at) VALUES ";

/// Each row's seq: the session's count (already bumped by `$4`) minus `$4`, plus its position.
const ROW_SEQ: &str = "(SELECT message_count FROM sessions WHERE id = $1) - $4 + ";

/// `id` and `session_id` are `$5` and `$1`; the other columns follow the messages' parameters.
const INSERT_RUN: &str = "INSERT INTO runs (id, session_id, state, reason, provider, model, \
     model_used, iterations, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, \
     final_text, error, started_at, updated_at, finished_at) VALUES ($5, $1";

/// Parameters bound for the run besides its id and session.
const RUN_PARAMS: usize = 15;

/// Updates every column but `session_id` and `started_at`: those are index keys, and setting
/// them, even to the same value, would rewrite two index pages on every save.
const UPSERT_RUN_TAIL: &str = ") ON CONFLICT (id) DO UPDATE SET \
     state = excluded.state, reason = excluded.reason, provider = excluded.provider, \
     model = excluded.model, model_used = excluded.model_used, \
     iterations = excluded.iterations, input_tokens = excluded.input_tokens, \
     output_tokens = excluded.output_tokens, cache_read_tokens = excluded.cache_read_tokens, \
     cache_write_tokens = excluded.cache_write_tokens, final_text = excluded.final_text, \
     error = excluded.error, updated_at = excluded.updated_at, finished_at = excluded.finished_at";

/// Position of `started_at` among the run's parameters.
const STARTED_AT: usize = 12;

/// Moves an existing run to another session or start time, only if either changed.
const MOVE_RUN: &str = "UPDATE runs SET session_id = $1, started_at = $STARTED \
     WHERE id = $5 AND (session_id <> $1 OR started_at <> $STARTED)";

/// The run a write saves, with its counters already checked.
pub(crate) struct RunWrite<'a> {
    /// The record.
    pub run: &'a RunRecord,
    /// Its counters as stored.
    pub counts: RunCounts,
}

/// Appends `messages` to `session_id` (created if missing) and upserts `run` if given, inside
/// the caller's transaction. `doing` names the whole operation in error messages.
pub(crate) async fn write(
    conn: &mut SqliteConnection,
    session_id: &str,
    run_id: Option<&str>,
    messages: &[Message],
    run: Option<&RunWrite<'_>>,
    doing: &(dyn Fn() -> String + Sync),
) -> Result<(), StoreError> {
    let now = timestamp(chrono::Utc::now());
    let title = messages
        .iter()
        .find(|m| m.role == Role::User && !m.is_internal())
        .map(|m| session_title(&m.content));
    let chunks: Vec<&[Message]> = if messages.is_empty() {
        vec![&[]]
    } else {
        messages.chunks(ROWS_PER_QUERY).collect()
    };
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let run = run.filter(|_| i == last);
        let mut query = sqlx::query(statement_text(chunk.len(), run.is_some()))
            .bind(session_id)
            .bind(&now)
            .bind(&title)
            // At most ROWS_PER_QUERY, so the cast cannot truncate.
            .bind(chunk.len() as i64)
            .bind(run_id);
        for message in chunk {
            let columns = MessageColumns::encode(message)?;
            query = query
                .bind(columns.role)
                .bind(&message.content)
                .bind(columns.tool_calls)
                .bind(&message.tool_call_id)
                .bind(columns.reasoning)
                .bind(columns.meta)
                .bind(columns.summary_last);
        }
        if let Some(RunWrite { run, counts }) = run {
            query = query
                .bind(run.state.as_str())
                .bind(run.reason.map(|reason| reason.as_str()))
                .bind(&run.provider)
                .bind(&run.model)
                .bind(&run.model_used)
                .bind(counts.iterations)
                .bind(counts.input_tokens)
                .bind(counts.output_tokens)
                .bind(counts.cache_read_tokens)
                .bind(counts.cache_write_tokens)
                .bind(&run.final_text)
                .bind(&run.error)
                .bind(timestamp(run.started_at))
                .bind(timestamp(run.updated_at))
                .bind(run.finished_at.map(timestamp));
        }
        query
            .execute(&mut *conn)
            .await
            .map_err(|e| StoreError::Backend(format!("{}: {e}", doing())))?;
    }
    Ok(())
}

/// The statements of one chunk of `rows` messages, with the run upsert when `with_run`.
fn statement_text(rows: usize, with_run: bool) -> impl SqlSafeStr {
    let mut sql = String::with_capacity(1024 + rows * 160);
    if rows == 0 {
        sql.push_str(ENSURE_SESSION);
    } else {
        sql.push_str(BUMP_SESSION);
        sql.push_str(";\n");
        sql.push_str(INSERT_MESSAGES);
        for row in 0..rows {
            let first = FIRST_MESSAGE_PARAM + row * MESSAGE_PARAMS;
            let separator = if row == 0 { "" } else { ", " };
            // Writing to a String cannot fail.
            let _ = write!(sql, "{separator}($1, {ROW_SEQ}{}, $5", row + 1);
            for param in first..first + MESSAGE_PARAMS {
                let _ = write!(sql, ", ${param}");
            }
            sql.push_str(", $2)");
        }
    }
    if with_run {
        sql.push_str(";\n");
        sql.push_str(INSERT_RUN);
        let first = FIRST_MESSAGE_PARAM + rows * MESSAGE_PARAMS;
        for param in first..first + RUN_PARAMS {
            let _ = write!(sql, ", ${param}");
        }
        sql.push_str(UPSERT_RUN_TAIL);
        sql.push_str(";\n");
        sql.push_str(&MOVE_RUN.replace("$STARTED", &format!("${}", first + STARTED_AT)));
    }
    // Built only from the constants above and parameter numbers: no outside text.
    AssertSqlSafe(sql)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(rows: usize, with_run: bool) -> String {
        statement_text(rows, with_run)
            .into_sql_str()
            .as_str()
            .to_string()
    }

    #[test]
    fn parameters_are_numbered_without_gaps_or_overlap() {
        let sql = text(2, true);
        assert!(
            sql.contains("- $4 + 1, $5, $6, $7, $8, $9, $10, $11, $12, $2)"),
            "{sql}"
        );
        assert!(
            sql.contains("- $4 + 2, $5, $13, $14, $15, $16, $17, $18, $19, $2)"),
            "{sql}"
        );
        assert!(sql.contains("VALUES ($5, $1, $20, "), "{sql}");
        assert!(sql.contains(", $34) ON CONFLICT"), "{sql}");
        assert!(sql.contains("started_at = $32 WHERE id = $5"), "{sql}");
        assert!(!sql.contains("$35"));
    }

    #[test]
    fn an_empty_write_only_ensures_the_session() {
        assert_eq!(text(0, false), ENSURE_SESSION);
        let sql = text(0, true);
        assert!(sql.starts_with(ENSURE_SESSION) && sql.contains("VALUES ($5, $1, $6, "));
        assert!(!sql.contains("INSERT INTO messages"));
    }

    #[test]
    fn the_largest_chunk_stays_within_sqlite_parameter_limits() {
        let sql = text(ROWS_PER_QUERY, true);
        let highest = FIRST_MESSAGE_PARAM + ROWS_PER_QUERY * MESSAGE_PARAMS + RUN_PARAMS - 1;
        assert!(sql.contains(&format!("${highest})")));
        assert!(highest < 32_766);
    }
}
