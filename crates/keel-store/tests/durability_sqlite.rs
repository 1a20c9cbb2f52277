//! What only the SQLite store promises about durability: a safe boundary is one transaction
//! (a failure anywhere in it leaves nothing), a stop asked for by another process is seen by the
//! next commit, and undecodable rows of the new tables are reported as corrupt with their place.
//! (The timing of `commit` is a benchmark: `cargo bench -p keel-store --bench commit`.)

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use keel_core::store::Commit;
use keel_core::{
    AgentState, Checkpoint, Event, EventKind, Journal, Message, RunRecord, Store, StoreError,
    ToolCall, ToolCallRecord,
};
use keel_store::SqliteStore;

mod common;
use common::{checkpoint, completed_event, event_now, run_record, tool_call};
use serde_json::json;
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

/// Everything the store holds about one run and its session, to compare before and after.
async fn snapshot(
    store: &SqliteStore,
    run: &str,
    session: &str,
) -> (
    Option<RunRecord>,
    Vec<keel_core::StoredMessage>,
    Vec<Checkpoint>,
    Vec<ToolCallRecord>,
    Vec<Event>,
    Option<Journal>,
    Option<keel_core::SessionInfo>,
) {
    (
        store.run(run).await.unwrap(),
        store.messages(session).await.unwrap(),
        store.checkpoints(run).await.unwrap(),
        store.tool_calls(run).await.unwrap(),
        store.events(run).await.unwrap(),
        store.journal(session).await.unwrap(),
        store.session(session).await.unwrap(),
    )
}

