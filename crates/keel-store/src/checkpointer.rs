//! WAL checkpoints off the writer's path: a thread with a connection of its own copies the
//! write-ahead log back into the database file when the writer has committed enough.
//!
//! SQLite's default is for the connection that commits to run the checkpoint when the log
//! passes 1,000 pages, on the committing thread: the commit that crosses the mark pays for
//! copying every page and for an `fsync`, and every commit queued behind it waits. The writer
//! turns that off and nudges this thread instead; a `PASSIVE` checkpoint never blocks the
//! writer or the readers, so it runs on the other core while the writer goes on.
//!
//! **Starting the log over.** SQLite writes the log from its start again only when a write
//! transaction begins with every frame of it copied back. Under steady load that never happens
//! by itself: the writer commits new frames while this thread copies the earlier ones, so the
//! log only grew, to 2 GB in a 12-second `keel bench` of 10,000 conversations; a daemon under
//! steady load would fill its disk. So when the log is past [`RESTART_FRAMES`], this thread
//! copies again what came meanwhile, a few passes ([`catch_up`]), then asks the writer, which,
//! between two transactions, copies the rest itself with a `RESTART` checkpoint
//! ([`Checkpointer::restart_if_asked`]): its next transaction writes the log from the start,
//! over blocks the file system already has, and cuts a file that grew past the writer's
//! `journal_size_limit` back to it. The price is that pause of the writer: 8–60 ms, about twice
//! a second, at 10,000 conversations, where the log stays under ~150 MB.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use rusqlite::Connection;

/// Transactions the writer commits between two nudges: at a typical boundary's dozen pages, a
/// log of a few hundred pages.
pub(crate) const TRANSACTIONS_PER_CHECKPOINT: u32 = 32;

/// Frames of log (of a 4 KiB page each) past which the writer is asked to start it over.
const RESTART_FRAMES: i64 = 4_096;

/// Frames committed during a pass few enough for the writer to copy between two transactions.
const FEW_FRAMES: i64 = 256;

/// Most passes of one catch-up: if the writer commits faster than they copy, it copies the rest
/// itself, and waits for that.
const PASSES: usize = 4;

/// How long the writer's `RESTART` checkpoint waits for readers to leave the log (and for
/// another process's checkpoint) before it leaves the restart for the next time.
const RESTART_WAIT: Duration = Duration::from_millis(10);

/// The writer's side: nudges the thread; the thread stops when this is dropped.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    nudges: mpsc::SyncSender<()>,
    thread: std::thread::JoinHandle<()>,
    /// Set by the thread when the log is past [`RESTART_FRAMES`]; cleared by the writer.
    restart: Arc<AtomicBool>,
}

impl Checkpointer {
    /// Starts the thread on `conn`, a connection to the writer's database.
    pub(crate) fn start(conn: Connection) -> Result<Checkpointer, String> {
        Checkpointer::start_with(conn, RESTART_FRAMES)
    }

    /// [`Checkpointer::start`], asking for a restart past `restart_frames` frames of log.
    pub(crate) fn start_with(
        conn: Connection,
        restart_frames: i64,
    ) -> Result<Checkpointer, String> {
        // One nudge waiting is enough: a checkpoint copies all that is in the log by then.
        let (nudges, nudged) = mpsc::sync_channel(1);
        let restart = Arc::new(AtomicBool::new(false));
        let asks = restart.clone();
        let thread = std::thread::Builder::new()
            .name("keel-store-checkpoint".into())
            .spawn(move || {
                while nudged.recv().is_ok() {
                    // A checkpoint that fails (the database is busy, say) is retried at the
                    // next nudge; nothing committed depends on it.
                    if catch_up(&conn, restart_frames).is_ok_and(|ask| ask) {
                        asks.store(true, Ordering::Release);
                    }
                }
            })
            .map_err(|e| format!("cannot start the checkpoint thread: {e}"))?;
        Ok(Checkpointer {
            nudges,
            thread,
            restart,
        })
    }

    /// Stops the thread once its checkpoint in progress, if any, is done, and closes its
    /// connection.
    pub(crate) fn stop(self) {
        drop(self.nudges);
        // A panic in the thread left nothing to finish.
        let _ = self.thread.join();
    }

    /// Opens a connection to `path` for [`Checkpointer::start`].
    pub(crate) fn connect(path: &Path) -> Result<Connection, String> {
        let conn = Connection::open(path).map_err(|e| e.to_string())?;
        conn.busy_timeout(crate::writer::BUSY_TIMEOUT)
            .map_err(|e| e.to_string())?;
        Ok(conn)
    }

