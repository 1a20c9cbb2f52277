//! WAL checkpoints off the writer's path: a thread with a connection of its own copies the
//! write-ahead log back into the database file when the writer has committed enough.
//!
//! SQLite's default is for the connection that commits to run the checkpoint when the log
//! passes 1,000 pages, on the committing thread: the commit that crosses the mark pays for
//! copying every page and for an `fsync`, and every commit queued behind it waits. The writer
//! turns that off and nudges this thread instead; a `PASSIVE` checkpoint never blocks the
//! writer or the readers, so it runs on the other core while the writer goes on. When the
//! checkpoint has copied the whole log, the writer's next transaction starts the log over.

use std::path::Path;
use std::sync::mpsc;

use rusqlite::Connection;

/// Transactions the writer commits between two nudges: at a typical boundary's dozen pages, a
/// log of a few hundred pages.
pub(crate) const TRANSACTIONS_PER_CHECKPOINT: u32 = 32;

/// The writer's side: nudges the thread; the thread stops when this is dropped.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    nudges: mpsc::SyncSender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    /// Starts the thread on `conn`, a connection to the writer's database.
    pub(crate) fn start(conn: Connection) -> Result<Checkpointer, String> {
        // One nudge waiting is enough: a checkpoint copies all that is in the log by then.
        let (nudges, nudged) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("keel-store-checkpoint".into())
            .spawn(move || {
                while nudged.recv().is_ok() {
                    // A checkpoint that fails (the database is busy, say) is retried at the
                    // next nudge; nothing committed depends on it.
                    let _ = conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)");
                }
            })
            .map_err(|e| format!("cannot start the checkpoint thread: {e}"))?;
        Ok(Checkpointer { nudges, thread })
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

    /// Asks for a checkpoint soon; returns at once.
    pub(crate) fn nudge(&self) {
        // Full: a checkpoint is already asked for. Disconnected: the thread is gone.
        let _ = self.nudges.try_send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_nudge_copies_the_log_into_the_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
                 CREATE TABLE t (id INTEGER PRIMARY KEY, text TEXT);
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
                 INSERT INTO t SELECT i, printf('%0100d', i) FROM n;",
            )
            .unwrap();
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
}