#[tokio::test]
async fn a_boundary_that_fails_partway_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let mut conn = raw(&path).await;
    execute(
        &mut conn,
        "CREATE TRIGGER refuse_checkpoint BEFORE INSERT ON checkpoints \
         WHEN NEW.prompt_hash = 'boom' BEGIN SELECT RAISE(ABORT, 'forced checkpoint failure'); END",
    )
    .await;
    execute(
        &mut conn,
        "CREATE TRIGGER refuse_journal BEFORE INSERT ON journals \
         WHEN NEW.journal LIKE '%boom%' BEGIN SELECT RAISE(ABORT, 'forced journal failure'); END",
    )
    .await;

    let mut run = run_record("r1", "s1", Utc::now());
    let first = checkpoint(&run, 1, "h", json!({"step": 1}));
    let started = event_now(
        &run,
        EventKind::RunStarted {
            provider: "anthropic".into(),
            model: "claude-sonnet-4".into(),
            context: Default::default(),
        },
    );
    let notes = Journal {
        objective: "read main".into(),
        ..Journal::default()
    };
    store
        .commit(&Commit {
            run: &run,
            messages: &[Message::user("What does main do?")],
            checkpoint: Some(&first),
            tool_calls: &[],
            events: std::slice::from_ref(&started),
            journal: Some(&notes),
            charges: &[],
        })
        .await
        .unwrap();
    let before = snapshot(&store, "r1", "s1").await;

    // The next boundary changes the run, adds a message, a row, events and a journal; its
    // checkpoint, written after the run and before the rest, fails.
    let mut changed = run.clone();
    changed.state = AgentState::WaitingForTool;
    changed.iterations = 1;
    changed.cost = 0.5;
    let failing = checkpoint(&changed, 2, "boom", json!({"step": 2}));
    let answer = Message::assistant_with_calls(
        "",
        vec![ToolCall {
            id: "call_1".into(),
            name: "read_file".into(),
            arguments: "{}".into(),
        }],
    );
    let calls = [tool_call(&run, "call_1")];
    let events = [completed_event(&run, "call_1"), completed_event(&run, "x")];
    let renamed = Journal {
        objective: "changed".into(),
        ..Journal::default()
    };
    let boundary = Commit {
        run: &changed,
        messages: std::slice::from_ref(&answer),
        checkpoint: Some(&failing),
        tool_calls: &calls,
        events: &events,
        journal: Some(&renamed),
        charges: &[],
    };
    let err = store.commit(&boundary).await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("forced checkpoint failure"), "{text}");
    assert!(text.contains("cannot save run `r1`"), "{text}");
    assert_eq!(snapshot(&store, "r1", "s1").await, before);

    // A long boundary (several queries) whose very last statement fails leaves nothing either.
    let many: Vec<Message> = (0..150)
        .map(|i| Message::assistant(i.to_string()))
        .collect();
    let many_calls: Vec<ToolCallRecord> = (0..100)
        .map(|i| tool_call(&run, &format!("call_{i}")))
        .collect();
    let many_events: Vec<Event> = (0..150)
        .map(|i| completed_event(&run, &format!("call_{i}")))
        .collect();
    let doomed = Journal {
        objective: "boom".into(),
        ..Journal::default()
    };
    let second = checkpoint(&changed, 2, "h", json!({"step": 2}));
    let charge = keel_core::TokenCharge {
        user_id: Some("ada".into()),
        model: "claude-sonnet-4".into(),
        usage: keel_core::Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Default::default()
        },
        cost: 0.1,
        at: chrono::Utc::now(),
    };
    let month = keel_core::store::usage_month(charge.at);
    let long = Commit {
        run: &changed,
        messages: &many,
        checkpoint: Some(&second),
        tool_calls: &many_calls,
        events: &many_events,
        journal: Some(&doomed),
        charges: std::slice::from_ref(&charge),
    };
    let err = store.commit(&long).await.unwrap_err();
    assert!(err.to_string().contains("forced journal failure"), "{err}");
    assert_eq!(snapshot(&store, "r1", "s1").await, before);
    // Nor is the model call charged: the token log and the month move with the boundary.
    assert_eq!(store.monthly_usage("ada", &month).await.unwrap().total(), 0);

    // The same boundary without the failure goes through whole, numbering carrying on.
    let long = Commit {
        journal: Some(&renamed),
        ..long
    };
    assert!(!store.commit(&long).await.unwrap().cancel_requested);
    assert_eq!(
        store.monthly_usage("ada", &month).await.unwrap().total(),
        15
    );
    let (stored_run, messages, checkpoints, tool_calls, stored_events, journal, _) =
        snapshot(&store, "r1", "s1").await;
    assert_eq!(stored_run, Some(changed.clone()));
    let seqs: Vec<u64> = messages.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, (1..=151).collect::<Vec<_>>());
    assert_eq!(checkpoints, [first, second]);
    assert_eq!(tool_calls.len(), 100);
    let mut expected_events = vec![started];
    expected_events.extend(many_events);
    assert_eq!(stored_events, expected_events);
    assert_eq!(journal, Some(renamed));

    // And the run record alone failing (a refused update) also keeps everything out.
    execute(
        &mut conn,
        "CREATE TRIGGER refuse_run BEFORE UPDATE ON runs WHEN NEW.error = 'boom' \
         BEGIN SELECT RAISE(ABORT, 'forced run failure'); END",
    )
    .await;
    let before = snapshot(&store, "r1", "s1").await;
    run = changed;
    run.error = Some("boom".into());
    let third = checkpoint(&run, 3, "h", json!({}));
    let err = store
        .commit(&Commit {
            checkpoint: Some(&third),
            events: &events,
            ..Commit::new(&run, std::slice::from_ref(&answer))
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("forced run failure"), "{err}");
    assert_eq!(snapshot(&store, "r1", "s1").await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_cancelled_midway_is_all_or_nothing_and_the_next_one_goes_through() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("keel.db"))
        .await
        .unwrap();
    let mut run = run_record("r1", "s1", Utc::now());
    let events: Vec<Event> = (0..400)
        .map(|i| completed_event(&run, &format!("call_{i}")))
        .collect();
    let mut committed = 0;
    for round in 1..=8 {
        run.iterations = round;
        let messages: Vec<Message> = (0..100)
            .map(|i| Message::assistant(i.to_string()))
            .collect();
        let commit = Commit {
            events: &events,
            ..Commit::new(&run, &messages)
        };
        // Polled once: sent to the worker thread, then dropped while it runs.
        if tokio::time::timeout(Duration::ZERO, store.commit(&commit))
            .await
            .is_ok()
        {
            committed += 1;
        }
        store.commit(&Commit::new(&run, &[])).await.unwrap();
        let messages = store.messages("s1").await.unwrap().len();
        let events = store.events("r1").await.unwrap().len();
        assert_eq!(messages % 100, 0, "round {round}: half a commit was kept");
        assert_eq!(events, messages / 100 * 400, "round {round}");
        assert!(messages / 100 >= committed);
        let seqs: Vec<u64> = store
            .messages("s1")
            .await
            .unwrap()
            .iter()
            .map(|m| m.seq)
            .collect();
        assert_eq!(seqs, (1..=messages as u64).collect::<Vec<_>>());
    }
    assert_eq!(store.run("r1").await.unwrap().unwrap().iterations, 8);
}

