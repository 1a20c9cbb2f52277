//! Tests of [`super::SqliteStore`]: how its connections are set up and which indexes its
//! queries read.

use super::*;
use sqlx::AssertSqlSafe;
use sqlx::sqlite::SqliteConnection;

async fn pragma(conn: &mut SqliteConnection, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(conn).await.unwrap()
}

/// Runs `sql` on the writer.
async fn execute(store: &SqliteStore, sql: &str) -> Result<Option<bool>, String> {
    store.conns.transaction(vec![Batch::of(sql)]).await
}

#[tokio::test]
async fn readers_are_opened_when_needed() {
    let store = SqliteStore::open_temporary().await.unwrap();
    assert_eq!(store.conns.open_readers(), 0, "none at open");
    for _ in 0..5 {
        drop(store.conns.reader().await.unwrap());
    }
    assert_eq!(store.conns.open_readers(), 1, "one for reads one at a time");
    let first = store.conns.reader().await.unwrap();
    let second = store.conns.reader().await.unwrap();
    drop((first, second));
    assert_eq!(
        store.conns.open_readers(),
        2,
        "another for a read meanwhile"
    );
    store.close().await;
    assert!(store.conns.reader().await.is_err(), "none once closed");
}

#[tokio::test]
async fn connections_are_set_up_once_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("keel.db"))
        .await
        .unwrap();
    let mut count = 0;
    for mut conn in store.conns.opened_readers().await {
        let conn = &mut *conn;
        // 1 = NORMAL
        assert_eq!(pragma(conn, "PRAGMA synchronous").await, 1);
        assert_eq!(pragma(conn, "PRAGMA busy_timeout").await, 5000);
        assert_eq!(pragma(conn, "PRAGMA foreign_keys").await, 1);
        count += 1;
    }
    assert_eq!(count, 4, "four readers");
    for check in [
        "SELECT synchronous = 1 FROM pragma_synchronous",
        "SELECT timeout = 5000 FROM pragma_busy_timeout",
        "SELECT foreign_keys = 1 FROM pragma_foreign_keys",
        "SELECT journal_mode = 'wal' FROM pragma_journal_mode",
    ] {
        assert_eq!(
            execute(&store, check).await,
            Ok(Some(true)),
            "the writer: {check}"
        );
    }
    for _ in 0..4 {
        let write =
            sqlx::query("INSERT INTO sessions (id, created_at, updated_at) VALUES ('x', '', '')")
                .execute(&mut *store.conns.reader().await.unwrap())
                .await;
        assert!(write.is_err(), "reader connections are read-only");
    }
    execute(
        &store,
        "INSERT INTO sessions (id, created_at, updated_at) VALUES ('x', '', '')",
    )
    .await
    .unwrap();

    store.close().await;
    let err = store.session("x").await.unwrap_err();
    assert!(err.to_string().contains("closed"), "{err}");
    let err = store.ensure_session("y").await.unwrap_err();
    assert!(err.to_string().contains("closed"), "{err}");
}

