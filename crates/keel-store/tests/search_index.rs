//! The session-search index on SQLite, brought up to date once per write transaction (schema
//! version 19): a message is searchable as soon as its write returns, whatever wrote it, and the
//! index holds exactly the searchable messages after deletes and writes of every shape.

mod common;
use common::{assert_search_index_consistent, run_record};

use std::path::Path;

use keel_core::store::Commit;
use keel_core::{InternalReason, Message, Store};
use keel_platform::MemoryIndex;
use keel_platform::SessionSearch;
use keel_store::SqliteStore;
use rusqlite::Connection;

/// The sessions whose messages match `query`, best first.
async fn sessions(store: &SqliteStore, query: &str) -> Vec<String> {
    let search = SessionSearch {
        query: query.into(),
        owner: None,
        exclude_session: None,
        limit: 50,
    };
    let hits = store.search_sessions(&search).await.unwrap();
    hits.into_iter().map(|hit| hit.session_id).collect()
}

/// How many messages match `query` (`search_messages`, keel-memory's recall).
async fn messages(store: &SqliteStore, query: &str) -> usize {
    let hits = store.search_messages(None, query, None, 0.0, 1_000);
    hits.await.unwrap().len()
}

/// Inserts a user message the way another program would, without keel's writer.
fn insert_by_hand(path: &Path, session: &str, seq: i64, text: &str) {
    Connection::open(path)
        .unwrap()
        .execute(
            "INSERT INTO messages (session_id, seq, role, content, created_at) \
             VALUES ($1, $2, 'user', $3, '2026-11-25T00:00:00.000000000Z')",
            rusqlite::params![session, seq, text],
        )
        .unwrap();
}

#[tokio::test]
async fn a_message_is_searchable_as_soon_as_its_write_returns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let store = SqliteStore::open(&path).await.unwrap();
    for i in 0..5 {
        let word = format!("kestrel{i}");
        store
            .append_messages("appended", None, &[Message::user(word.as_str())])
            .await
            .unwrap();
        assert_eq!(sessions(&store, &word).await, ["appended"]);
        assert_eq!(messages(&store, &word).await, 1);
    }
    // A loop boundary: the messages with the run and the rest of the commit.
    let run = run_record("r", "committed", chrono::Utc::now());
    let boundary = [
        Message::assistant("the heron answers"),
        Message::internal_user("heron nudge", InternalReason::LoopNudge),
    ];
    store.commit(&Commit::new(&run, &boundary)).await.unwrap();
    assert_eq!(sessions(&store, "heron").await, ["committed"]);
    assert_eq!(messages(&store, "heron").await, 1, "internal ones are not");
    store.close().await;
    assert_search_index_consistent(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_messages_of_grouped_and_long_writes_are_all_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let store = SqliteStore::open(&path).await.unwrap();
    // Many writers at once: the writer runs those waiting together, in one transaction.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let store = store.clone();
        tasks.spawn(async move {
            let messages = [
                Message::user(format!("puffin number{i}")),
                Message::assistant("puffin answer"),
            ];
            store
                .append_messages(&format!("s{i}"), None, &messages)
                .await
        });
    }
    while let Some(written) = tasks.join_next().await {
        written.unwrap().unwrap();
    }
    assert_eq!(messages(&store, "puffin").await, 400);
    assert_eq!(sessions(&store, "number137").await, ["s137"]);
    // One write long enough to take several batches of statements.
    let long: Vec<Message> = (0..150)
        .map(|i| Message::assistant(format!("gannet{i}")))
        .collect();
    store.append_messages("long", None, &long).await.unwrap();
    assert_eq!(sessions(&store, "gannet0").await, ["long"]);
    assert_eq!(sessions(&store, "gannet149").await, ["long"]);
    store.close().await;
    assert_search_index_consistent(&path);
}

#[tokio::test]
async fn messages_another_program_stored_are_indexed_by_the_next_write_or_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store
        .append_messages("s", None, &[Message::user("first")])
        .await
        .unwrap();
    insert_by_hand(&path, "s", 2, "an otter by hand");
    store
        .append_messages("t", None, &[Message::user("second")])
        .await
        .unwrap();
    assert_eq!(sessions(&store, "otter").await, ["s"]);
    insert_by_hand(&path, "s", 3, "a marten by hand");
    store.close().await;
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(sessions(&store, "marten").await, ["s"]);
    store.close().await;
    assert_search_index_consistent(&path);
}

#[tokio::test]
async fn deleted_messages_leave_the_index_and_their_rowids_are_indexed_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let store = SqliteStore::open(&path).await.unwrap();
    for (session, text) in [("a", "alpha"), ("b", "beta one"), ("b", "beta two")] {
        store
            .append_messages(session, None, &[Message::user(text)])
            .await
            .unwrap();
    }
    // The newest messages go: the next ones get their rowids.
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA foreign_keys = ON; DELETE FROM sessions WHERE id = 'b'")
        .unwrap();
    assert!(sessions(&store, "beta").await.is_empty());
    assert_search_index_consistent(&path);
    store
        .append_messages("c", None, &[Message::user("gamma"), Message::user("delta")])
        .await
        .unwrap();
    assert_eq!(sessions(&store, "gamma").await, ["c"]);
    assert_eq!(sessions(&store, "delta").await, ["c"]);
    assert_search_index_consistent(&path);
    // A message deleted before it was indexed leaves the index whole.
    insert_by_hand(&path, "c", 3, "epsilon");
    conn.execute("DELETE FROM messages WHERE content = 'epsilon'", [])
        .unwrap();
    assert_search_index_consistent(&path);
    store
        .append_messages("c", None, &[Message::user("zeta")])
        .await
        .unwrap();
    assert_eq!(sessions(&store, "zeta").await, ["c"]);
    assert!(sessions(&store, "epsilon").await.is_empty());
    store.close().await;
    assert_search_index_consistent(&path);
}
