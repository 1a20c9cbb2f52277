//! The store's one writer: a SQLite connection on a thread of its own that runs every write
//! transaction, and runs those that wait for it together (group commit).
//!
//! **Why a thread of its own.** The readers are sqlx connections, each served by sqlx's worker
//! thread: every query is a message to that thread and a wake-up back. For reads that is a fair
//! price; for the writer it was the bound of the whole store (~2,000 boundaries a second, most
//! of it spent waking threads, not in SQLite). Here a write is one hand-off: the caller queues
//! its statements and awaits the outcome, and the thread runs them with statements it prepared
//! once (rusqlite over the same `libsqlite3-sys` as sqlx). Under load the thread never sleeps:
//! it takes every commit waiting in the queue at once. When it is idle, a caller runs its commit
//! itself, without any hand-off (see [`Writer::commit`]).
//!
//! **Group commit.** A commit's cost is mostly the commit itself, the WAL frames of every page it
//! dirtied, and the boundaries of many runs dirty the same pages (the last leaf of each table and
//! index). When several commits wait, they share one transaction; if one of them fails, they are
//! run again one by one, so only that one fails. Every caller is answered only after its
//! `COMMIT`, so a boundary is durable before its run acts on it. Checkpoints are left to another
//! thread ([`crate::checkpointer`]).
//!
//! **The search index.** A transaction that stores messages ends by indexing them for session
//! search, once for the whole group, after every other statement ([`crate::search_index`]).
//!
//! The thread owns a commit once it is queued: a caller that stops waiting (a cancelled run)
//! never leaves a transaction half done; its commit lands or fails with its group.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use crate::batch::Batch;
use crate::checkpointer::{Checkpointer, TRANSACTIONS_PER_CHECKPOINT};
use crate::search_index;

/// How long a write waits for another process's write transaction before failing.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the checkpoint at close waits for other processes' readers and writers.
const CLOSING_CHECKPOINT_WAIT: Duration = Duration::from_millis(100);

/// Most commits in one transaction: bounds how long the first of a group waits for the last.
const MAX_GROUP: usize = 256;

/// The size, in bytes, the log file is cut back to when it starts over: four times what the
/// checkpointer lets it grow to before it asks for that (see [`crate::checkpointer`]).
const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// The writer's page cache, in KiB: room for the pages of a group of [`MAX_GROUP`] commits (the
/// default 2 MiB made a large group spill pages to the log mid-transaction and read them back),
/// and no more. SQLite 3.51 scans its whole page cache at the end of any transaction in which a
/// B-tree split swapped two pages' numbers (`balance_nonroot` parks a page at the lock-byte
/// page's number, which raises the cache's largest key), so a larger cache costs every such
/// commit: at 32 MiB that scan was 6.5% of the writer's time at 100 conversations.
const WRITER_CACHE_KIB: i64 = 16 * 1024;

/// Distinct statements kept prepared: the texts vary with the shape of a write (see
/// [`crate::batch`]), a few dozen in practice.
const PREPARED_STATEMENTS: usize = 256;

/// The outcome of one commit: whether a statement returned a row, and its value (see
/// [`Batch::run`]), or what went wrong, in words.
pub(crate) type Outcome = Result<Option<bool>, String>;

/// What the writer's thread is asked to do.
enum Job {
    /// Run these batches as one transaction. They go back with the outcome, so that the
    /// caller frees them rather than the writer's thread, which every commit waits for.
    Commit {
        batches: Vec<Batch>,
        done: oneshot::Sender<(Outcome, Vec<Batch>)>,
    },
    /// Finish what was queued before, close the connection and stop.
    Close(oneshot::Sender<()>),
}

/// A handle on the writer's thread; clones share it. The thread stops when the store is closed
/// or every handle is dropped, after the commits already queued.
#[derive(Clone, Debug)]
pub(crate) struct Writer {
    jobs: mpsc::Sender<Job>,
    /// Commits queued and not yet taken by the thread.
    queued: Arc<AtomicUsize>,
    owned: Arc<Mutex<Owned>>,
}

/// The connection and its count of transactions, used by one thread at a time: the writer's
/// own, or a caller that finds it idle (see [`Writer::commit`]).
#[derive(Debug)]
struct Owned {
    /// `None` once the store is closed.
    conn: Option<Connection>,
    transactions: u32,
    /// `None` once the store is closed.
    checkpointer: Option<Checkpointer>,
}

