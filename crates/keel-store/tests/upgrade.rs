//! Opening a database written by an earlier schema version: the new migrations run once, and
//! what the old keel stored reads as the new keel expects. Here: sessions compacted before
//! schema version 3, whose summaries were known only by their metadata JSON, and runs stored
//! before schema version 4, which had no cost, heartbeat, cancel request or events; and the
//! session-search index, filled from the messages at version 16 and, from version 19, brought up
//! to date once per transaction instead of by an insert trigger.

mod common;

use std::path::Path;

use chrono::{TimeZone, Utc};
use keel_core::store::Commit;
use keel_core::tokens::Encoding;
use keel_core::{
    AgentState, Event, EventKind, InternalReason, Message, RunRecord, SeqRange, Store, StoreError,
    TokenCount, Usage,
};
use keel_platform::MemoryIndex;
use keel_store::SqliteStore;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{Connection, SqlSafeStr};

/// Migrations as the store registers them, up to schema version `last` (the text must be the
/// same, byte for byte: the store checks the checksums of applied migrations).
fn migrations_up_to(last: i64) -> Migrator {
    let migration = |version, description: &str, sql: &'static str| {
        Migration::new(
            version,
            description.to_string().into(),
            MigrationType::Simple,
            sql.into_sql_str(),
            false,
        )
    };
    let all = vec![
        migration(1, "init", include_str!("../migrations/0001_init.sql")),
        migration(2, "users", include_str!("../migrations/0002_users.sql")),
        migration(
            3,
            "summaries",
            include_str!("../migrations/0003_summaries.sql"),
        ),
        migration(
            4,
            "durability",
            include_str!("../migrations/0004_durability.sql"),
        ),
        migration(
            5,
            "checkpoint frames",
            include_str!("../migrations/0005_checkpoint_frames.sql"),
        ),
        migration(
            6,
            "session lanes",
            include_str!("../migrations/0006_session_lanes.sql"),
        ),
        migration(
            7,
            "run launch",
            include_str!("../migrations/0007_run_launch.sql"),
        ),
        migration(8, "daemon", include_str!("../migrations/0008_daemon.sql")),
        migration(
            9,
            "user links",
            include_str!("../migrations/0009_user_links.sql"),
        ),
        migration(
            10,
            "token log",
            include_str!("../migrations/0010_token_log.sql"),
        ),
        migration(
            11,
            "platform",
            include_str!("../migrations/0011_platform.sql"),
        ),
        migration(12, "files", include_str!("../migrations/0012_files.sql")),
        migration(
            13,
            "approvals",
            include_str!("../migrations/0013_approvals.sql"),
        ),
        migration(
            16,
            "session search",
            include_str!("../migrations/0016_session_search.sql"),
        ),
        migration(
            17,
            "known facts",
            include_str!("../migrations/0017_known_facts.sql"),
        ),
        migration(
            18,
            "message memory",
            include_str!("../migrations/0018_message_memory.sql"),
        ),
    ];
    Migrator::with_migrations(all.into_iter().filter(|m| m.version <= last).collect())
}

/// Creates the database at `path` as keel at schema version `version` left it.
async fn database_at_version(path: &Path, version: i64) -> SqliteConnection {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true);
    let mut conn = SqliteConnection::connect_with(&options).await.unwrap();
    migrations_up_to(version).run(&mut conn).await.unwrap();
    conn
}

/// Inserts `messages` into `session` the way schema version 2 stored them (no `summary_last`).
async fn insert_v2(conn: &mut SqliteConnection, session: &str, messages: &[(Message, &str)]) {
    let now = "2025-03-01T12:00:00.000000000Z";
    sqlx::query(
        "INSERT INTO sessions (id, created_at, updated_at, title, message_count) \
         VALUES ($1, $2, $2, NULL, $3)",
    )
    .bind(session)
    .bind(now)
    .bind(messages.len() as i64)
    .execute(&mut *conn)
    .await
    .unwrap();
    for (i, (message, meta)) in messages.iter().enumerate() {
        sqlx::query(
            "INSERT INTO messages (session_id, seq, role, content, meta, created_at) \
             VALUES ($1, $2, $3, $4, NULLIF($5, ''), $6)",
        )
        .bind(session)
        .bind(i as i64 + 1)
        .bind(message.role.as_str())
        .bind(&message.content)
        .bind(*meta)
        .bind(now)
        .execute(&mut *conn)
        .await
        .unwrap();
    }
}

fn summary(first: u64, last: u64) -> Message {
    let mut message = Message::internal_user(
        format!("Summary of {first} to {last}."),
        InternalReason::CompactionSummary,
    );
    message.meta.summary_of = Some(SeqRange { first, last });
    message.meta.tokens = Some(TokenCount {
        encoding: Encoding::Cl100kBase,
        count: 9,
    });
    message
}

/// Pairs each message with its metadata JSON as serde writes it ('' for the default).
fn with_meta(messages: Vec<Message>) -> Vec<(Message, String)> {
    messages
        .into_iter()
        .map(|message| {
            let meta = if message.meta == Default::default() {
                String::new()
            } else {
                serde_json::to_string(&message.meta).unwrap()
            };
            (message, meta)
        })
        .collect()
}

