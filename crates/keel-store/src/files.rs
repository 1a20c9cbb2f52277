//! Files on SQL (`migrations/0012_files.sql`): records over content kept once per SHA-256.

use keel_core::StoreError;
use keel_core::files::{FileOrigin, FileRecord};

use crate::OrBackend;
use crate::batch::Batch;
use crate::codec::{Columns, Place, column, time_column, timestamp};
use crate::connections::Connections;

/// The content, unless the same bytes are kept already.
pub(crate) const KEEP_CONTENT: &str =
    "INSERT INTO file_blobs (sha256, content) VALUES ($1, $2) ON CONFLICT (sha256) DO NOTHING";

/// The record; its parameters follow the content's in one batch (`$1` is the SHA-256).
pub(crate) const INSERT: &str = "INSERT INTO files (id, name, media_type, size, sha256, session_id, \
     user_id, run_id, origin, created_at) VALUES ($3, $4, $5, $6, $1, $7, $8, $9, $10, $11)";

/// The record of file `$1`.
pub(crate) const BY_ID: &str = "SELECT id, name, media_type, size, sha256, session_id, user_id, run_id, \
     origin, created_at FROM files WHERE id = $1";

/// The records of the files run `$1` produced, oldest first.
pub(crate) const OF_RUN: &str = "SELECT id, name, media_type, size, sha256, session_id, user_id, run_id, \
     origin, created_at FROM files WHERE run_id = $1 ORDER BY created_at, id";

const OF_SESSION: &str = "SELECT id, name, media_type, size, sha256, session_id, user_id, \
     run_id, origin, created_at FROM files WHERE session_id = $1 ORDER BY created_at, id";

/// Forgets attachments no run has taken, by id (`$1`, a JSON array); [`FORGET_UNUSED_CONTENT`]
/// follows it.
const FORGET_ATTACHMENTS: &str = "DELETE FROM files WHERE id IN (SELECT value FROM json_each($1)) \
     AND origin = 'attachment' AND run_id IS NULL";

/// Forgets the content of [`FORGET_ATTACHMENTS`]'s files (`$2`, a JSON array of SHA-256s) that
/// no record keeps. The writer runs one transaction at a time, so a record of the same content
/// kept for another message is either seen here (and the content stays) or kept after (and the
/// content with it).
const FORGET_UNUSED_CONTENT: &str = "DELETE FROM file_blobs \
     WHERE sha256 IN (SELECT value FROM json_each($2)) \
     AND NOT EXISTS (SELECT 1 FROM files WHERE files.sha256 = file_blobs.sha256)";

/// Keeps a file (see [`keel_core::Store::save_file`]).
pub(crate) async fn save(
    conns: &Connections,
    record: &FileRecord,
    content: &[u8],
) -> Result<(), StoreError> {
    record.check_content(content).map_err(StoreError::Backend)?;
    let size = i64::try_from(record.size)
        .map_err(|_| StoreError::Backend(format!("file `{}` is too large", record.id)))?;
    let mut batch = Batch::of(KEEP_CONTENT).bind(&record.sha256).bind(content);
    batch.end_statement().sql(INSERT);
    for value in [&record.id, &record.name, &record.media_type] {
        batch.param(value);
    }
    batch.param(size);
    batch.param(&record.session_id);
    batch.param(record.user_id.as_deref());
    batch.param(record.run_id.as_deref());
    batch.param(record.origin.as_str());
    batch.param(timestamp(record.created_at));
    conns.transaction(vec![batch]).await.map(drop).map_err(|e| {
        if e.contains("FOREIGN KEY") {
            StoreError::NotFound(format!("session `{}`", record.session_id))
        } else if e.contains("UNIQUE") {
            StoreError::Conflict(format!("file `{}` exists already", record.id))
        } else {
            StoreError::Backend(format!("cannot keep file `{}`: {e}", record.name))
        }
    })
}

/// Forgets a refused message's attachments (see [`keel_core::Store::forget_attachments`]).
pub(crate) async fn forget_attachments(
    conns: &Connections,
    files: &[FileRecord],
) -> Result<(), StoreError> {
    if files.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = files.iter().map(|file| file.id.as_str()).collect();
    let hashes: Vec<&str> = files.iter().map(|file| file.sha256.as_str()).collect();
    let ids = serde_json::to_string(&ids).map_err(|e| StoreError::Backend(e.to_string()))?;
    let hashes = serde_json::to_string(&hashes).map_err(|e| StoreError::Backend(e.to_string()))?;
    let mut batch = Batch::of(FORGET_ATTACHMENTS).bind(ids).bind(hashes);
    batch.end_statement().sql(FORGET_UNUSED_CONTENT);
    conns
        .transaction(vec![batch])
        .await
        .map(drop)
        .or_backend(|| "cannot forget a refused message's attachments".to_string())
}

/// A file's record.
pub(crate) async fn file(
    conns: &Connections,
    file_id: &str,
) -> Result<Option<FileRecord>, StoreError> {
    let row = sqlx::query(BY_ID)
        .bind(file_id)
        .fetch_optional(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read file `{file_id}`"))?;
    row.as_ref().map(decode).transpose()
}

/// The content kept under `sha256`.
pub(crate) async fn content(
    conns: &Connections,
    sha256: &str,
) -> Result<Option<Vec<u8>>, StoreError> {
    sqlx::query_scalar("SELECT content FROM file_blobs WHERE sha256 = $1")
        .bind(sha256)
        .fetch_optional(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read the content {sha256}"))
}

/// The files a run produced, oldest first.
pub(crate) async fn of_run(
    conns: &Connections,
    run_id: &str,
) -> Result<Vec<FileRecord>, StoreError> {
    let rows = sqlx::query(OF_RUN)
        .bind(run_id)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read the files of run `{run_id}`"))?;
    rows.iter().map(decode).collect()
}

/// Every file of a conversation, oldest first.
pub(crate) async fn of_session(
    conns: &Connections,
    session_id: &str,
) -> Result<Vec<FileRecord>, StoreError> {
    let rows = sqlx::query(OF_SESSION)
        .bind(session_id)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read the files of conversation `{session_id}`"))?;
    rows.iter().map(decode).collect()
}

/// Decodes a row of `SELECT id, name, media_type, size, sha256, session_id, user_id, run_id,
/// origin, created_at FROM files`.
pub(crate) fn decode(row: &impl Columns) -> Result<FileRecord, StoreError> {
    let place = Place::Table("files");
    let size: i64 = column(row, "size", place)?;
    let origin: String = column(row, "origin", place)?;
    Ok(FileRecord {
        id: column(row, "id", place)?,
        name: column(row, "name", place)?,
        media_type: column(row, "media_type", place)?,
        size: u64::try_from(size).unwrap_or_default(),
        sha256: column(row, "sha256", place)?,
        session_id: column(row, "session_id", place)?,
        user_id: column(row, "user_id", place)?,
        run_id: column(row, "run_id", place)?,
        origin: FileOrigin::parse(&origin).ok_or_else(|| {
            StoreError::Backend(format!("a file has the unknown origin `{origin}`"))
        })?,
        created_at: time_column(row, "created_at", place)?,
    })
}
