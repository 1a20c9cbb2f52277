//! What only the SQLite store promises: durability across opens, WAL, migrations, clear open
//! errors, atomic saves, concurrent writers and readers, and corrupt rows reported as such.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::Utc;
use keel_core::{
    AgentState, InternalReason, Message, Reasoning, RunRecord, Store, StoreError, ToolCall, Usage,
};
use keel_store::SqliteStore;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{Connection, SqlSafeStr};

/// A plain connection to the file, standing in for another program looking at the database.
async fn raw(path: &Path) -> SqliteConnection {
    SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(path))
        .await
        .unwrap()
}

async fn execute(conn: &mut SqliteConnection, sql: impl SqlSafeStr) {
    sqlx::query(sql).execute(conn).await.unwrap();
}

fn run_record(id: &str, session_id: &str) -> RunRecord {
    let now = Utc::now();
    RunRecord {
        id: id.into(),
        session_id: session_id.into(),
        state: AgentState::Running,
        reason: None,
        provider: "anthropic".into(),
        model: "claude-sonnet-4".into(),
        model_used: None,
        iterations: 0,
        usage: Usage::default(),
        final_text: None,
        error: None,
        started_at: now,
        updated_at: now,
        finished_at: None,
        cost: 0.0,
        heartbeat_at: None,
        cancel_requested_at: None,
        resume_available: false,
        launch: None,
        worker: None,
    }
}

fn conversation() -> Vec<Message> {
    let mut thinking = Message::assistant_with_calls(
        "Reading.",
        vec![ToolCall {
            id: "toolu_01".into(),
            name: "read_file".into(),
            arguments: r#"{ "path" : "src/main.rs" }"#.into(),
        }],
    );
    thinking.reasoning = Some(Reasoning {
        text: "need the file".into(),
        replay: Some(serde_json::json!({"signature": "sig==", "blocks": [1, 2.5, null]})),
    });
    vec![
        Message::system("be brief"),
        Message::user("What does main do?"),
        thinking,
        Message::tool_result("toolu_01", "fn main() {}\n"),
        Message::internal_user("continue", InternalReason::MaxTokensRecovery),
        Message::assistant("Nothing — it is empty."),
    ]
}

#[tokio::test]
async fn everything_survives_reopening_and_migrations_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/deeper/keel.db");
    let mut run = run_record("r1", "s1");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store.save_run(&run, &conversation()).await.unwrap();
        run.state = AgentState::Completed;
        run.finished_at = Some(Utc::now());
        store.save_run(&run, &[]).await.unwrap();
        store.ensure_session("empty").await.unwrap();
        // Dropped without close: what was committed must still be there.
    }
    let before = {
        let store = SqliteStore::open(&path).await.unwrap();
        let snapshot = (
            store.list_sessions(10).await.unwrap(),
            store.messages("s1").await.unwrap(),
            store.list_runs(None, 10).await.unwrap(),
        );
        store.close().await;
        snapshot
    };
    assert_eq!(before.0.len(), 2);
    let messages: Vec<Message> = before.1.iter().map(|m| m.message.clone()).collect();
    assert_eq!(messages, conversation());
    assert_eq!(before.2, [run.clone()]);

    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.list_sessions(10).await.unwrap(), before.0);
    assert_eq!(store.messages("s1").await.unwrap(), before.1);
    assert_eq!(store.run("r1").await.unwrap(), Some(run));
    store
        .append_messages("s1", None, &[Message::user("more")])
        .await
        .unwrap();
    assert_eq!(store.messages("s1").await.unwrap().last().unwrap().seq, 7);

    let mut conn = raw(&path).await;
    let (rows, versions): (i64, i64) =
        sqlx::query_as("SELECT COUNT(*), COUNT(DISTINCT version) FROM _sqlx_migrations")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert!(versions >= 2, "every migration was applied");
    assert_eq!(
        rows, versions,
        "each migration is applied once, however often the store opens"
    );
}

#[tokio::test]
async fn a_database_from_a_newer_keel_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    SqliteStore::open(&path).await.unwrap().close().await;
    let mut conn = raw(&path).await;
    execute(
        &mut conn,
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (999, 'from the future', TRUE, x'00', 0)",
    )
    .await;
    let err = SqliteStore::open(&path).await.unwrap_err().to_string();
    assert!(
        err.contains("schema version 999") && err.contains("newer keel"),
        "{err}"
    );
}