#[tokio::test]
async fn sessions_compacted_before_version_3_load_their_context_after_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let mut conn = database_at_version(&path, 2).await;

    // Twice compacted: the latest summary (seq 6) replaces 1..=5.
    let compacted = with_meta(vec![
        Message::system("be brief"),
        Message::user("q1"),
        Message::assistant("a1"),
        summary(2, 3),
        Message::assistant("a2"),
        summary(1, 5),
        Message::user("q2"),
    ]);
    let borrowed: Vec<(Message, &str)> = compacted
        .iter()
        .map(|(message, meta)| (message.clone(), meta.as_str()))
        .collect();
    insert_v2(&mut conn, "compacted", &borrowed).await;
    // Metadata the upgrade must step over without failing: not JSON, not an object, a range
    // whose end is not a number.
    let odd = [
        (Message::user("plain"), ""),
        (Message::user("broken"), "{oops"),
        (Message::user("array"), "[1]"),
        (
            Message::user("text"),
            r#"{"summary_of":{"first":1,"last":"two"}}"#,
        ),
    ];
    insert_v2(&mut conn, "odd", &odd).await;
    conn.close().await.unwrap();

    let store = SqliteStore::open(&path).await.unwrap();
    let context = store.context_messages("compacted").await.unwrap();
    let seqs: Vec<u64> = context.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, [6, 7]);
    assert_eq!(context[0].message, summary(1, 5));
    assert_eq!(context[1].message, Message::user("q2"));
    let all = store.messages("compacted").await.unwrap();
    let messages: Vec<&Message> = all.iter().map(|m| &m.message).collect();
    let written: Vec<&Message> = compacted.iter().map(|(m, _)| m).collect();
    assert_eq!(messages, written);

    // The column was filled from the JSON, for summaries only.
    let mut conn = SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(&path))
        .await
        .unwrap();
    let filled: Vec<(String, i64, Option<i64>)> = sqlx::query_as(
        "SELECT session_id, seq, summary_last FROM messages \
         WHERE summary_last IS NOT NULL ORDER BY session_id, seq",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(
        filled,
        [
            ("compacted".to_string(), 4, Some(3)),
            ("compacted".to_string(), 6, Some(5))
        ]
    );
    let version: i64 = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(version >= 3);

    // The odd rows upgraded untouched: the context is every message, and a bad one still reads
    // as corrupt rather than disappearing.
    let err = store.context_messages("odd").await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    sqlx::query("DELETE FROM messages WHERE session_id = 'odd' AND seq > 1")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(store.context_messages("odd").await.unwrap().len(), 1);

    // The new write path takes over from the migrated rows.
    store
        .append_messages(
            "compacted",
            None,
            &[summary(1, 7), Message::assistant("a3")],
        )
        .await
        .unwrap();
    let seqs: Vec<u64> = store
        .context_messages("compacted")
        .await
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(seqs, [8, 9]);
    store.close().await;
    // Reopening applies nothing twice.
    SqliteStore::open(&path).await.unwrap().close().await;
}

/// Inserts a run the way schema version 3 stored it (no cost, heartbeat, cancel or events).
async fn insert_v3_run(conn: &mut SqliteConnection, id: &str, state: &str, started_at: &str) {
    sqlx::query(
        "INSERT INTO runs (id, session_id, state, reason, provider, model, model_used, \
         iterations, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, \
         final_text, error, started_at, updated_at, finished_at) \
         VALUES ($1, 's', $2, NULL, 'openai', 'gpt-4.1', NULL, 3, 100, 20, 0, 0, NULL, NULL, \
         $3, $3, NULL)",
    )
    .bind(id)
    .bind(state)
    .bind(started_at)
    .execute(&mut *conn)
    .await
    .unwrap();
}