#[tokio::test]
async fn a_stop_asked_for_by_another_process_is_seen_by_the_next_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let worker = SqliteStore::open(&path).await.unwrap();
    let ui = SqliteStore::open(&path).await.unwrap();
    let run = run_record("r1", "s1", Utc::now());
    assert!(
        !worker
            .commit(&Commit::new(&run, &[]))
            .await
            .unwrap()
            .cancel_requested
    );
    assert!(!worker.heartbeat("r1", Utc::now()).await.unwrap());

    let asked = Utc::now();
    assert!(ui.request_cancel("r1", asked).await.unwrap());
    assert!(worker.heartbeat("r1", Utc::now()).await.unwrap());
    assert!(
        worker
            .commit(&Commit::new(&run, &[]))
            .await
            .unwrap()
            .cancel_requested
    );
    let stored = ui.run("r1").await.unwrap().unwrap();
    assert_eq!(stored.cancel_requested_at, Some(asked));
}

#[tokio::test]
async fn undecodable_durability_rows_are_reported_as_corrupt_with_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let run = run_record("r1", "s1", Utc::now());
    let saved = checkpoint(&run, 1, "h", json!({}));
    let events = [completed_event(&run, "call_1")];
    let notes = Journal::default();
    store
        .commit(&Commit {
            checkpoint: Some(&saved),
            tool_calls: &[tool_call(&run, "call_1")],
            events: &events,
            journal: Some(&notes),
            ..Commit::new(&run, &[])
        })
        .await
        .unwrap();
    // A call recorded before its side effect: a row of `tool_calls`, where the commit's is held
    // by its checkpoint's row.
    store
        .record_tool_calls(&[tool_call(&run, "call_0")])
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

    execute(&mut conn, "UPDATE checkpoints SET boundary = 'sideways'").await;
    let place = ["checkpoint 1 of run `r1`", "sideways"];
    corrupt(store.checkpoints("r1").await.map(drop), &place);
    corrupt(store.latest_checkpoint("r1").await.map(drop), &place);
    execute(
        &mut conn,
        "UPDATE checkpoints SET boundary = 'final', completed_calls = '{oops'",
    )
    .await;
    corrupt(
        store.checkpoints("r1").await.map(drop),
        &["checkpoint 1", "completed_calls", "JSON"],
    );
    execute(&mut conn, "UPDATE tool_calls SET started_at = 'yesterday'").await;
    corrupt(
        store.tool_calls("r1").await.map(drop),
        &["tool call `call_0` of run `r1`", "started_at"],
    );
    execute(&mut conn, "DELETE FROM tool_calls").await;
    assert_eq!(store.tool_calls("r1").await.unwrap().len(), 1);
    execute(
        &mut conn,
        "UPDATE checkpoints SET tool_calls = '[{\"call_id\": \"call_1\"}]'",
    )
    .await;
    corrupt(
        store.tool_calls("r1").await.map(drop),
        &["checkpoint 1 of run `r1`", "tool_calls", "JSON"],
    );
    execute(
        &mut conn,
        "UPDATE checkpoints SET event_payload = '{\"event\": 1}'",
    )
    .await;
    corrupt(
        store.events("r1").await.map(drop),
        &["event 1 of run `r1`", "payload"],
    );
    execute(&mut conn, "UPDATE journals SET journal = '[1]'").await;
    corrupt(
        store.journal("s1").await.map(drop),
        &["journal of session `s1`"],
    );
    execute(&mut conn, "UPDATE runs SET heartbeat_at = 'soon'").await;
    corrupt(
        store.active_runs().await.map(drop),
        &["run `r1`", "heartbeat_at"],
    );
}