#[tokio::test]
async fn the_file_is_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let _store = SqliteStore::open(&path).await.unwrap();
    let mut conn = raw(&path).await;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn an_unusable_path_gives_an_error_that_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();

    let path = blocker.join("sub/keel.db");
    let err = SqliteStore::open(&path).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Backend(_)));
    assert!(
        text.contains(&format!("cannot open store at {}", path.display())),
        "{text}"
    );
    assert!(text.contains("cannot create directory"), "{text}");

    // A directory where the file should be.
    let err = SqliteStore::open(dir.path()).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!("cannot open store at {}", dir.path().display())),
        "{text}"
    );
}

#[tokio::test]
async fn a_failed_save_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let mut conn = raw(&path).await;
    // Make the database refuse one message, and one run update, partway through a save.
    execute(
        &mut conn,
        "CREATE TRIGGER refuse_message BEFORE INSERT ON messages WHEN NEW.content = 'boom' \
         BEGIN SELECT RAISE(ABORT, 'forced message failure'); END",
    )
    .await;
    execute(
        &mut conn,
        "CREATE TRIGGER refuse_run BEFORE UPDATE ON runs WHEN NEW.error = 'boom' \
         BEGIN SELECT RAISE(ABORT, 'forced run failure'); END",
    )
    .await;

    // A first save that fails entirely: no run, no session, no message.
    let mut run = run_record("r1", "s1");
    let err = store
        .save_run(&run, &[Message::user("fine"), Message::user("boom")])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("forced message failure"), "{err}");
    assert!(err.to_string().contains("cannot save run `r1`"), "{err}");
    assert!(store.run("r1").await.unwrap().is_none());
    assert!(store.session("s1").await.unwrap().is_none());
    assert!(store.messages("s1").await.unwrap().is_empty());

    store
        .save_run(&run, &[Message::user("hello")])
        .await
        .unwrap();
    let saved = store.session("s1").await.unwrap().unwrap();

    // A later save whose last message fails keeps the earlier state whole.
    let mut failed = run.clone();
    failed.state = AgentState::Completed;
    store
        .save_run(&failed, &[Message::assistant("one"), Message::user("boom")])
        .await
        .unwrap_err();
    // A save whose run update fails does not keep its messages either.
    failed.error = Some("boom".into());
    let err = store
        .save_run(&failed, &[Message::assistant("two")])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("forced run failure"), "{err}");
    // Nor does a long save that fails near its end.
    let mut long: Vec<Message> = (0..200)
        .map(|i| Message::assistant(i.to_string()))
        .collect();
    long[190] = Message::user("boom");
    let err = store.save_run(&run, &long).await.unwrap_err();
    assert!(err.to_string().contains("forced message failure"), "{err}");
    // Nor does a plain append.
    store
        .append_messages(
            "s1",
            None,
            &[Message::assistant("three"), Message::user("boom")],
        )
        .await
        .unwrap_err();

    assert_eq!(store.run("r1").await.unwrap(), Some(run.clone()));
    assert_eq!(store.session("s1").await.unwrap(), Some(saved));
    assert_eq!(store.messages("s1").await.unwrap().len(), 1);

    // Numbering carries on without a gap.
    run.state = AgentState::Completed;
    store
        .save_run(&run, &[Message::assistant("done")])
        .await
        .unwrap();
    let seqs: Vec<u64> = store
        .messages("s1")
        .await
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(seqs, [1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_never_see_half_a_save() {
    const BATCH: usize = 4;
    const SAVES: u32 = 40;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        SqliteStore::open(&dir.path().join("keel.db"))
            .await
            .unwrap(),
    );
    let done = Arc::new(AtomicBool::new(false));

    let writer = {
        let (store, done) = (store.clone(), done.clone());
        tokio::spawn(async move {
            let mut run = run_record("r", "s");
            for k in 1..=SAVES {
                run.iterations = k;
                let batch: Vec<Message> = (0..BATCH)
                    .map(|i| Message::assistant(format!("{k}.{i}")))
                    .collect();
                store.save_run(&run, &batch).await.unwrap();
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let reader = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut checks = 0;
            loop {
                let finished = done.load(Ordering::SeqCst);
                // The run is read first: the messages, read later, include at least its saves.
                let iterations = store.run("r").await.unwrap().map_or(0, |r| r.iterations);
                let messages = store.messages("s").await.unwrap();
                assert_eq!(messages.len() % BATCH, 0, "a save was seen half done");
                assert!(messages.len() >= iterations as usize * BATCH);
                if let Some(info) = store.session("s").await.unwrap() {
                    assert_eq!(info.message_count as usize % BATCH, 0);
                }
                checks += 1;
                if finished {
                    return checks;
                }
            }
        })
    };
    writer.await.unwrap();
    assert!(reader.await.unwrap() > 0);
    assert_eq!(
        store.messages("s").await.unwrap().len(),
        SAVES as usize * BATCH
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_writers_all_succeed() {
    const TASKS: usize = 16;
    const SAVES: usize = 25;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    // Two stores on one file stand in for two processes competing for SQLite's write lock.
    let stores = [
        Arc::new(SqliteStore::open(&path).await.unwrap()),
        Arc::new(SqliteStore::open(&path).await.unwrap()),
    ];

    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let store = stores[t % 2].clone();
            tokio::spawn(async move {
                let session = format!("session-{t}");
                let mut run = run_record(&format!("run-{t}"), &session);
                for k in 0..SAVES {
                    run.iterations = k as u32 + 1;
                    let batch = [
                        Message::user(format!("question {k}")),
                        Message::assistant(format!("answer {k}")),
                    ];
                    store.save_run(&run, &batch).await?;
                    store.append_messages(&session, None, &[]).await?;
                }
                Ok::<_, StoreError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }

    let store = &stores[0];
    assert_eq!(store.list_sessions(usize::MAX).await.unwrap().len(), TASKS);
    assert_eq!(
        store.list_runs(None, usize::MAX).await.unwrap().len(),
        TASKS
    );
    for t in 0..TASKS {
        let messages = store.messages(&format!("session-{t}")).await.unwrap();
        let seqs: Vec<u64> = messages.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, (1..=(SAVES * 2) as u64).collect::<Vec<_>>());
        let run = store.run(&format!("run-{t}")).await.unwrap().unwrap();
        assert_eq!(run.iterations, SAVES as u32);
    }
}

#[tokio::test]
async fn undecodable_rows_are_reported_as_corrupt_with_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store
        .save_run(&run_record("r1", "s1"), &conversation())
        .await
        .unwrap();
    let mut conn = raw(&path).await;

    let corrupt = |result: Result<(), StoreError>, expected: &[&str]| {
        let err = result.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
        let text = err.to_string();
        for part in expected {
            assert!(text.contains(part), "`{text}` should mention `{part}`");
        }
    };

    execute(&mut conn, "UPDATE runs SET state = 'flying'").await;
    corrupt(store.run("r1").await.map(drop), &["run `r1`", "flying"]);
    corrupt(
        store.list_runs(None, 5).await.map(drop),
        &["run `r1`", "flying"],
    );
    execute(
        &mut conn,
        "UPDATE runs SET state = 'error', reason = 'gremlins'",
    )
    .await;
    corrupt(store.run("r1").await.map(drop), &["run `r1`", "gremlins"]);
    execute(&mut conn, "UPDATE runs SET reason = NULL, iterations = -1").await;
    corrupt(store.run("r1").await.map(drop), &["run `r1`", "iterations"]);

    execute(
        &mut conn,
        "UPDATE messages SET tool_calls = '{oops' WHERE seq = 3",
    )
    .await;
    corrupt(
        store.messages("s1").await.map(drop),
        &["message 3 of session `s1`", "tool_calls", "JSON"],
    );
    execute(
        &mut conn,
        "UPDATE messages SET tool_calls = NULL, role = 'robot' WHERE seq = 3",
    )
    .await;
    corrupt(
        store.messages("s1").await.map(drop),
        &["message 3", "robot"],
    );
    execute(
        &mut conn,
        "UPDATE messages SET role = 'assistant' WHERE seq = 3",
    )
    .await;
    execute(&mut conn, "UPDATE messages SET meta = '[1]' WHERE seq = 4").await;
    corrupt(store.messages("s1").await.map(drop), &["message 4", "meta"]);

    execute(&mut conn, "UPDATE sessions SET updated_at = 'yesterday'").await;
    corrupt(
        store.session("s1").await.map(drop),
        &["session `s1`", "updated_at", "yesterday"],
    );
    corrupt(store.list_sessions(5).await.map(drop), &["session `s1`"]);
}

#[test]
fn the_default_path_is_under_the_data_directory() {
    if let Some(path) = keel_store::default_path() {
        assert!(path.ends_with("keel/keel.db"), "{}", path.display());
    }
}