impl Owned {
    /// Writes the commits as one transaction (see [`write`]) and counts it.
    fn write(&mut self, commits: &[Vec<Batch>]) -> Vec<Outcome> {
        let Some(conn) = &self.conn else {
            return vec![Err(closed()); commits.len()];
        };
        let outcomes = write(conn, commits);
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.restart_if_asked(conn);
        }
        self.counted();
        outcomes
    }

    /// Whether the checkpointer asks the writer's thread to start the log over: a caller then
    /// leaves its commit to that thread rather than write it itself (see [`Writer::commit`]).
    fn restart_asked(&self) -> bool {
        self.checkpointer
            .as_ref()
            .is_some_and(Checkpointer::restart_asked)
    }

    /// Runs one commit at once if the database's write lock is free; `None` if another
    /// process holds it, so that the caller never waits for it. Never starts the log over,
    /// which can pause for tens of milliseconds: that is the writer's thread's to do.
    fn write_now(&mut self, batches: &[Batch]) -> Option<Outcome> {
        let conn = self.conn.as_ref()?;
        conn.busy_timeout(Duration::ZERO).ok()?;
        let begun = statement(conn, "BEGIN IMMEDIATE");
        // Setting a timeout fails only on a closed connection, which the next statement reports.
        let _ = conn.busy_timeout(BUSY_TIMEOUT);
        begun.ok()?;
        let outcome = finish(conn, batches);
        self.counted();
        Some(outcome)
    }

    /// Stops the checkpointer, copies the whole log into the database file and empties it
    /// (`wal_checkpoint(TRUNCATE)`), and closes the connection: a store closed cleanly leaves
    /// no log behind (SQLite removes the empty file when the last connection closes).
    fn close(&mut self) {
        if let Some(checkpointer) = self.checkpointer.take() {
            checkpointer.stop();
        }
        if let Some(conn) = self.conn.take() {
            // Another process reading or writing keeps part of the log: it is then that
            // process's to empty, and this one does not wait for it.
            let _ = conn.busy_timeout(CLOSING_CHECKPOINT_WAIT);
            let _ = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)");
            // Closing only fails when the connection is already broken: nothing to keep.
            let _ = conn.close();
        }
    }

    /// Counts a transaction and asks for a checkpoint every so many (see
    /// [`crate::checkpointer`]).
    fn counted(&mut self) {
        self.transactions = self.transactions.wrapping_add(1);
        let Some(checkpointer) = &self.checkpointer else {
            return;
        };
        if self
            .transactions
            .is_multiple_of(TRANSACTIONS_PER_CHECKPOINT)
        {
            checkpointer.nudge();
        }
    }
}

impl Writer {
    /// Opens the database file at `path`, which must exist with its schema, on a new thread;
    /// errors are in words.
    pub(crate) async fn open(path: &Path) -> Result<Writer, String> {
        let path = path.to_owned();
        let (opened, open_result) = oneshot::channel();
        let (jobs, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("keel-store-writer".into())
            .spawn(move || {
                let owned = connect(&path).and_then(|conn| {
                    Ok(Owned {
                        conn: Some(conn),
                        transactions: 0,
                        checkpointer: Some(Checkpointer::start(Checkpointer::connect(&path)?)?),
                    })
                });
                match owned {
                    Ok(owned) => {
                        let owned = Arc::new(Mutex::new(owned));
                        let queued = Arc::new(AtomicUsize::new(0));
                        let _ = opened.send(Ok((owned.clone(), queued.clone())));
                        serve(&owned, &queued, &queue);
                    }
                    Err(e) => {
                        let _ = opened.send(Err(e));
                    }
                }
            })
            .map_err(|e| format!("cannot start the writer's thread: {e}"))?;
        let (owned, queued) = open_result
            .await
            .map_err(|_| "the writer's thread stopped while opening".to_string())??;
        Ok(Writer {
            jobs,
            queued,
            owned,
        })
    }

    /// Runs `batches` in order as one transaction; on any failure nothing of them is kept.
    ///
    /// When the writer's thread is idle with nothing queued, the caller runs the commit itself,
    /// at once: waking the thread and being woken back costs more than a small commit on this
    /// thread (tens of microseconds each on a VM). It never waits there: not for the thread,
    /// which holds the connection while it writes, nor for another process's write lock. Under
    /// load, commits queue and go in groups. Nor does it start the log over when the
    /// checkpointer asks for that: the commit then goes to the thread, which does it after.
    pub(crate) async fn commit(&self, batches: Vec<Batch>) -> Outcome {
        if self.queued.load(Ordering::Acquire) == 0
            && let Ok(mut owned) = self.owned.try_lock()
            && !owned.restart_asked()
            && let Some(outcome) = owned.write_now(&batches)
        {
            return outcome;
        }
        let (done, answer) = oneshot::channel();
        self.queued.fetch_add(1, Ordering::AcqRel);
        if self.jobs.send(Job::Commit { batches, done }).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(closed());
        }
        let (outcome, _freed_here) = answer.await.map_err(|_| closed())?;
        outcome
    }

