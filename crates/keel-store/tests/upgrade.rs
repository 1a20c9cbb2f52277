//! Opening a database written by an earlier schema version: the new migrations run once, and
//! what the old keel stored reads as the new keel expects. Here: sessions compacted before
//! schema version 3, whose summaries were known only by their metadata JSON.

use std::path::Path;

use keel_core::tokens::Encoding;
use keel_core::{InternalReason, Message, SeqRange, Store, StoreError, TokenCount};
use keel_store::SqliteStore;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{Connection, SqlSafeStr};

/// Migrations as the store registers them, up to schema version 2 (the text must be the same,
/// byte for byte: the store checks the checksums of applied migrations).
fn migrations_1_and_2() -> Migrator {
    let migration = |version, description: &str, sql: &'static str| {
        Migration::new(
            version,
            description.to_string().into(),
            MigrationType::Simple,
            sql.into_sql_str(),
            false,
        )
    };
    Migrator::with_migrations(vec![
        migration(1, "init", include_str!("../migrations/0001_init.sql")),
        migration(2, "users", include_str!("../migrations/0002_users.sql")),
    ])
}

/// Creates the database at `path` as keel at schema version 2 left it.
async fn version_2_database(path: &Path) -> SqliteConnection {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true);
    let mut conn = SqliteConnection::connect_with(&options).await.unwrap();
    migrations_1_and_2().run(&mut conn).await.unwrap();
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
    let mut conn = version_2_database(&path).await;

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