#[tokio::test]
async fn runs_stored_before_version_4_read_as_never_cancelled_and_cost_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let mut conn = database_at_version(&path, 3).await;
    insert_v2(&mut conn, "s", &[(Message::user("hi"), "")]).await;
    insert_v3_run(
        &mut conn,
        "old-done",
        "completed",
        "2025-03-01T12:00:00.000000000Z",
    )
    .await;
    insert_v3_run(
        &mut conn,
        "old-live",
        "running",
        "2025-03-01T12:05:00.000000000Z",
    )
    .await;
    conn.close().await.unwrap();

    let store = SqliteStore::open(&path).await.unwrap();
    let started = Utc.with_ymd_and_hms(2025, 3, 1, 12, 5, 0).unwrap();
    let expected = RunRecord {
        id: "old-live".into(),
        session_id: "s".into(),
        state: AgentState::Running,
        reason: None,
        provider: "openai".into(),
        model: "gpt-4.1".into(),
        model_used: None,
        iterations: 3,
        usage: Usage {
            input_tokens: 100,
            output_tokens: 20,
            ..Usage::default()
        },
        final_text: None,
        error: None,
        started_at: started,
        updated_at: started,
        finished_at: None,
        cost: 0.0,
        heartbeat_at: None,
        cancel_requested_at: None,
        resume_available: false,
        launch: None,
        worker: None,
    };
    assert_eq!(store.run("old-live").await.unwrap(), Some(expected.clone()));
    assert_eq!(store.list_runs(None, 10).await.unwrap().len(), 2);
    // The finished one is not active; the unfinished one is, and has no checkpoint.
    assert_eq!(
        store.active_runs().await.unwrap(),
        std::slice::from_ref(&expected)
    );
    assert_eq!(store.latest_checkpoint("old-live").await.unwrap(), None);

    // The new write path takes over: events are numbered from the first, the flag works.
    let event = Event {
        ts: Utc::now(),
        run_id: "old-live".into(),
        session_id: "s".into(),
        kind: EventKind::RunCancelled { iterations: 3 },
    };
    assert!(store.request_cancel("old-live", Utc::now()).await.unwrap());
    let mut run = expected;
    run.state = AgentState::Cancelled;
    let commit = Commit {
        events: std::slice::from_ref(&event),
        ..Commit::new(&run, &[])
    };
    assert!(store.commit(&commit).await.unwrap().cancel_requested);
    assert_eq!(store.events("old-live").await.unwrap(), [event]);
    assert!(store.active_runs().await.unwrap().is_empty());
    assert_eq!(store.messages("s").await.unwrap().len(), 1);
    store.close().await;
}

#[tokio::test]
async fn messages_stored_before_version_16_are_found_by_session_search_after_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let mut conn = database_at_version(&path, 2).await;
    let old = with_meta(vec![
        Message::user("my bike lock combination is 2580"),
        Message::internal_user("bike nudge", InternalReason::LoopNudge),
        Message::assistant("Noted, the bike lock."),
    ]);
    let mut borrowed: Vec<(Message, &str)> = old
        .iter()
        .map(|(message, meta)| (message.clone(), meta.as_str()))
        .collect();
    // Metadata that is not JSON must not stop the upgrade; it counts as not internal.
    borrowed.push((Message::user("bike with broken meta"), "{oops"));
    insert_v2(&mut conn, "old", &borrowed).await;
    conn.close().await.unwrap();

    let store = SqliteStore::open(&path).await.unwrap();
    let search = keel_platform::SessionSearch {
        query: "bike".into(),
        owner: None,
        exclude_session: None,
        limit: 5,
    };
    let hits = store.search_sessions(&search).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].snippets.len(), 3, "{hits:?}");
    assert!(
        hits[0].snippets.iter().all(|s| !s.contains("nudge")),
        "{hits:?}"
    );
    // Messages written after the upgrade are indexed as they are stored.
    store
        .append_messages("old", None, &[Message::user("a unicycle now")])
        .await
        .unwrap();
    let mut search = search;
    search.query = "unicycle".into();
    assert_eq!(store.search_sessions(&search).await.unwrap().len(), 1);
    store.close().await;
}

#[tokio::test]
async fn a_search_index_kept_by_the_insert_trigger_is_kept_and_extended_after_version_19() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let mut conn = database_at_version(&path, 18).await;
    // Indexed one by one by version 16's trigger as they are stored.
    let old = with_meta(vec![
        Message::user("where did I park the canoe"),
        Message::internal_user("canoe nudge", InternalReason::LoopNudge),
        Message::assistant("The canoe is at the north dock."),
    ]);
    let borrowed: Vec<(Message, &str)> = old
        .iter()
        .map(|(message, meta)| (message.clone(), meta.as_str()))
        .collect();
    insert_v2(&mut conn, "old", &borrowed).await;
    insert_v2(&mut conn, "gone", &[(Message::user("a kayak"), "")]).await;
    conn.close().await.unwrap();

    let store = SqliteStore::open(&path).await.unwrap();
    common::assert_search_index_consistent(&path);
    let mut search = keel_platform::SessionSearch {
        query: "canoe".into(),
        owner: None,
        exclude_session: None,
        limit: 5,
    };
    let hits = store.search_sessions(&search).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].snippets.len(), 2, "not the internal one: {hits:?}");
    // The newest session of the old index is deleted: the index forgets it, and its rowid,
    // taken again by the next message, is indexed.
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch("PRAGMA foreign_keys = ON; DELETE FROM sessions WHERE id = 'gone'")
        .unwrap();
    search.query = "kayak".into();
    assert!(store.search_sessions(&search).await.unwrap().is_empty());
    store
        .append_messages("old", None, &[Message::user("and the paddle?")])
        .await
        .unwrap();
    search.query = "paddle".into();
    assert_eq!(store.search_sessions(&search).await.unwrap().len(), 1);
    let found = store.search_messages(None, "canoe paddle", None, 0.0, 10);
    assert_eq!(found.await.unwrap().len(), 3);
    store.close().await;
    common::assert_search_index_consistent(&path);
    // Reopening applies nothing twice.
    SqliteStore::open(&path).await.unwrap().close().await;
}
