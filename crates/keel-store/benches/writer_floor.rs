//! The floor under keel's store writer: what SQLite itself takes to store a boundary's bytes
//! durably, with none of keel's planning, binding or statement texts (issue 18).
//!
//! Each measured iteration is one transaction of `G` boundaries, each of a run picked at random
//! among 100 or 10,000 (as `keel bench --conversations 100` or `10000` sends them to the
//! writer), on a file database set up as the writer's connection is (WAL, `synchronous =
//! NORMAL`, a 16 MiB page cache). Only the transactions are timed: the log is copied into the
//! file every 32 of them, outside the measurement, as keel's checkpointer does on a thread of its
//! own. Before measuring, every run gets five boundaries (for 10,000 runs, the size of that
//! bench's halfway point). A boundary is the bytes keel stores for one in that bench (`dbstat`
//! and `length()` over its database): a 225-byte message, a 750-byte checkpoint state and 1,090
//! bytes of events, plus its counters.
//!
//! - `append`: one row per boundary, all its bytes, in an append-only table: nothing but the
//!   table's last page changes. The floor of any store that keeps a boundary's bytes.
//! - `by_run`: the same row, keyed by run id (36 characters, as keel's) and seq: one more leaf,
//!   of an index, somewhere among the runs, per boundary. The floor of a store that can read a
//!   run's boundaries back.
//! - `keel_tables`: the bytes as keel's schema spreads them (the message under its session and
//!   seq, the checkpoint and the events each under run and seq, the run's and the session's
//!   counters updated in place): five rows in five tables, the schema's own page work without
//!   keel's code around it.
//! - `boundary_row`: keel's tables with a boundary's checkpoint and events in one row: four
//!   rows, what one row per boundary would save.
//!
//! `cargo bench -p keel-store --bench writer_floor -- --warm-up-time 1 --measurement-time 3`

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rusqlite::{Connection, params};

/// The numbers of runs the boundaries are spread over: `keel bench`'s 100 conversations and
/// its 10,000.
const RUNS: [usize; 2] = [100, 10_000];

/// Boundaries each run has before measuring.
const PREFILLED: usize = 5;

/// Transactions between two checkpoints of the log, which are not measured.
const CHECKPOINT_EVERY: u64 = 32;

const MESSAGE_BYTES: usize = 225;
const STATE_BYTES: usize = 750;
const EVENTS_BYTES: usize = 1_090;

/// The tables keel's layout and the boundary row share: sessions, runs and messages.
macro_rules! sessions_runs_messages {
    () => {
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, updated_at TEXT NOT NULL,
             message_count INTEGER NOT NULL);
         CREATE TABLE runs (id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
             iterations INTEGER NOT NULL, updated_at TEXT NOT NULL, event_count INTEGER NOT NULL);
         CREATE TABLE messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL,
             content TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (session_id, seq));"
    };
}

/// The tables of one variant.
const SCHEMAS: [(&str, &str); 4] = [
    (
        "append",
        "CREATE TABLE log (id INTEGER PRIMARY KEY, payload TEXT NOT NULL);",
    ),
    (
        "by_run",
        "CREATE TABLE log (run_id TEXT NOT NULL, seq INTEGER NOT NULL, payload TEXT NOT NULL,
             PRIMARY KEY (run_id, seq));",
    ),
    (
        "keel_tables",
        concat!(
            sessions_runs_messages!(),
            "CREATE TABLE checkpoints (run_id TEXT NOT NULL, seq INTEGER NOT NULL,
             state TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (run_id, seq));
         CREATE TABLE run_events (run_id TEXT NOT NULL, seq INTEGER NOT NULL,
             payload TEXT NOT NULL, PRIMARY KEY (run_id, seq));"
        ),
    ),
    (
        "boundary_row",
        concat!(
            sessions_runs_messages!(),
            "CREATE TABLE checkpoints (run_id TEXT NOT NULL, seq INTEGER NOT NULL,
             state TEXT NOT NULL, created_at TEXT NOT NULL, events TEXT NOT NULL,
             PRIMARY KEY (run_id, seq));"
        ),
    ),
];

/// A database with one variant's tables and every run's first boundaries.
struct Floor {
    conn: Connection,
    variant: &'static str,
    /// Each run's id, its session's id and its next seq.
    runs: Vec<(String, String, i64)>,
    /// The picker of runs: a fixed-seed xorshift, so every variant sees the same order.
    rng: u64,
    message: String,
    state: String,
    events: String,
    _dir: tempfile::TempDir,
}

