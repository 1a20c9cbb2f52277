//! Opening and closing the SQLite store as processes do: many at once on a fresh file, after a
//! crash that left a write-ahead log (whole or damaged), and at a clean exit.

use std::path::{Path, PathBuf};

use keel_core::{Message, Store};
use keel_store::SqliteStore;

fn log_of(db: &Path) -> PathBuf {
    let mut log = db.as_os_str().to_owned();
    log.push("-wal");
    PathBuf::from(log)
}

/// Twenty opens at once of a database nobody created yet, each on a thread and runtime of its
/// own (as twenty processes would): every one succeeds, and the schema is whole.
#[test]
fn concurrent_first_opens_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("home").join("keel.db");
    let threads: Vec<_> = (0..20)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    let store = SqliteStore::open(&path).await?;
                    store
                        .append_messages(&format!("s{i}"), None, &[Message::user("hi")])
                        .await?;
                    store.close().await;
                    Ok::<_, keel_core::StoreError>(())
                })
            })
        })
        .collect();
    let failures: Vec<String> = threads
        .into_iter()
        .filter_map(|thread| thread.join().unwrap().err())
        .map(|e| e.to_string())
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");

    let conn = rusqlite::Connection::open(&path).unwrap();
    let (applied, latest): (i64, i64) = conn
        .query_row(
            "SELECT count(*), max(version) FROM _sqlx_migrations WHERE success",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    // Versions are numbered by their files' prefixes (a number may be reserved for a feature
    // still to come, so they need not be contiguous).
    let versions: Vec<i64> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            name[..4].parse().unwrap()
        })
        .collect();
    assert_eq!(
        (applied, latest),
        (versions.len() as i64, *versions.iter().max().unwrap()),
        "each migration applied once"
    );
    let sessions: i64 = conn
        .query_row("SELECT count(*) FROM sessions", [], |row| row.get(0))
        .unwrap();
    assert_eq!(sessions, 20);
}

#[tokio::test]
async fn a_clean_close_leaves_no_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let store = SqliteStore::open(&path).await.unwrap();
    for i in 0..50 {
        store
            .append_messages("s", None, &[Message::user(format!("message {i}"))])
            .await
            .unwrap();
    }
    assert!(std::fs::metadata(log_of(&path)).unwrap().len() > 0);
    Store::close(&store).await;
    assert!(
        !log_of(&path).exists(),
        "the log is emptied and removed at close"
    );

    let reopened = SqliteStore::open(&path).await.unwrap();
    assert_eq!(reopened.messages("s").await.unwrap().len(), 50);
}

/// A database and its log as a process that crashed leaves them: copied while the store is open.
/// Two sessions, each written by transactions of their own after the schema.
async fn crashed_copy(dir: &Path) -> PathBuf {
    let live = dir.join("live");
    let store = SqliteStore::open(&live.join("keel.db")).await.unwrap();
    store
        .append_messages("first", None, &[Message::user("the first session")])
        .await
        .unwrap();
    store
        .append_messages("last", None, &[Message::user("the last session")])
        .await
        .unwrap();
    let copy = dir.join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(live.join("keel.db"), copy.join("keel.db")).unwrap();
    std::fs::copy(log_of(&live.join("keel.db")), log_of(&copy.join("keel.db"))).unwrap();
    copy.join("keel.db")
}

#[tokio::test]
async fn a_whole_log_left_by_a_crash_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed_copy(dir.path()).await;
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.messages("last").await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_damaged_log_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed_copy(dir.path()).await;
    let log = log_of(&path);
    let mut bytes = std::fs::read(&log).unwrap();
    // A byte of the first frame's page: SQLite would read none of the log.
    bytes[32 + 24 + 100] ^= 0x10;
    std::fs::write(&log, &bytes).unwrap();

    let err = SqliteStore::open(&path).await.unwrap_err().to_string();
    assert!(
        err.contains(&log.display().to_string()),
        "names the file: {err}"
    );
    assert!(err.contains("damaged"), "{err}");
    assert!(
        err.contains("Keep a copy") && err.contains("aside"),
        "says what to do: {err}"
    );
    assert_eq!(
        std::fs::read(&log).unwrap(),
        bytes,
        "the log is left as it was"
    );
    assert!(SqliteStore::open(&path).await.is_err(), "and refused again");
}