    /// Asks for a checkpoint soon; returns at once. Not while a restart is asked for: the
    /// writer's checkpoint would wait for this thread's.
    pub(crate) fn nudge(&self) {
        if !self.restart_asked() {
            // Full: a checkpoint is already asked for. Disconnected: the thread is gone.
            let _ = self.nudges.try_send(());
        }
    }

    /// Whether the thread asks the writer to start the log over.
    pub(crate) fn restart_asked(&self) -> bool {
        self.restart.load(Ordering::Acquire)
    }

    /// Asks for a restart as the thread does when the log is long.
    #[cfg(test)]
    pub(crate) fn ask_restart(&self) {
        self.restart.store(true, Ordering::Release);
    }

    /// On the writer's connection `conn`, between two transactions: when the thread has asked
    /// for it, copies what is left of the log and waits up to [`RESTART_WAIT`] for readers to
    /// leave it, so that the next transaction writes the log from its start. A restart that
    /// does not finish in time is asked for again by a later checkpoint.
    pub(crate) fn restart_if_asked(&self, conn: &Connection) {
        if !self.restart.swap(false, Ordering::AcqRel) {
            return;
        }
        // Setting a timeout fails only on a closed connection, which the next statement reports.
        let _ = conn.busy_timeout(RESTART_WAIT);
        let _ = checkpoint(conn, "RESTART");
        let _ = conn.busy_timeout(crate::writer::BUSY_TIMEOUT);
    }
}

/// Copies the log into the database file; when it is past `restart_frames`, copies again what
/// the writer committed meanwhile, until little comes between two passes (or [`PASSES`] have
/// run): whether to ask the writer to start the log over, which then copies only that little.
fn catch_up(conn: &Connection, restart_frames: i64) -> rusqlite::Result<bool> {
    let mut log = checkpoint(conn, "PASSIVE")?;
    for _ in 1..PASSES {
        if log < restart_frames {
            return Ok(false);
        }
        let before = log;
        log = checkpoint(conn, "PASSIVE")?;
        if log - before <= FEW_FRAMES {
            break;
        }
    }
    Ok(log >= restart_frames)
}

/// Runs a checkpoint in `mode` on `conn`; returns the frames in the log.
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<i64> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
        row.get(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A database in WAL mode that checkpoints only when asked, with a table `t (id, text)`,
    /// after `sql`; its directory, path, and a connection to it.
    fn database(sql: &str) -> (tempfile::TempDir, std::path::PathBuf, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
                 CREATE TABLE t (id INTEGER PRIMARY KEY, text TEXT);",
            )
            .unwrap();
        writer.execute_batch(sql).unwrap();
        (dir, path, writer)
    }

    #[test]
    fn a_nudge_copies_the_log_into_the_database_file() {
        let (_dir, path, _writer) = database(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
             INSERT INTO t SELECT i, printf('%0100d', i) FROM n;",
        );
        let size = || std::fs::metadata(&path).unwrap().len();
        assert!(size() < 64 * 1024, "the rows are still in the log only");

        let checkpointer = Checkpointer::start(Checkpointer::connect(&path).unwrap()).unwrap();
        checkpointer.nudge();
        let deadline = Instant::now() + Duration::from_secs(10);
        while size() < 200 * 1024 {
            assert!(Instant::now() < deadline, "no checkpoint: {} bytes", size());
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The writer's side of a busy store: `transactions` commits of a 4 KiB row each, a
    /// checkpoint asked for every few, as the writer does, while another thread keeps reading;
    /// returns the largest the log file got.
    fn largest_log(restart_frames: i64, transactions: usize) -> u64 {
        let (_dir, path, writer) = database("PRAGMA journal_size_limit = 1048576;");
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::spawn(move || {
                let conn = Connection::open(&path).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let _: i64 = conn
                        .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
                        .unwrap();
                }
            })
        };
        let checkpointer =
            Checkpointer::start_with(Checkpointer::connect(&path).unwrap(), restart_frames)
                .unwrap();
        let log = path.with_extension("db-wal");
        let mut largest = 0;
        for i in 0..transactions {
            writer
                .execute(
                    "INSERT INTO t (text) VALUES (printf('%04096d', ?1))",
                    [i as i64],
                )
                .unwrap();
            checkpointer.restart_if_asked(&writer);
            if i % 8 == 0 {
                checkpointer.nudge();
            }
            largest = largest.max(std::fs::metadata(&log).unwrap().len());
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        checkpointer.stop();
        largest
    }

    #[test]
    fn a_log_under_steady_writes_and_reads_starts_over_instead_of_growing() {
        // ~3 pages a commit: 19 MB of log if it never started over.
        let transactions = 1_500;
        let largest = largest_log(64, transactions);
        assert!(largest < 6 * 1024 * 1024, "the log grew to {largest} bytes");
    }
}
