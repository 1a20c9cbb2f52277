//! The store's connections: the writer ([`crate::writer`], a connection on a thread of its own)
//! and a few read-only readers, each lent to one caller at a time through a fair (first come,
//! first served) async mutex. A reader is opened when first needed (a free open one is
//! preferred over opening another), then held open for the store's life: a command that reads
//! one thing at a time opens one, not four (each is a thread, a file handle and a page cache).
//!
//! The readers are sqlx connections, not an sqlx pool: a pool pings every connection it takes
//! back, on a task of its own, so each use would cost an extra trip to the connection's worker
//! thread and a task wake-up. Holding the connections directly leaves one trip per query.
//!
//! Every connection has the same settings: `busy_timeout` 5 s, foreign keys on, `synchronous =
//! NORMAL`; the file is in WAL mode, so readers never block each other or the writer.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use keel_core::StoreError;
use sqlx::Connection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};

use crate::batch::Batch;
use crate::writer::{BUSY_TIMEOUT, Outcome, Writer};
use crate::{schema, search_index, wal};
use rusqlite::OpenFlags;
use rusqlite::config::DbConfig;

/// Read-only connections; readers never block each other or the writer under WAL.
const READERS: usize = 4;

/// A reader's place: not opened yet, open, or closed with the store.
#[derive(Debug)]
pub(crate) enum Reader {
    /// Opened when first lent.
    Unopened,
    /// Open, for the store's life.
    Open(SqliteConnection),
    /// The store is closed.
    Closed,
}

/// One reader's place, lent to one caller at a time.
type Slot = Arc<Mutex<Reader>>;

/// A connection lent to one caller until the guard is dropped.
pub(crate) type Lent<'a> = MappedMutexGuard<'a, SqliteConnection>;

/// The writer and the readers. Clones share the same connections.
#[derive(Clone, Debug)]
pub(crate) struct Connections {
    writer: Writer,
    readers: Arc<[Slot]>,
    next_reader: Arc<AtomicUsize>,
    /// How a reader is opened.
    read_options: SqliteConnectOptions,
    /// The directory of a temporary database, removed with the last clone.
    _temporary: Option<Arc<tempfile::TempDir>>,
}

impl Connections {
    /// Opens the file at `path` (created if missing) in WAL mode and brings its schema up to
    /// date; errors are in words, without the path. Starts the writer's thread.
    pub(crate) async fn open(path: &Path) -> Result<Self, String> {
        Self::open_at(path, None).await
    }

    /// A new, empty database in a temporary directory of its own, removed when the last clone
    /// is dropped.
    pub(crate) async fn open_temporary() -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("keel-store-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let path = dir.path().join("keel.db");
        Self::open_at(&path, Some(Arc::new(dir))).await
    }