    /// Stops the thread once the commits queued before are done, and closes the connection.
    pub(crate) async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.jobs.send(Job::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }
}

fn closed() -> String {
    "the store is closed".into()
}

/// The writer's connection: the settings every connection of the store has (see
/// [`crate::connections`]).
pub(crate) fn connect(path: &Path) -> Result<Connection, String> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| e.to_string())?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| e.to_string())?;
    conn.pragma_update(None, "foreign_keys", true)
        .and_then(|()| conn.pragma_update(None, "synchronous", "NORMAL"))
        // Statement journals (a multi-row statement that fails halfway) in memory, not in
        // temporary files.
        .and_then(|()| conn.pragma_update(None, "temp_store", "MEMORY"))
        // Room for the pages a group of commits dirties (see WRITER_CACHE_KIB).
        .and_then(|()| conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB))
        // Checkpoints are the checkpointer's (see crate::checkpointer).
        .and_then(|()| conn.pragma_update(None, "wal_autocheckpoint", 0))
        // A log that grew past this while readers held it back is cut back to it when it
        // starts over.
        .and_then(|()| conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT))
        .map_err(|e| e.to_string())?;
    conn.set_prepared_statement_cache_capacity(PREPARED_STATEMENTS);
    Ok(conn)
}

/// The thread's loop: takes the first job waiting and every commit queued behind it (up to
/// [`MAX_GROUP`]), runs the commits as one transaction, answers each.
fn serve(owned: &Mutex<Owned>, queued: &AtomicUsize, queue: &mpsc::Receiver<Job>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    let mut dones = Vec::with_capacity(MAX_GROUP);
    while let Ok(first) = queue.recv() {
        let mut close = None;
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                Job::Commit { batches, done } => {
                    group.push(batches);
                    dones.push(done);
                }
                Job::Close(done) => {
                    close = Some(done);
                    break;
                }
            }
            if group.len() < MAX_GROUP {
                next = queue.try_recv().ok();
            }
        }
        queued.fetch_sub(group.len(), Ordering::AcqRel);
        // Poisoned only by a panic inside SQLite's wrapper; the connection is still whole.
        let mut owned = owned.lock().unwrap_or_else(PoisonError::into_inner);
        let outcomes = owned.write(&group);
        for ((done, outcome), batches) in dones.drain(..).zip(outcomes).zip(group.drain(..)) {
            // A caller that stopped waiting has nobody to tell.
            let _ = done.send((outcome, batches));
        }
        if let Some(done) = close {
            owned.close();
            let _ = done.send(());
            return;
        }
    }
}

/// Writes the commits as one transaction; one outcome per commit, in order.
pub(crate) fn write(conn: &Connection, commits: &[Vec<Batch>]) -> Vec<Outcome> {
    match commits {
        [] => Vec::new(),
        [commit] => vec![alone(conn, commit)],
        _ => together(conn, commits),
    }
}

/// One commit in a transaction of its own.
fn alone(conn: &Connection, batches: &[Batch]) -> Outcome {
    statement(conn, "BEGIN IMMEDIATE")?;
    finish(conn, batches)
}

