//! The session-search index (`messages_fts`, `migrations/0016_session_search.sql`) kept in step
//! with the messages once per write transaction, as its last statement
//! (`migrations/0019_search_index_per_transaction.sql`).
//!
//! Every transaction of the writer that stores messages ends with [`CATCH_UP`]: index the
//! searchable messages above the watermark (`messages_fts_indexed.last`, the highest rowid of
//! `messages` the index has been brought up to), then move the watermark to the newest message.
//! One FTS5 write per transaction, after every other statement: FTS5 flushes what it holds as a
//! new segment at each statement savepoint that follows a write to it, so an index written row by
//! row from a trigger cost one segment, and its merges, per statement of the transaction (~15%
//! of the writer's instructions, issue 18). A group of commits catches up once, after the last.
//!
//! The watermark catches up whatever stored the messages above it: the writer, another process
//! (a keel started before the upgrade to schema version 19, whose insert trigger is gone), or a
//! hand-written insert; the store also catches up when it opens. It moves in the same transaction
//! as the messages, so a rollback takes both back.

use sqlx::sqlite::SqliteConnection;

/// Indexes the searchable messages (the view `messages_searchable`, the choice made in 0016)
/// stored above the watermark: a range of the rowid, nothing below it is read.
const INDEX_NEW: &str = "INSERT INTO messages_fts (rowid, content) \
     SELECT id, content FROM messages_searchable \
     WHERE id > (SELECT last FROM messages_fts_indexed)";

/// Moves the watermark to the newest message, after [`INDEX_NEW`]; writes only when it moves.
/// `IS NOT` rather than `<`: a watermark above every message (the newest deleted without the
/// delete trigger, as `REPLACE` does) comes back down, since the next message gets rowid max + 1.
/// A statement after the index's write may make FTS5 flush its terms early, but all of them at
/// once, so still one segment; this one changes one row by its key and opens no statement
/// journal at all.
const MOVE_WATERMARK: &str = "UPDATE messages_fts_indexed \
     SET last = (SELECT coalesce(max(rowid), 0) FROM messages) \
     WHERE id = 1 AND last IS NOT (SELECT coalesce(max(rowid), 0) FROM messages)";

/// The statements that bring the index up to date, in order; the last ones of a transaction.
pub(crate) const CATCH_UP: [&str; 2] = [INDEX_NEW, MOVE_WATERMARK];

/// Brings the index up to date on the writer's connection, in its open transaction.
pub(crate) fn catch_up(conn: &rusqlite::Connection) -> Result<(), String> {
    for sql in CATCH_UP {
        conn.prepare_cached(sql)
            .and_then(|mut statement| statement.raw_execute())
            .map_err(|e| format!("cannot index the new messages for search: {e}"))?;
    }
    Ok(())
}

/// Brings the index up to date when the store opens, in the transaction that updated the schema:
/// messages another process stored without indexing them (see the module documentation).
pub(crate) async fn catch_up_on_open(conn: &mut SqliteConnection) -> Result<(), String> {
    for sql in CATCH_UP {
        sqlx::query(sql)
            .execute(&mut *conn)
            .await
            .map_err(|e| format!("cannot index the new messages for search: {e}"))?;
    }
    Ok(())
}

/// What is wrong with the session-search index of the database `conn` is open on, if anything:
/// it must hold exactly the searchable messages, FTS5's count of rows (which BM25 reads) must be
/// theirs, the watermark must be the newest message, and FTS5's own integrity check must pass.
/// For tests and diagnosis; it reads every message's id.
pub fn check(conn: &rusqlite::Connection) -> Result<(), String> {
    use rusqlite::OptionalExtension;
    let ids = |sql: &str| -> Result<Vec<i64>, String> {
        let mut statement = conn.prepare(sql).map_err(|e| format!("{sql}: {e}"))?;
        let rows = statement
            .query_map([], |row| row.get(0))
            .map_err(|e| format!("{sql}: {e}"))?;
        rows.collect::<Result<_, _>>()
            .map_err(|e| format!("{sql}: {e}"))
    };
    let indexed = ids("SELECT id FROM messages_fts_docsize ORDER BY id")?;
    let searchable = ids("SELECT id FROM messages_searchable ORDER BY id")?;
    if indexed != searchable {
        return Err(format!(
            "the index holds messages {indexed:?}, the searchable ones are {searchable:?}"
        ));
    }
    // FTS5's count of rows: deleting from the index a message it does not hold would take it
    // down all the same. It is the first varint of the averages record (rowid 1).
    let averages: Option<Vec<u8>> = conn
        .query_row(
            "SELECT block FROM messages_fts_data WHERE id = 1",
            [],
            |row| row.get(0),
        )
        .optional()
        .map_err(|e| format!("reading FTS5's averages: {e}"))?;
    let mut rows = 0i64;
    for byte in averages.unwrap_or_default() {
        rows = (rows << 7) | i64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            break;
        }
    }
    if usize::try_from(rows).ok() != Some(searchable.len()) {
        return Err(format!(
            "FTS5 counts {rows} rows, there are {} searchable messages",
            searchable.len()
        ));
    }
    let watermark = ids("SELECT last FROM messages_fts_indexed")?;
    let newest = ids("SELECT coalesce(max(rowid), 0) FROM messages")?;
    if watermark != newest {
        return Err(format!(
            "the watermark is {watermark:?}, the newest message {newest:?}"
        ));
    }
    conn.execute_batch("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")
        .map_err(|e| format!("FTS5's integrity check: {e}"))
}

