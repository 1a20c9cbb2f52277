//! The store's connections: one writer and a few read-only readers, each held open for the
//! store's life and lent to one caller at a time through a fair (first come, first served)
//! async mutex.
//!
//! Not an sqlx pool: a pool pings every connection it takes back, on a task of its own, so each
//! use costs an extra trip to the connection's worker thread and a task wake-up. Holding the
//! connections directly leaves one trip per query. A trip (the query sent to sqlx's worker
//! thread, the results sent back) costs little CPU but two thread wake-ups, which is what
//! dominates a small write: so a write transaction is [`Connections::transaction`], which sends
//! `BEGIN IMMEDIATE` and `COMMIT` with the first and last statements instead of on trips of their
//! own. A typical commit is then a single trip.
//!
//! Cancelling a caller mid-query is safe: sqlx resets the statement when its results are
//! dropped, and a write transaction cancelled between its `BEGIN` and its `COMMIT` is rolled
//! back by the next writer before anything else (see [`Connections::writer`]).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use keel_core::StoreError;
use sqlx::Connection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard, mpsc, oneshot};

use crate::batch::Batch;
use crate::group_commit::{self, Pending};
use crate::schema;

/// How long a write waits for another process's write transaction before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Read-only connections; readers never block each other or the writer under WAL.
const READERS: usize = 4;

/// One connection, `None` once the store is closed.
type Slot = Arc<Mutex<Option<SqliteConnection>>>;

/// A connection lent to one caller until the guard is dropped.
pub(crate) type Lent<'a> = MappedMutexGuard<'a, SqliteConnection>;

/// The writer and the readers (for an in-memory database, the writer is also the one reader),
/// and the queue of the writer's group commits. Clones share the same connections.
#[derive(Clone, Debug)]
pub(crate) struct Connections {
    writer: Writer,
    readers: Arc<[Slot]>,
    next_reader: Arc<AtomicUsize>,
    commits: mpsc::UnboundedSender<Pending>,
}

/// The writer connection, lent to one holder at a time.
#[derive(Clone, Debug)]
pub(crate) struct Writer {
    slot: Slot,
    /// Set while the writer may be inside a transaction; still set when its holder was
    /// cancelled there. Read and written only by the holder of the writer.
    unfinished: Arc<AtomicBool>,
}

impl Writer {
    fn new(conn: SqliteConnection) -> Writer {
        Writer {
            slot: slot(conn),
            unfinished: Arc::default(),
        }
    }

    /// The writer, once the holders that asked before have returned it, outside any
    /// transaction: one its last holder left open by being cancelled is rolled back first.
    pub(crate) async fn lend(&self) -> Result<Lent<'_>, StoreError> {
        self.settle(self.slot.lock().await).await
    }

    /// The writer when nobody holds it or waits for it, else `None`; rolled back first like
    /// [`Writer::lend`].
    pub(crate) async fn try_lend(&self) -> Result<Option<Lent<'_>>, StoreError> {
        let Ok(guard) = self.slot.try_lock() else {
            return Ok(None);
        };
        self.settle(guard).await.map(Some)
    }

    /// Lends the writer out of `guard`, first rolling back a transaction its last holder left
    /// open by being cancelled.
    async fn settle<'a>(
        &self,
        guard: MutexGuard<'a, Option<SqliteConnection>>,
    ) -> Result<Lent<'a>, StoreError> {
        let mut conn = lend(guard)?;
        if self.unfinished.load(Ordering::Acquire) {
            rollback(&mut conn).await;
            self.unfinished.store(false, Ordering::Release);
        }
        Ok(conn)
    }

    /// Marks the writer as (possibly) inside a transaction, or no longer.
    pub(crate) fn set_unfinished(&self, unfinished: bool) {
        self.unfinished.store(unfinished, Ordering::Release);
    }
}