/// Runs the batches of one commit in the transaction just begun, indexes its messages for
/// search, and commits it.
fn finish(conn: &Connection, batches: &[Batch]) -> Outcome {
    let ran = run(conn, batches).and_then(|returned| {
        if stores_messages(batches) {
            search_index::catch_up(conn)?;
        }
        Ok(returned)
    });
    match ran {
        Ok(returned) => match statement(conn, "COMMIT") {
            Ok(()) => Ok(returned),
            Err(e) => {
                rollback(conn);
                Err(format!("cannot commit: {e}"))
            }
        },
        Err(e) => {
            rollback(conn);
            Err(e)
        }
    }
}

/// Several commits in one transaction. When one of them fails, the transaction is rolled back
/// and each commit runs alone, so only the failing one fails. (Failures are rare: a savepoint
/// around each commit would cost every commit a copy of each page it touches.)
fn together(conn: &Connection, commits: &[Vec<Batch>]) -> Vec<Outcome> {
    if let Err(e) = statement(conn, "BEGIN IMMEDIATE") {
        return vec![Err(e); commits.len()];
    }
    let mut outcomes = Vec::with_capacity(commits.len());
    for batches in commits {
        match run(conn, batches) {
            Ok(returned) => outcomes.push(Ok(returned)),
            Err(_) => {
                rollback(conn);
                return commits.iter().map(|batches| alone(conn, batches)).collect();
            }
        }
    }
    // The index takes the messages of the whole group at once, after its last statement (see
    // crate::search_index).
    if commits.iter().any(|batches| stores_messages(batches))
        && search_index::catch_up(conn).is_err()
    {
        rollback(conn);
        return commits.iter().map(|batches| alone(conn, batches)).collect();
    }
    match statement(conn, "COMMIT") {
        Ok(()) => outcomes,
        Err(e) => {
            rollback(conn);
            vec![Err(format!("cannot commit: {e}")); commits.len()]
        }
    }
}

/// Runs the batches in order; the last row a statement returned decides the outcome.
fn run(conn: &Connection, batches: &[Batch]) -> Outcome {
    let mut returned = None;
    for batch in batches {
        if let Some(value) = batch.run(conn)? {
            returned = Some(value);
        }
    }
    Ok(returned)
}

/// Whether a commit inserts messages, so that its transaction ends by indexing them.
fn stores_messages(batches: &[Batch]) -> bool {
    batches.iter().any(Batch::stores_messages)
}