#[cfg(test)]
mod tests {
    use crate::batch::Batch;
    use crate::connections::Connections;
    use crate::writer;
    use rusqlite::Connection;

    /// Checks the index as the integration tests do (see [`super::check`]).
    fn assert_consistent(conn: &Connection) {
        super::check(conn).unwrap();
    }

    /// A file with the store's schema, and the writer's kind of connection to it.
    async fn store_file() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keel.db");
        Connections::open(&path).await.unwrap().close().await;
        let conn = writer::connect(&path).unwrap();
        (dir, conn)
    }

    /// Appends one user message per text to `session`.
    fn append(session: &str, texts: &[&str]) -> Vec<Batch> {
        let messages: Vec<_> = texts.iter().map(|t| keel_core::Message::user(*t)).collect();
        crate::batch::plan(session, None, &messages, None).unwrap()
    }

    /// Appends to `session`, then fails (the watermark's row exists).
    fn append_and_fail(session: &str, texts: &[&str]) -> Vec<Batch> {
        let mut batches = append(session, texts);
        batches.push(Batch::of(
            "INSERT INTO messages_fts_indexed (id, last) VALUES (1, 0)",
        ));
        batches
    }

    /// How many messages the index finds for `word`.
    fn found(conn: &Connection, word: &str) -> i64 {
        let sql = "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH $1";
        conn.query_row(sql, [word], |row| row.get(0)).unwrap()
    }

    #[tokio::test]
    async fn a_group_indexes_the_messages_of_its_commits_and_none_of_a_failed_one() {
        let (_dir, conn) = store_file().await;
        let long: Vec<String> = (0..150).map(|i| format!("cherry{i}")).collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        let group = vec![
            append("a", &["apple", "apple pie"]),
            append_and_fail("b", &["walrus"]),
            append("c", &long),
            Vec::new(),
        ];
        let outcomes = writer::write(&conn, &group);
        assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
        assert!(outcomes[1].is_err(), "{outcomes:?}");
        assert_eq!(found(&conn, "apple"), 2);
        assert_eq!(found(&conn, "walrus"), 0);
        assert_eq!(found(&conn, "cherry0") + found(&conn, "cherry149"), 2);
        assert_consistent(&conn);
        // A group that succeeds whole: the messages of each of its commits.
        let outcomes = writer::write(&conn, &[append("d", &["date"]), append("e", &["date"])]);
        assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
        assert_eq!(found(&conn, "date"), 2);
        assert_consistent(&conn);
    }

    #[tokio::test]
    async fn a_failed_commit_leaves_the_watermark_where_it_was() {
        let (_dir, conn) = store_file().await;
        assert_eq!(
            writer::write(&conn, &[append("a", &["first"])])[0],
            Ok(None)
        );
        assert!(writer::write(&conn, &[append_and_fail("a", &["lost", "lost"])])[0].is_err());
        assert_consistent(&conn);
        assert_eq!(found(&conn, "lost"), 0);
        // The next messages take the rowids the failed ones had, and are indexed.
        assert_eq!(
            writer::write(&conn, &[append("a", &["kept", "kept"])])[0],
            Ok(None)
        );
        assert_eq!(found(&conn, "kept"), 2);
        assert_consistent(&conn);
    }
}
