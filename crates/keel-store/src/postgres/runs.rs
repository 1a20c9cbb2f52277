//! Reads of sessions and runs on PostgreSQL, with the SQLite store's statements (the same text
//! on both) and keel-store's shared decoders.

use keel_core::{RunRecord, SessionInfo, StoreError};
use sqlx::postgres::{PgPool, PgRow};

use super::text;
use crate::OrBackend;
use crate::codec::{self, sql_limit};
pub(super) use crate::sqlite_store::SELECT_RUN;
use crate::sqlite_store::{
    ACTIVE_RUNS, LIST_RUNS, LIST_SESSION_RUNS, LIST_SESSIONS, SELECT_SESSION,
};

/// The session, if it exists.
pub(super) async fn session(
    pool: &PgPool,
    session_id: &str,
) -> Result<Option<SessionInfo>, StoreError> {
    let row = sqlx::query(SELECT_SESSION)
        .bind(session_id)
        .fetch_optional(pool)
        .await
        .or_backend(|| format!("cannot read session `{session_id}`"))?;
    row.as_ref().map(codec::decode_session).transpose()
}

/// Sessions, most recently updated first.
pub(super) async fn sessions(pool: &PgPool, limit: usize) -> Result<Vec<SessionInfo>, StoreError> {
    let rows = sqlx::query(LIST_SESSIONS)
        .bind(sql_limit(limit))
        .fetch_all(pool)
        .await
        .or_backend(|| "cannot list sessions".into())?;
    rows.iter().map(codec::decode_session).collect()
}

/// The run, if it exists.
pub(super) async fn run(pool: &PgPool, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
    let row = sqlx::query(SELECT_RUN)
        .bind(run_id)
        .fetch_optional(pool)
        .await
        .or_backend(|| format!("cannot read run `{run_id}`"))?;
    row.as_ref().map(decode_run).transpose()
}

/// Runs, newest first, optionally of one session.
pub(super) async fn runs(
    pool: &PgPool,
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
        .fetch_all(pool)
        .await
        .or_backend(|| "cannot list runs".into())?;
    rows.iter().map(decode_run).collect()
}

/// Runs not in a terminal state, oldest first.
pub(super) async fn active(pool: &PgPool) -> Result<Vec<RunRecord>, StoreError> {
    let rows = sqlx::query(ACTIVE_RUNS)
        .fetch_all(pool)
        .await
        .or_backend(|| "cannot list active runs".into())?;
    rows.iter().map(decode_run).collect()
}

/// Decodes a row of every column of `runs`, its free text as it was given
/// ([`text::from_column`]).
pub(super) fn decode_run(row: &PgRow) -> Result<RunRecord, StoreError> {
    let mut run = codec::decode_run(row)?;
    run.final_text = run.final_text.take().map(text::from_column);
    run.error = run.error.take().map(text::from_column);
    Ok(run)
}