    async fn open_at(
        path: &Path,
        temporary: Option<Arc<tempfile::TempDir>>,
    ) -> Result<Self, String> {
        check_log(path).await?;
        let options = SqliteConnectOptions::new()
            .filename(path)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true)
            .synchronous(SqliteSynchronous::Normal);
        let mut setup = SqliteConnection::connect_with(
            &options
                .clone()
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal),
        )
        .await
        .map_err(|e| e.to_string())?;
        // Under the write lock, so that processes opening a fresh file at once do not apply the
        // same migration twice: each one waits for the previous one's, then finds it applied.
        // The migrator's own transactions become savepoints inside this one.
        let mut migrating = setup
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| format!("cannot lock the database to update its schema: {e}"))?;
        schema::migrate(&mut migrating).await?;
        // Messages another process stored without indexing them (see crate::search_index).
        search_index::catch_up_on_open(&mut migrating).await?;
        migrating
            .commit()
            .await
            .map_err(|e| format!("cannot update the schema: {e}"))?;
        // Closing only fails when the connection is already broken: nothing to keep.
        let _ = setup.close().await;
        let writer = Writer::open(path).await?;
        let readers = (0..READERS)
            .map(|_| Arc::new(Mutex::new(Reader::Unopened)))
            .collect();
        Ok(Connections {
            writer,
            readers,
            next_reader: Arc::default(),
            read_options: options.read_only(true),
            _temporary: temporary,
        })
    }

    /// Runs `batches` in order as one transaction on the writer; on any failure nothing of
    /// them is kept. Commits that arrive while the writer is busy go together in its next
    /// transaction (see [`crate::writer`]). Returns the value of the row a statement returned,
    /// if one did (see [`Batch::run`]); errors are in words.
    pub(crate) async fn transaction(&self, batches: Vec<Batch>) -> Outcome {
        if batches.is_empty() {
            return Ok(None);
        }
        self.writer.commit(batches).await
    }

    /// A reader: the first free open one from a rotating start, else a free one opened now,
    /// else the next in turn when it is free.
    pub(crate) async fn reader(&self) -> Result<Lent<'_>, StoreError> {
        let count = self.readers.len();
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed) % count;
        let mut unopened = None;
        for i in 0..count {
            if let Ok(guard) = self.readers[(start + i) % count].try_lock() {
                if !matches!(*guard, Reader::Unopened) {
                    return self.lend(guard).await;
                }
                unopened.get_or_insert(guard);
            }
        }
        match unopened {
            Some(guard) => self.lend(guard).await,
            None => self.lend(self.readers[start].lock().await).await,
        }
    }

    /// The connection in `guard`'s place, opened first if it is not yet.
    async fn lend<'a>(&self, mut guard: MutexGuard<'a, Reader>) -> Result<Lent<'a>, StoreError> {
        if matches!(*guard, Reader::Unopened) {
            let conn = SqliteConnection::connect_with(&self.read_options)
                .await
                .map_err(|e| StoreError::Backend(format!("cannot open a reader: {e}")))?;
            *guard = Reader::Open(conn);
        }
        MutexGuard::try_map(guard, |reader| match reader {
            Reader::Open(conn) => Some(conn),
            Reader::Unopened | Reader::Closed => None,
        })
        .map_err(|_| StoreError::Backend("the store is closed".into()))
    }

    /// Closes every connection: the readers once they are returned, then the writer once the
    /// commits queued before are done. The writer goes last: the last connection to a file
    /// removes its emptied log, and a read-only one cannot.
    pub(crate) async fn close(&self) {
        for slot in self.readers.iter() {
            let reader = std::mem::replace(&mut *slot.lock().await, Reader::Closed);
            if let Reader::Open(conn) = reader {
                // Closing only fails when the connection is already broken: nothing to keep.
                let _ = conn.close().await;
            }
        }
        self.writer.close().await;
    }

    /// How many readers are open (and not lent), for tests.
    #[cfg(test)]
    pub(crate) fn open_readers(&self) -> usize {
        self.readers
            .iter()
            .filter(|slot| {
                slot.try_lock()
                    .is_ok_and(|reader| matches!(*reader, Reader::Open(_)))
            })
            .count()
    }

    /// Every reader in turn, each opened, for tests that look at their settings.
    #[cfg(test)]
    pub(crate) async fn opened_readers(&self) -> Vec<Lent<'_>> {
        let mut lent = Vec::new();
        for slot in self.readers.iter() {
            lent.push(self.lend(slot.lock().await).await.unwrap());
        }
        lent
    }
}

/// Refuses a database whose write-ahead log (left by a process that did not close the store)
/// holds committed transactions SQLite would skip ([`crate::wal`]). The log is read under the
/// write lock, so that no other process is writing it meanwhile, by a connection that does not
/// checkpoint when it closes: closing the last connection would otherwise copy what SQLite
/// reads of the log into the database and delete the log, the skipped transactions with it.
async fn check_log(path: &Path) -> Result<(), String> {
    let mut log = path.as_os_str().to_owned();
    log.push("-wal");
    let log = std::path::PathBuf::from(log);
    if !tokio::fs::try_exists(&log).await.unwrap_or(false) {
        return Ok(());
    }
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            rusqlite::Connection::open_with_flags(&path, flags).map_err(|e| e.to_string())?;
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .and_then(|_| conn.busy_timeout(BUSY_TIMEOUT))
            .and_then(|()| conn.execute_batch("BEGIN IMMEDIATE"))
            .map_err(|e| format!("cannot lock the database to read its log: {e}"))?;
        let checked = match std::fs::read(&log) {
            Ok(bytes) => wal::check(&bytes).map_err(|why| {
                format!(
                    "its write-ahead log {} is damaged: {why}. keel refuses to open the \
                     database rather than lose those transactions. Keep a copy of both files; \
                     to open the database without the damaged log (losing what only it holds), \
                     move {} aside",
                    log.display(),
                    log.display()
                )
            }),
            // Gone meanwhile: checkpointed and removed by a process that closed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!(
                "cannot read its write-ahead log {}: {e}",
                log.display()
            )),
        };
        let _ = conn.execute_batch("ROLLBACK");
        checked
    })
    .await
    .map_err(|e| format!("the log check stopped: {e}"))?
}
