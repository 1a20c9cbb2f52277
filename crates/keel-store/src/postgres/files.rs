//! Files and approvals on PostgreSQL: records over content kept once per SHA-256, and what a
//! person approved for the rest of a session (the SQLite store's statements).

use chrono::{DateTime, Utc};
use keel_core::StoreError;
use keel_core::files::FileRecord;
use sqlx::error::ErrorKind;
use sqlx::postgres::PgPool;

use crate::OrBackend;
use crate::codec::timestamp;
use crate::files::{BY_ID, INSERT, KEEP_CONTENT, OF_RUN, decode};

/// The kind of database rule `error` broke, if it is one.
fn broken_rule(error: &sqlx::Error) -> Option<ErrorKind> {
    error.as_database_error().map(|e| e.kind())
}

/// Keeps a file: its content once per SHA-256 and its record, in one transaction.
pub(super) async fn save(
    pool: &PgPool,
    record: &FileRecord,
    content: &[u8],
) -> Result<(), StoreError> {
    record.check_content(content).map_err(StoreError::Backend)?;
    let size = i64::try_from(record.size)
        .map_err(|_| StoreError::Backend(format!("file `{}` is too large", record.id)))?;
    let fail = |e: sqlx::Error| match broken_rule(&e) {
        Some(ErrorKind::ForeignKeyViolation) => {
            StoreError::NotFound(format!("session `{}`", record.session_id))
        }
        Some(ErrorKind::UniqueViolation) => {
            StoreError::Conflict(format!("file `{}` exists already", record.id))
        }
        _ => StoreError::Backend(format!("cannot keep file `{}`: {e}", record.name)),
    };
    let mut tx = pool.begin().await.map_err(fail)?;
    sqlx::query(KEEP_CONTENT)
        .bind(&record.sha256)
        .bind(content)
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    sqlx::query(INSERT)
        .bind(&record.sha256)
        .bind(content)
        .bind(&record.id)
        .bind(&record.name)
        .bind(&record.media_type)
        .bind(size)
        .bind(&record.session_id)
        .bind(record.user_id.as_deref())
        .bind(record.run_id.as_deref())
        .bind(record.origin.as_str())
        .bind(timestamp(record.created_at))
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    tx.commit().await.map_err(fail)
}

/// A file's record.
pub(super) async fn file(pool: &PgPool, file_id: &str) -> Result<Option<FileRecord>, StoreError> {
    let row = sqlx::query(BY_ID)
        .bind(file_id)
        .fetch_optional(pool)
        .await
        .or_backend(|| format!("cannot read file `{file_id}`"))?;
    row.as_ref().map(decode).transpose()
}

/// The content kept under `sha256`.
pub(super) async fn content(pool: &PgPool, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
    sqlx::query_scalar("SELECT content FROM file_blobs WHERE sha256 = $1")
        .bind(sha256)
        .fetch_optional(pool)
        .await
        .or_backend(|| format!("cannot read the content {sha256}"))
}

/// The files a run produced, oldest first.
pub(super) async fn of_run(pool: &PgPool, run_id: &str) -> Result<Vec<FileRecord>, StoreError> {
    let rows = sqlx::query(OF_RUN)
        .bind(run_id)
        .fetch_all(pool)
        .await
        .or_backend(|| format!("cannot read the files of run `{run_id}`"))?;
    rows.iter().map(decode).collect()
}

/// Keeps an approval for the rest of session `session_id`.
pub(super) async fn approve(
    pool: &PgPool,
    session_id: &str,
    key: &str,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query(crate::approvals::INSERT)
        .bind(session_id)
        .bind(key)
        .bind(timestamp(at))
        .execute(pool)
        .await
        .map(drop)
        .map_err(|e| match broken_rule(&e) {
            Some(ErrorKind::ForeignKeyViolation) => {
                StoreError::NotFound(format!("session `{session_id}`"))
            }
            _ => StoreError::Backend(format!(
                "cannot keep an approval for session `{session_id}`: {e}"
            )),
        })
}

/// The approvals of a session.
pub(super) async fn approvals(pool: &PgPool, session_id: &str) -> Result<Vec<String>, StoreError> {
    sqlx::query_scalar(crate::approvals::OF_SESSION)
        .bind(session_id)
        .fetch_all(pool)
        .await
        .or_backend(|| format!("cannot read the approvals of session `{session_id}`"))
}