/// Runs one statement without parameters, prepared once.
fn statement(conn: &Connection, sql: &str) -> Result<(), String> {
    conn.prepare_cached(sql)
        .and_then(|mut statement| statement.raw_execute())
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Ends the connection's transaction, if it has one. Errors are left out: "no transaction is
/// active" is the expected one, and a broken connection fails its next statement anyway.
fn rollback(conn: &Connection) {
    let _ = conn.execute_batch("ROLLBACK");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connections::Connections;

    fn insert(id: i64) -> Vec<Batch> {
        vec![Batch::of("INSERT INTO t (id) VALUES ($1)").bind(id)]
    }

    /// The bundled SQLite is built as `.cargo/config.toml` says: each connection's page cache
    /// its own, without the shared LRU's mutex, and no memory counting under a mutex.
    #[test]
    fn sqlite_is_built_without_shared_page_caches_or_memory_counts() {
        let conn = Connection::open_in_memory().unwrap();
        let mut statement = conn.prepare("PRAGMA compile_options").unwrap();
        let options: Vec<String> = statement
            .query_map([], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(options.iter().any(|o| o == "THREADSAFE=1"), "{options:?}");
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "{options:?}"
        );
        assert!(
            !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
            "{options:?}"
        );
    }

    async fn ids(conns: &Connections) -> Vec<i64> {
        sqlx::query_scalar("SELECT id FROM t ORDER BY id")
            .fetch_all(&mut *conns.reader().await.unwrap())
            .await
            .unwrap()
    }

    async fn table() -> Connections {
        let conns = Connections::open_temporary().await.unwrap();
        conns
            .transaction(vec![Batch::of("CREATE TABLE t (id INTEGER PRIMARY KEY)")])
            .await
            .unwrap();
        conns
    }

    #[test]
    fn a_failing_commit_of_a_group_is_rolled_back_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY)")
            .unwrap();
        let conn = connect(&path).unwrap();
        let group = vec![insert(1), insert(2), insert(1), Vec::new(), insert(3)];
        let outcomes = write(&conn, &group);
        assert_eq!(outcomes[0], Ok(None));
        assert_eq!(outcomes[1], Ok(None));
        assert!(
            outcomes[2].as_ref().unwrap_err().contains("UNIQUE"),
            "{outcomes:?}"
        );
        assert_eq!(outcomes[3], Ok(None), "an empty commit is nothing to do");
        assert_eq!(outcomes[4], Ok(None));
        let mut select = conn.prepare("SELECT id FROM t ORDER BY id").unwrap();
        let ids: Vec<i64> = select
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(ids, [1, 2, 3]);
    }

    #[tokio::test]
    async fn a_commit_alone_fails_whole_and_the_next_goes_through() {
        let conns = table().await;
        let mut twice = insert(5);
        twice.extend(insert(5));
        assert!(conns.transaction(twice).await.is_err());
        assert_eq!(conns.transaction(insert(6)).await, Ok(None));
        assert_eq!(
            ids(&conns).await,
            [6],
            "nothing of the failed commit is kept"
        );
    }

    #[tokio::test]
    async fn a_returned_row_is_the_outcome() {
        let conns = table().await;
        let returning = Batch::of("INSERT INTO t (id) VALUES ($1) RETURNING id = 7").bind(7_i64);
        assert_eq!(conns.transaction(vec![returning]).await, Ok(Some(true)));
        let unbound = Batch::of("INSERT INTO t (id) VALUES ($2)").bind(8_i64);
        let err = conns.transaction(vec![unbound]).await.unwrap_err();
        assert!(err.contains("not bound"), "{err}");
    }

    #[tokio::test]
    async fn a_commit_never_waits_on_the_callers_thread_for_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keel.db");
        let conns = Connections::open(&path).await.unwrap();
        conns
            .transaction(vec![Batch::of("CREATE TABLE t (id INTEGER PRIMARY KEY)")])
            .await
            .unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();

        let started = std::time::Instant::now();
        let commit = tokio::spawn({
            let conns = conns.clone();
            async move { conns.transaction(insert(1)).await }
        });
        tokio::task::yield_now().await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "the caller's thread waited for the lock"
        );
        assert!(!commit.is_finished(), "the write lock is another's");
        other.execute_batch("COMMIT").unwrap();
        assert_eq!(commit.await.unwrap(), Ok(None), "queued, then written");
        assert_eq!(ids(&conns).await, [1]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_commits_all_land_once() {
        let conns = table().await;
        let mut tasks = tokio::task::JoinSet::new();
        for id in 0..500 {
            let conns = conns.clone();
            tasks.spawn(async move { conns.transaction(insert(id)).await });
        }
        while let Some(outcome) = tasks.join_next().await {
            assert_eq!(outcome.unwrap(), Ok(None));
        }
        assert_eq!(ids(&conns).await, (0..500).collect::<Vec<_>>());
    }

    /// Starting the log over can pause for tens of milliseconds: a caller writing its own
    /// commit leaves it to the writer's thread, and its next commit goes to that thread.
    #[tokio::test]
    async fn only_the_writers_thread_starts_the_log_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (id INTEGER PRIMARY KEY)")
            .unwrap();
        let writer = Writer::open(&path).await.unwrap();
        let owned = || writer.owned.lock().unwrap();
        owned().checkpointer.as_ref().unwrap().ask_restart();

        assert_eq!(owned().write_now(&insert(1)), Some(Ok(None)));
        assert!(owned().restart_asked(), "a caller's own write left it");

        assert_eq!(writer.commit(insert(2)).await, Ok(None));
        assert!(
            !owned().restart_asked(),
            "the next commit went to the thread, which started the log over"
        );
        writer.close().await;
    }

    #[tokio::test]
    async fn commits_queued_before_close_land_and_later_ones_are_refused() {
        let conns = table().await;
        let queued = tokio::spawn({
            let conns = conns.clone();
            async move { conns.transaction(insert(1)).await }
        });
        tokio::task::yield_now().await;
        conns.close().await;
        assert_eq!(queued.await.unwrap(), Ok(None), "queued before the close");
        let err = conns.transaction(insert(2)).await.unwrap_err();
        assert!(err.contains("closed"), "{err}");
    }
}