/// A 36-character id like keel's, different for each `n` and `kind`.
fn id(kind: u64, n: u64) -> String {
    let a = (n.wrapping_add(kind << 40)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let b = a.rotate_left(29).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

impl Floor {
    fn new(variant: &'static str, schema: &str, runs: usize) -> Floor {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = Connection::open(dir.path().join("floor.db")).expect("open");
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
             PRAGMA cache_size = -16384; PRAGMA wal_autocheckpoint = 0;",
        )
        .expect("pragmas");
        conn.execute_batch(schema).expect("schema");
        let runs = (0..runs as u64).map(|n| (id(1, n), id(2, n), 1)).collect();
        let mut floor = Floor {
            conn,
            variant,
            runs,
            rng: 0x2545_f491_4f6c_dd1d,
            message: "m".repeat(MESSAGE_BYTES),
            state: "s".repeat(STATE_BYTES),
            events: "e".repeat(EVENTS_BYTES),
            _dir: dir,
        };
        if variant == "keel_tables" || variant == "boundary_row" {
            let tx = floor.conn.transaction().expect("begin");
            for (run, session, _) in &floor.runs {
                tx.execute(
                    "INSERT INTO sessions VALUES (?1, '2026-11-27T12:00:00Z', 0)",
                    [session],
                )
                .expect("session");
                tx.execute(
                    "INSERT INTO runs VALUES (?1, ?2, 0, '2026-11-27T12:00:00Z', 0)",
                    [run, session],
                )
                .expect("run");
            }
            tx.commit().expect("commit");
        }
        for _ in 0..PREFILLED {
            for chunk in (0..floor.runs.len()).collect::<Vec<_>>().chunks(500) {
                floor.transaction(chunk.iter().copied());
            }
            floor.checkpoint();
        }
        floor
    }

    /// Copies the log into the database file and starts it over, as keel's checkpointer does
    /// on its own thread.
    fn checkpoint(&self) {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .expect("checkpoint");
    }

    /// Writes `iterations` transactions of `boundaries` boundaries each; returns the time they
    /// took, the checkpoints between them left out.
    fn measure(&mut self, iterations: u64, boundaries: usize) -> Duration {
        let mut measured = Duration::ZERO;
        for i in 0..iterations {
            let runs: Vec<usize> = (0..boundaries).map(|_| self.pick()).collect();
            let start = Instant::now();
            self.transaction(runs.into_iter());
            measured += start.elapsed();
            if i % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1 {
                self.checkpoint();
            }
        }
        measured
    }

    /// Panics unless every boundary written is stored.
    fn check_stored(&self) {
        let table = if self.variant == "keel_tables" || self.variant == "boundary_row" {
            "checkpoints"
        } else {
            "log"
        };
        let stored: i64 = self
            .conn
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
                row.get(0)
            })
            .expect("count");
        let written: i64 = self.runs.iter().map(|(_, _, seq)| seq - 1).sum();
        assert_eq!(stored, written, "{}", self.variant);
    }

    /// The next run a boundary is of.
    fn pick(&mut self) -> usize {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng % self.runs.len() as u64) as usize
    }

    /// Writes one boundary of each run of `runs` in one transaction.
    fn transaction(&mut self, runs: impl Iterator<Item = usize>) {
        let tx = self.conn.transaction().expect("begin");
        let now = "2026-11-27T12:00:00.123456789Z";
        for r in runs {
            let (run, session, seq) = &self.runs[r];
            match self.variant {
                "append" => {
                    let mut stmt = tx
                        .prepare_cached("INSERT INTO log (payload) VALUES (?1 || ?2 || ?3)")
                        .expect("prepare");
                    stmt.execute(params![self.message, self.state, self.events])
                        .expect("insert");
                }
                "by_run" => {
                    let mut stmt = tx
                        .prepare_cached(
                            "INSERT INTO log (run_id, seq, payload) VALUES (?1, ?2, ?3 || ?4 || ?5)",
                        )
                        .expect("prepare");
                    stmt.execute(params![run, seq, self.message, self.state, self.events])
                        .expect("insert");
                }
                _ => {
                    let statements = [
                        "UPDATE sessions SET updated_at = ?2, message_count = message_count + 1 \
                         WHERE id = ?1",
                        "UPDATE runs SET iterations = ?2, updated_at = ?3, \
                         event_count = event_count + 3 WHERE id = ?1",
                        "INSERT INTO messages VALUES (?1, ?2, ?3, ?4)",
                        "INSERT INTO checkpoints VALUES (?1, ?2, ?3, ?4)",
                        "INSERT INTO run_events VALUES (?1, ?2, ?3)",
                        "INSERT INTO checkpoints VALUES (?1, ?2, ?3, ?4, ?5)",
                    ];
                    tx.prepare_cached(statements[0])
                        .and_then(|mut s| s.execute(params![session, now]))
                        .expect("session");
                    tx.prepare_cached(statements[1])
                        .and_then(|mut s| s.execute(params![run, seq, now]))
                        .expect("run");
                    tx.prepare_cached(statements[2])
                        .and_then(|mut s| s.execute(params![session, seq, self.message, now]))
                        .expect("message");
                    if self.variant == "boundary_row" {
                        tx.prepare_cached(statements[5])
                            .and_then(|mut s| {
                                s.execute(params![run, seq, self.state, now, self.events])
                            })
                            .expect("boundary");
                    } else {
                        tx.prepare_cached(statements[3])
                            .and_then(|mut s| s.execute(params![run, seq, self.state, now]))
                            .expect("checkpoint");
                        tx.prepare_cached(statements[4])
                            .and_then(|mut s| s.execute(params![run, seq, self.events]))
                            .expect("events");
                    }
                }
            }
            self.runs[r].2 += 1;
        }
        tx.commit().expect("commit");
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("writer_floor");
    for (variant, schema) in SCHEMAS {
        for runs in RUNS {
            let mut floor = Floor::new(variant, schema, runs);
            for boundaries in [1_usize, 16, 128] {
                group.throughput(Throughput::Elements(boundaries as u64));
                group.bench_with_input(
                    BenchmarkId::new(format!("{variant}/{runs}_runs"), boundaries),
                    &boundaries,
                    |b, &boundaries| {
                        b.iter_custom(|iterations| floor.measure(iterations, boundaries))
                    },
                );
            }
            floor.check_stored();
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