impl Connections {
    /// Opens the file at `path` (created if missing) in WAL mode and brings its schema up to
    /// date; errors are in words, without the path. Starts the writer's commit task on the
    /// current tokio runtime.
    pub(crate) async fn open(path: &Path) -> Result<Self, String> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true)
            .synchronous(SqliteSynchronous::Normal);
        let mut writer = SqliteConnection::connect_with(
            &options
                .clone()
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal),
        )
        .await
        .map_err(|e| e.to_string())?;
        schema::migrate(&mut writer).await?;
        let options = options.read_only(true);
        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let reader = SqliteConnection::connect_with(&options)
                .await
                .map_err(|e| format!("cannot open a reader: {e}"))?;
            readers.push(slot(reader));
        }
        let writer = Writer::new(writer);
        Ok(Connections {
            commits: group_commit::start(writer.clone()),
            writer,
            readers: readers.into(),
            next_reader: Arc::default(),
        })
    }

    /// An empty database in memory: one connection, that lives as long as the store, for
    /// writing and reading.
    pub(crate) async fn open_in_memory() -> Result<Self, String> {
        let options = SqliteConnectOptions::new()
            .in_memory(true)
            .foreign_keys(true);
        let mut conn = SqliteConnection::connect_with(&options)
            .await
            .map_err(|e| e.to_string())?;
        schema::migrate(&mut conn).await?;
        let writer = Writer::new(conn);
        Ok(Connections {
            commits: group_commit::start(writer.clone()),
            readers: Arc::new([writer.slot.clone()]),
            writer,
            next_reader: Arc::default(),
        })
    }

    /// The writer, once the writers that asked before have returned it, outside any
    /// transaction.
    pub(crate) async fn writer(&self) -> Result<Lent<'_>, StoreError> {
        self.writer.lend().await
    }

    /// Runs `batches` in order as one transaction on the writer; on any failure nothing of
    /// them is kept. Commits that arrive while the writer is busy go together in its next
    /// transaction (see [`crate::group_commit`]). Returns whether a statement returned a true
    /// row (see [`Batch::run`]); errors are in words.
    pub(crate) async fn transaction(&self, batches: Vec<Batch>) -> Result<bool, String> {
        if batches.is_empty() {
            return Ok(false);
        }
        // A free writer takes the commit at once, on this task: without a group to join, the
        // trip through the writer's task would only add two wake-ups. Cancelled midway, it
        // leaves the writer marked unfinished, and the next holder rolls it back.
        if let Some(mut conn) = self.writer.try_lend().await.map_err(|e| e.to_string())? {
            let mut outcomes = group_commit::write_on(&self.writer, &mut conn, vec![batches]).await;
            return outcomes.pop().unwrap_or(Ok(false));
        }
        let (done, result) = oneshot::channel();
        self.commits
            .send(Pending { batches, done })
            .map_err(|_| "the store's writer has stopped".to_string())?;
        result
            .await
            .map_err(|_| "the store's writer has stopped".to_string())?
    }

    /// A reader: the first free one from a rotating start, else the next in turn when it is
    /// free.
    pub(crate) async fn reader(&self) -> Result<Lent<'_>, StoreError> {
        if self
            .readers
            .iter()
            .any(|reader| Arc::ptr_eq(reader, &self.writer.slot))
        {
            // In memory: the one connection may hold a cancelled write's transaction.
            return self.writer().await;
        }
        let count = self.readers.len();
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed) % count;
        for i in 0..count {
            if let Ok(guard) = self.readers[(start + i) % count].try_lock() {
                return lend(guard);
            }
        }
        lend(self.readers[start].lock().await)
    }

    /// Closes every connection, waiting for those lent out to be returned.
    pub(crate) async fn close(&self) {
        for slot in std::iter::once(&self.writer.slot).chain(self.readers.iter()) {
            if let Some(conn) = slot.lock().await.take() {
                // Closing only fails when the connection is already broken: nothing to keep.
                let _ = conn.close().await;
            }
        }
    }

    /// The writer itself, for tests of what runs on it.
    #[cfg(test)]
    pub(crate) fn writer_handle(&self) -> Writer {
        self.writer.clone()
    }

    /// Every open connection in turn, for tests that look at their settings.
    #[cfg(test)]
    pub(crate) fn all(&self) -> impl Iterator<Item = &Slot> {
        std::iter::once(&self.writer.slot).chain(self.readers.iter())
    }
}

/// Ends the connection's transaction, if it has one. Errors are left out: "no transaction is
/// active" is the expected one, and a broken connection fails its next statement anyway.
pub(crate) async fn rollback(conn: &mut SqliteConnection) {
    let _ = sqlx::query("ROLLBACK").execute(conn).await;
}

fn slot(conn: SqliteConnection) -> Slot {
    Arc::new(Mutex::new(Some(conn)))
}

fn lend(guard: MutexGuard<'_, Option<SqliteConnection>>) -> Result<Lent<'_>, StoreError> {
    MutexGuard::try_map(guard, Option::as_mut)
        .map_err(|_| StoreError::Backend("the store is closed".into()))
}