/// The details of `EXPLAIN QUERY PLAN` for `query` (with `$1` = "s"), one step a line.
async fn plan(store: &SqliteStore, query: &str) -> String {
    // Rows of EXPLAIN QUERY PLAN are (id, parent, notused, detail).
    let rows: Vec<(i64, i64, i64, String)> =
        sqlx::query_as(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {query}")))
            .bind("s")
            .fetch_all(&mut *store.conns.reader().await.unwrap())
            .await
            .unwrap();
    rows.into_iter()
        .map(|row| row.3)
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn the_context_is_found_through_indexes_without_a_scan() {
    let store = SqliteStore::open_temporary().await.unwrap();
    let mut plans = vec![plan(&store, SELECT_CONTEXT_MESSAGES).await];
    // Also once the planner has statistics of a long, twice compacted session.
    let mut messages: Vec<Message> = (0..500)
        .map(|i| Message::assistant(i.to_string()))
        .collect();
    for (at, last) in [(200, 200), (400, 400)] {
        messages[at].meta.summary_of = Some(keel_core::SeqRange { first: 1, last });
    }
    store.append_messages("s", None, &messages).await.unwrap();
    store.append_messages("t", None, &messages).await.unwrap();
    execute(&store, "ANALYZE").await.unwrap();
    plans.push(plan(&store, SELECT_CONTEXT_MESSAGES).await);

    for text in plans {
        assert!(
            text.contains("COVERING INDEX messages_summaries (session_id=?)"),
            "the latest summary comes from the partial index:\n{text}"
        );
        assert!(
            text.contains("sqlite_autoindex_messages_1 (session_id=? AND seq>?)"),
            "the messages after it come from the primary key:\n{text}"
        );
        assert!(
            text.contains("INDEX messages_pinned (session_id=? AND seq<?)"),
            "the first pinned message comes from its partial index:\n{text}"
        );
        assert!(!text.contains("SCAN"), "nothing is scanned:\n{text}");
        assert!(!text.contains("TEMP B-TREE"), "nothing is sorted:\n{text}");
    }
    assert_eq!(store.context_messages("s").await.unwrap().len(), 100);
}

#[tokio::test]
async fn active_runs_are_read_in_order_from_their_partial_index() {
    let store = SqliteStore::open_temporary().await.unwrap();
    let mut plans = vec![plan(&store, ACTIVE_RUNS).await];
    // Also once the planner has statistics of many finished runs and a few active ones.
    for i in 0..300 {
        let run = RunRecord {
            id: format!("r{i}"),
            state: if i % 50 == 0 {
                keel_core::AgentState::Running
            } else {
                keel_core::AgentState::Completed
            },
            ..crate::batch::tests::run()
        };
        store.save_run(&run, &[]).await.unwrap();
    }
    execute(&store, "ANALYZE").await.unwrap();
    plans.push(plan(&store, ACTIVE_RUNS).await);
    for text in plans {
        assert!(text.contains("USING INDEX runs_active"), "{text}");
        assert!(!text.contains("TEMP B-TREE"), "nothing is sorted:\n{text}");
    }
    assert_eq!(store.active_runs().await.unwrap().len(), 6);
}

#[tokio::test]
async fn runs_listed_by_a_state_come_from_an_index_of_that_state() {
    use keel_core::AgentState;
    let store = SqliteStore::open_temporary().await.unwrap();
    for i in 0..300 {
        let run = RunRecord {
            id: format!("r{i:03}"),
            state: match i % 100 {
                0 => AgentState::Running,
                1 => AgentState::WaitingOnHuman,
                _ => AgentState::Completed,
            },
            ..crate::batch::tests::run()
        };
        store.save_run(&run, &[]).await.unwrap();
    }
    execute(&store, "ANALYZE").await.unwrap();
    // An unfinished state may read the partial index of unfinished runs or the index by state
    // (the planner picks); a finished one, the index by state. Never a walk of every run.
    for state in [
        AgentState::Running,
        AgentState::WaitingOnHuman,
        AgentState::Queued,
        AgentState::Error,
    ] {
        let filter = keel_platform::RunFilter {
            state: Some(state),
            limit: 50,
            ..Default::default()
        };
        let (sql, _) = crate::conversations::runs_sql(&filter);
        let text = plan(&store, &sql).await;
        assert!(
            text.contains("USING INDEX runs_by_state (state=?)")
                || (!state.is_terminal() && text.contains("USING INDEX runs_active")),
            "{state:?}: {text}"
        );
        assert!(!text.contains("TEMP B-TREE"), "nothing is sorted:\n{text}");
    }
    // The same runs as before the index could be read.
    let found = |state| {
        let store = &store;
        async move {
            let filter = keel_platform::RunFilter {
                state: Some(state),
                limit: 50,
                ..Default::default()
            };
            let runs = keel_platform::ConversationStore::find_runs(store, &filter)
                .await
                .unwrap();
            runs.into_iter().map(|run| run.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(found(AgentState::Running).await, ["r200", "r100", "r000"]);
    assert_eq!(
        found(AgentState::WaitingOnHuman).await,
        ["r201", "r101", "r001"]
    );
    assert_eq!(found(AgentState::Completed).await.len(), 50);
}

#[tokio::test]
async fn the_token_log_keeps_only_the_index_its_reader_uses() {
    let store = SqliteStore::open_temporary().await.unwrap();
    let text = plan(&store, crate::token_log::SELECT_LINES).await;
    assert!(
        text.contains("USING INDEX token_log_by_month (month=?)"),
        "{text}"
    );
    // Every model call writes a row: an index nobody reads would be a write for nothing.
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'token_log'",
    )
    .fetch_all(&mut *store.conns.reader().await.unwrap())
    .await
    .unwrap();
    assert_eq!(indexes, ["token_log_by_month"]);
}

#[tokio::test]
async fn foreign_keys_hold_messages_to_their_session() {
    let store = SqliteStore::open_temporary().await.unwrap();
    let orphan = execute(
        &store,
        "INSERT INTO messages (session_id, seq, role, content, created_at) \
         VALUES ('nobody', 1, 'user', 'hi', '')",
    )
    .await;
    assert!(orphan.is_err());
}
