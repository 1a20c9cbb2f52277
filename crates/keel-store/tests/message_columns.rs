//! What a message's metadata says of its model, its output tokens and its pin reads back as
//! columns of `messages` (schema 27), for queries that do not parse JSON: set from the
//! metadata the store writes, empty for a message without them, and never an error for
//! metadata that is not what keel writes.

use keel_core::{Message, Store};
use keel_store::SqliteStore;

/// A row's seq, model, output tokens and pin.
type Row = (i64, Option<String>, Option<i64>, Option<i64>);

#[tokio::test]
async fn model_output_tokens_and_pins_read_back_as_columns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let mut answer = Message::assistant("It is eu-west-3.");
    answer.meta.model = Some("gpt-4o-2024-08-06".into());
    answer.meta.output_tokens = Some(7);
    let mut pinned = Message::user("Always answer in French.");
    pinned.meta.pinned = true;
    store
        .append_messages("s", Some("r1"), &[Message::user("where?"), answer, pinned])
        .await
        .unwrap();
    store.close().await;

    let db = rusqlite::Connection::open(&path).unwrap();
    // A hand-written row whose metadata is not JSON reads as none of them.
    db.execute(
        "INSERT INTO messages (session_id, seq, role, content, meta, created_at) \
         VALUES ('s', 4, 'assistant', 'x', '{\"pinned\": tru', '2026-01-01T00:00:00.000000000Z')",
        [],
    )
    .unwrap();
    let rows: Vec<Row> = db
        .prepare("SELECT seq, model, output_tokens, pinned FROM messages WHERE session_id = 's' ORDER BY seq")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        rows,
        [
            (1, None, None, None),
            (2, Some("gpt-4o-2024-08-06".into()), Some(7), None),
            (3, None, None, Some(1)),
            (4, None, None, None),
        ]
    );
    // The pin index is the one a session's pinned messages are found through.
    let plan: String = db
        .query_row(
            "EXPLAIN QUERY PLAN SELECT seq FROM messages WHERE session_id = 's' AND pinned = 1",
            [],
            |row| row.get(3),
        )
        .unwrap();
    assert!(plan.contains("messages_pinned"), "{plan}");
}

/// A row's seq, model, output tokens, pin, importance and internal mark, on PostgreSQL.
type PgRow = (i64, Option<String>, Option<i64>, bool, Option<f64>, bool);

/// PostgreSQL keeps them as plain columns, which the store fills from the metadata it writes
/// (with the importance and whether the message is internal, which SQLite reads from the JSON).
#[tokio::test]
async fn model_output_tokens_pins_importance_and_internal_marks_are_columns_on_postgres() {
    let Some(store) = keel_store::postgres::testing::store().await else {
        return;
    };
    let mut answer = Message::assistant("It is eu-west-3.");
    answer.meta.model = Some("gpt-4o-2024-08-06".into());
    answer.meta.output_tokens = Some(7);
    answer.meta.importance = Some(0.9);
    let mut pinned = Message::user("Always answer in French.");
    pinned.meta.pinned = true;
    let nudge = Message::internal_user("continue", keel_core::InternalReason::MaxTokensRecovery);
    store
        .append_messages(
            "s",
            Some("r1"),
            &[Message::user("where?"), answer, pinned, nudge],
        )
        .await
        .unwrap();
    let rows: Vec<PgRow> = sqlx::query_as(
        "SELECT seq, model, output_tokens, pinned, importance, internal FROM messages \
         WHERE session_id = 's' ORDER BY seq",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            (1, None, None, false, None, false),
            (
                2,
                Some("gpt-4o-2024-08-06".into()),
                Some(7),
                false,
                Some(0.9),
                false
            ),
            (3, None, None, true, None, false),
            (4, None, None, false, None, true),
        ]
    );
    // The important message is in the partial index's range, as SQLite's JSON reading puts it.
    let important: i64 =
        sqlx::query_scalar("SELECT count(*) FROM messages WHERE importance >= 0.9")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(important, 1);
}
