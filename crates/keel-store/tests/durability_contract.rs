//! The durability behaviour every `Store` must have (DESIGN.md section 7): commits of a safe
//! boundary, checkpoints, the tool-call envelope, events, journals, heartbeats, cancel requests
//! and the list of active runs. Run, like `contract.rs`, against `SqliteStore` (in memory and on a
//! file) and keel-core's `MemoryStore`.

use chrono::{DateTime, Utc};
use keel_core::store::Commit;
use keel_core::{
    AgentState, Boundary, Checkpoint, Event, EventKind, Journal, Message, RunRecord, StreamDelta,
    ToolCall, ToolCallRecord,
};
use keel_platform::DaemonStore;
use serde_json::json;

mod common;
use common::{at, event, many_events, memory, postgres, run_record, sqlite_file, sqlite_in_memory};

/// Runs every durability check on a fresh store made by `make`.
macro_rules! durability_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn a_commit_writes_the_whole_boundary_and_reports_a_cancel() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                whole_boundary_on(&store).await;
            }

            #[tokio::test]
            async fn only_request_cancel_sets_the_cancel_time() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                cancel_ownership_on(&store).await;
            }

            #[tokio::test]
            async fn checkpoints_come_back_in_order_with_the_latest_last() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                checkpoints_on(&store).await;
            }

            #[tokio::test]
            async fn checkpoints_written_out_of_order_come_back_in_order_of_seq() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                out_of_order_checkpoints_on(&store).await;
            }

            #[tokio::test]
            async fn envelope_rows_are_replaced_by_run_and_call() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                envelope_on(&store).await;
            }

            #[tokio::test]
            async fn events_come_back_equal_and_in_order() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                events_on(&store).await;
            }

            #[tokio::test]
            async fn journals_are_replaced_whole_per_session() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                journals_on(&store).await;
            }

            #[tokio::test]
            async fn messages_since_start_at_the_given_seq() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                messages_since_on(&store).await;
            }

            #[tokio::test]
            async fn a_heartbeat_sets_only_the_heartbeat() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                heartbeat_on(&store).await;
            }

            #[tokio::test]
            async fn active_runs_are_the_unfinished_ones_oldest_first() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                active_runs_on(&store).await;
            }
        }
    };
}

durability_tests!(memory_store, memory());
durability_tests!(sqlite_in_memory_store, sqlite_in_memory());
durability_tests!(sqlite_file_store, sqlite_file());
durability_tests!(postgres_store, postgres());

fn checkpoint(run_id: &str, seq: u32, boundary: Boundary) -> Checkpoint {
    Checkpoint {
        run_id: run_id.into(),
        seq,
        boundary,
        iteration: seq / 2,
        message_cursor: 1,
        persisted: u64::from(seq) + 1,
        prompt_hash: "sha256:9f86d081884c7d65".into(),
        completed_calls: (1..seq).map(|i| format!("call_{i}")).collect(),
        state: json!({
            "iterations": seq,
            "guard": {"level": 1, "history": ["a", "b"], "ratio": 0.1 + 0.2},
            "pending": null,
            "text": "ünïcode \"quoted\"\n",
        })
        .to_string(),
        // A frame with the first checkpoint and when it changed (here: the fourth).
        frame: matches!(seq, 1 | 4).then(|| json!({"settings": {"model": seq}}).to_string()),
        created_at: at(i64::from(seq)),
    }
}

fn tool_call(run_id: &str, call_id: &str, started_at: DateTime<Utc>) -> ToolCallRecord {
    ToolCallRecord {
        run_id: run_id.into(),
        call_id: call_id.into(),
        name: "write_file".into(),
        arguments: r#"{"path": "a.txt", "content": "x"#.into(),
        idempotent: false,
        started_at,
        completed_at: None,
        ok: None,
        output: None,
    }
}

fn completed(mut call: ToolCallRecord, at: DateTime<Utc>, output: &str) -> ToolCallRecord {
    call.completed_at = Some(at);
    call.ok = Some(true);
    call.output = Some(output.into());
    call
}

fn journal(objective: &str) -> Journal {
    Journal {
        objective: objective.into(),
        current_state: "reading the code".into(),
        verified_findings: vec!["main is empty".into()],
        decisions: vec![],
        artifacts: vec!["src/main.rs".into()],
        open_questions: vec!["why?".into()],
        blockers: vec![],
        handoff_next_action: "write the test".into(),
        ..Journal::default()
    }
}

async fn whole_boundary_on(store: &dyn DaemonStore) {
    let mut run = run_record("r1", "s1", at(0));
    run.cost = 0.012_345_678_9;
    run.heartbeat_at = Some(at(1));
    run.resume_available = true;
    run.model_used = Some("claude-sonnet-4-20250514".into());
    let messages = [
        Message::user("Write a.txt"),
        Message::assistant_with_calls(
            "",
            vec![ToolCall {
                id: "call_1".into(),
                name: "write_file".into(),
                arguments: r#"{"path": "a.txt"}"#.into(),
            }],
        ),
    ];
    let first = checkpoint("r1", 1, Boundary::LlmResponse);
    let calls = [tool_call("r1", "call_1", at(1))];
    let events = many_events(&run);
    let notes = journal("write a.txt");
    let outcome = store
        .commit(&Commit {
            run: &run,
            messages: &messages,
            checkpoint: Some(&first),
            tool_calls: &calls,
            events: &events[..3],
            journal: Some(&notes),
            charges: &[],
        })
        .await
        .unwrap();
    assert!(!outcome.cancel_requested);

    assert_eq!(store.run("r1").await.unwrap(), Some(run.clone()));
    let stored = store.messages("s1").await.unwrap();
    let written: Vec<Message> = stored.iter().map(|m| m.message.clone()).collect();
    assert_eq!(written, messages);
    assert!(stored.iter().all(|m| m.run_id.as_deref() == Some("r1")));
    assert_eq!(
        store.checkpoints("r1").await.unwrap(),
        std::slice::from_ref(&first)
    );
    assert_eq!(store.tool_calls("r1").await.unwrap(), calls);
    assert_eq!(store.events("r1").await.unwrap(), events[..3]);
    assert_eq!(store.journal("s1").await.unwrap(), Some(notes.clone()));
    assert_eq!(store.session("s1").await.unwrap().unwrap().message_count, 2);

    // A stop asked for between boundaries is seen by the next commit, which still writes.
    assert!(store.request_cancel("r1", at(2)).await.unwrap());
    run.state = AgentState::Cancelled;
    run.finished_at = Some(at(3));
    let last = checkpoint("r1", 2, Boundary::Final);
    let outcome = store
        .commit(&Commit {
            run: &run,
            messages: &[Message::tool_result("call_1", "ok")],
            checkpoint: Some(&last),
            tool_calls: &[],
            events: &events[3..],
            journal: None,
            charges: &[],
        })
        .await
        .unwrap();
    assert!(outcome.cancel_requested);
    let mut expected = run.clone();
    expected.cancel_requested_at = Some(at(2));
    assert_eq!(store.run("r1").await.unwrap(), Some(expected));
    assert_eq!(store.messages("s1").await.unwrap().len(), 3);
    assert_eq!(store.checkpoints("r1").await.unwrap(), [first, last]);
    assert_eq!(store.events("r1").await.unwrap(), events);
    assert_eq!(store.journal("s1").await.unwrap(), Some(notes));
    // save_run is a commit of the run and its messages.
    assert!(store.save_run(&run, &[]).await.is_ok());
}

async fn cancel_ownership_on(store: &dyn DaemonStore) {
    assert!(!store.request_cancel("nobody", at(1)).await.unwrap());
    assert!(store.run("nobody").await.unwrap().is_none());

    // A commit never sets the time, even when the record it writes carries one.
    let mut run = run_record("r1", "s1", at(0));
    run.cancel_requested_at = Some(at(9));
    let outcome = store.commit(&Commit::new(&run, &[])).await.unwrap();
    assert!(!outcome.cancel_requested);
    assert_eq!(
        store.run("r1").await.unwrap().unwrap().cancel_requested_at,
        None
    );

    // The first request sets it; a second keeps the first time; commits never clear it.
    assert!(store.request_cancel("r1", at(2)).await.unwrap());
    assert!(store.request_cancel("r1", at(3)).await.unwrap());
    for carried in [None, Some(at(7))] {
        run.cancel_requested_at = carried;
        run.iterations += 1;
        let outcome = store.commit(&Commit::new(&run, &[])).await.unwrap();
        assert!(outcome.cancel_requested);
        let stored = store.run("r1").await.unwrap().unwrap();
        assert_eq!(stored.cancel_requested_at, Some(at(2)));
        assert_eq!(stored.iterations, run.iterations);
    }
    // Other runs are not affected.
    let other = run_record("r2", "s2", at(1));
    let outcome = store.commit(&Commit::new(&other, &[])).await.unwrap();
    assert!(!outcome.cancel_requested);
}

async fn checkpoints_on(store: &dyn DaemonStore) {
    assert!(store.checkpoints("r1").await.unwrap().is_empty());
    assert_eq!(store.latest_checkpoint("r1").await.unwrap(), None);
    let run = run_record("r1", "s1", at(0));
    let other = run_record("r2", "s2", at(0));
    let boundaries = [
        Boundary::Input,
        Boundary::LlmResponse,
        Boundary::ToolResult,
        Boundary::Compaction,
        Boundary::JournalUpdate,
        Boundary::HumanPause,
        Boundary::Final,
    ];
    let mut written = Vec::new();
    for (i, boundary) in boundaries.into_iter().enumerate() {
        let seq = i as u32 + 1;
        let checkpoint = checkpoint("r1", seq, boundary);
        let commit = Commit {
            checkpoint: Some(&checkpoint),
            ..Commit::new(&run, &[])
        };
        store.commit(&commit).await.unwrap();
        written.push(checkpoint);
        // The latest checkpoint comes with the latest frame written up to it.
        let mut latest = written.last().unwrap().clone();
        latest.frame = written.iter().rev().find_map(|c| c.frame.clone());
        assert!(latest.frame.is_some());
        assert_eq!(store.latest_checkpoint("r1").await.unwrap(), Some(latest));
        // A commit without a checkpoint keeps the latest.
        store.commit(&Commit::new(&run, &[])).await.unwrap();
    }
    let mut theirs = checkpoint("r2", 1, Boundary::Input);
    theirs.state = json!([]).to_string();
    theirs.completed_calls.clear();
    let commit = Commit {
        checkpoint: Some(&theirs),
        ..Commit::new(&other, &[])
    };
    store.commit(&commit).await.unwrap();

    assert_eq!(store.checkpoints("r1").await.unwrap(), written);
    assert_eq!(store.checkpoints("r2").await.unwrap(), [theirs.clone()]);
    assert_eq!(store.latest_checkpoint("r2").await.unwrap(), Some(theirs));
}

/// A stalled worker's checkpoint (a seq below the latest, not taken) lands among the others in
/// order of seq, and the latest stays the highest; its seq again is refused.
async fn out_of_order_checkpoints_on(store: &dyn DaemonStore) {
    let run = run_record("r1", "s1", at(0));
    let write = |seq| checkpoint("r1", seq, Boundary::ToolResult);
    for seq in [1, 2, 5, 4] {
        let checkpoint = write(seq);
        let commit = Commit {
            checkpoint: Some(&checkpoint),
            ..Commit::new(&run, &[])
        };
        store.commit(&commit).await.unwrap();
    }
    let seqs: Vec<u32> = store
        .checkpoints("r1")
        .await
        .unwrap()
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(seqs, [1, 2, 4, 5]);
    let latest = store.latest_checkpoint("r1").await.unwrap().unwrap();
    assert_eq!(latest.seq, 5);
    let again = write(4);
    let commit = Commit {
        checkpoint: Some(&again),
        ..Commit::new(&run, &[])
    };
    assert!(matches!(
        store.commit(&commit).await,
        Err(keel_core::StoreError::Superseded { seq: 4, .. })
    ));
}

async fn envelope_on(store: &dyn DaemonStore) {
    assert!(store.tool_calls("r1").await.unwrap().is_empty());
    store.record_tool_calls(&[]).await.unwrap();
    let run = run_record("r1", "s1", at(0));
    store.commit(&Commit::new(&run, &[])).await.unwrap();

    // Started before the call (outside a boundary), completed at the tool_result boundary.
    let started = tool_call("r1", "call_a", at(1));
    store
        .record_tool_calls(std::slice::from_ref(&started))
        .await
        .unwrap();
    assert_eq!(
        store.tool_calls("r1").await.unwrap(),
        std::slice::from_ref(&started)
    );
    let done = completed(started, at(2), "wrote 1 byte");
    let mut second = tool_call("r1", "call_b", at(1));
    second.idempotent = true;
    let commit = Commit {
        tool_calls: &[done.clone(), second.clone()],
        ..Commit::new(&run, &[])
    };
    store.commit(&commit).await.unwrap();
    assert_eq!(
        store.tool_calls("r1").await.unwrap(),
        [done.clone(), second.clone()]
    );

    // A failed call, and the same call id in another run: rows are per (run, call).
    let mut failed = completed(second, at(3), "error: disk full");
    failed.ok = Some(false);
    let elsewhere = tool_call("r2", "call_a", at(0));
    let later = tool_call("r1", "call_c", at(4));
    store
        .record_tool_calls(&[failed.clone(), elsewhere.clone(), later.clone()])
        .await
        .unwrap();
    assert_eq!(store.tool_calls("r1").await.unwrap(), [done, failed, later]);
    assert_eq!(store.tool_calls("r2").await.unwrap(), [elsewhere]);

    // A large batch, all or nothing, in start order.
    let many: Vec<ToolCallRecord> = (0..150)
        .map(|i| tool_call("r3", &format!("call_{i:03}"), at(i)))
        .collect();
    store.record_tool_calls(&many).await.unwrap();
    assert_eq!(store.tool_calls("r3").await.unwrap(), many);
}

async fn events_on(store: &dyn DaemonStore) {
    let run = run_record("r1", "s1", at(0));
    let other = run_record("r2", "s2", at(0));
    let events = many_events(&run);
    for chunk in events.chunks(3) {
        let commit = Commit {
            events: chunk,
            ..Commit::new(&run, &[])
        };
        store.commit(&commit).await.unwrap();
        store.commit(&Commit::new(&run, &[])).await.unwrap();
    }
    // Many at once, in order.
    let deltas: Vec<Event> = (0..150)
        .map(|i| {
            let delta = StreamDelta::Text {
                text: format!("token {i}"),
            };
            event(&other, i, EventKind::StreamDelta { delta })
        })
        .collect();
    let commit = Commit {
        events: &deltas,
        ..Commit::new(&other, &[])
    };
    store.commit(&commit).await.unwrap();

    assert_eq!(store.events("r1").await.unwrap(), events);
    assert_eq!(store.events("r2").await.unwrap(), deltas);
    assert!(store.events("nobody").await.unwrap().is_empty());
}

async fn journals_on(store: &dyn DaemonStore) {
    assert_eq!(store.journal("s1").await.unwrap(), None);
    let run = run_record("r1", "s1", at(0));
    let first = journal("first");
    let commit = Commit {
        journal: Some(&first),
        ..Commit::new(&run, &[])
    };
    store.commit(&commit).await.unwrap();
    assert_eq!(store.journal("s1").await.unwrap(), Some(first.clone()));
    // A commit without a journal keeps it.
    store.commit(&Commit::new(&run, &[])).await.unwrap();
    assert_eq!(store.journal("s1").await.unwrap(), Some(first.clone()));

    // Replaced whole, by any run of the session; an empty journal is still a journal.
    // (Stopped: PostgreSQL keeps one executing run per conversation.)
    let next = RunRecord {
        state: AgentState::WaitingOnHuman,
        ..run_record("r2", "s1", at(1))
    };
    let emptied = Journal::default();
    let commit = Commit {
        journal: Some(&emptied),
        ..Commit::new(&next, &[])
    };
    store.commit(&commit).await.unwrap();
    assert_eq!(store.journal("s1").await.unwrap(), Some(emptied));

    let elsewhere = run_record("r3", "s2", at(2));
    let commit = Commit {
        journal: Some(&first),
        ..Commit::new(&elsewhere, &[])
    };
    store.commit(&commit).await.unwrap();
    assert_eq!(store.journal("s2").await.unwrap(), Some(first));
    assert_eq!(store.journal("s1").await.unwrap(), Some(Journal::default()));
}

async fn messages_since_on(store: &dyn DaemonStore) {
    assert!(store.messages_since("s1", 1).await.unwrap().is_empty());
    let messages: Vec<Message> = (1..=5).map(|i| Message::user(i.to_string())).collect();
    store.append_messages("s1", None, &messages).await.unwrap();
    store
        .append_messages("s2", None, &messages[..2])
        .await
        .unwrap();
    let all = store.messages("s1").await.unwrap();
    assert_eq!(store.messages_since("s1", 0).await.unwrap(), all);
    assert_eq!(store.messages_since("s1", 1).await.unwrap(), all);
    assert_eq!(store.messages_since("s1", 3).await.unwrap(), all[2..]);
    assert_eq!(store.messages_since("s1", 5).await.unwrap(), all[4..]);
    assert!(store.messages_since("s1", 6).await.unwrap().is_empty());
    assert!(
        store
            .messages_since("s1", u64::MAX)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.messages_since("s2", 2).await.unwrap().len(), 1);
}

async fn heartbeat_on(store: &dyn DaemonStore) {
    assert!(!store.heartbeat("nobody", at(1)).await.unwrap());
    assert!(store.run("nobody").await.unwrap().is_none());

    let run = run_record("r1", "s1", at(0));
    store.commit(&Commit::new(&run, &[])).await.unwrap();
    assert!(!store.heartbeat("r1", at(1)).await.unwrap());
    assert!(!store.heartbeat("r1", at(2)).await.unwrap());
    let mut expected = run.clone();
    expected.heartbeat_at = Some(at(2));
    assert_eq!(store.run("r1").await.unwrap(), Some(expected.clone()));

    assert!(store.request_cancel("r1", at(3)).await.unwrap());
    assert!(store.heartbeat("r1", at(4)).await.unwrap());
    expected.heartbeat_at = Some(at(4));
    expected.cancel_requested_at = Some(at(3));
    assert_eq!(store.run("r1").await.unwrap(), Some(expected));
}

async fn active_runs_on(store: &dyn DaemonStore) {
    assert!(store.active_runs().await.unwrap().is_empty());
    let states = [
        ("a", AgentState::Running, 5),
        ("b", AgentState::Completed, 1),
        ("c", AgentState::Queued, 3),
        ("d", AgentState::WaitingForTool, 0),
        ("e", AgentState::WaitingOnHuman, 3),
        ("f", AgentState::Cancelled, 2),
        ("g", AgentState::TimedOut, 2),
        ("h", AgentState::MaxSteps, 2),
        ("i", AgentState::BudgetExceeded, 2),
        ("j", AgentState::Error, 2),
    ];
    let mut runs = Vec::new();
    for (id, state, minute) in states {
        // A conversation each: PostgreSQL keeps one executing run per conversation.
        let mut run = run_record(id, &format!("s-{id}"), at(minute));
        run.state = state;
        store.commit(&Commit::new(&run, &[])).await.unwrap();
        runs.push(run);
    }
    let ids = |runs: Vec<RunRecord>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.active_runs().await.unwrap()),
        ["d", "c", "e", "a"]
    );
    assert_eq!(store.active_runs().await.unwrap()[0], runs[3]);

    // A run leaves the list when it finishes, and a new one joins it.
    runs[2].state = AgentState::Completed;
    store.commit(&Commit::new(&runs[2], &[])).await.unwrap();
    runs[3].state = AgentState::Running;
    store.commit(&Commit::new(&runs[3], &[])).await.unwrap();
    let late = run_record("k", "s2", at(-1));
    store.commit(&Commit::new(&late, &[])).await.unwrap();
    assert_eq!(
        ids(store.active_runs().await.unwrap()),
        ["k", "d", "e", "a"]
    );
    assert_eq!(store.active_runs().await.unwrap()[1], runs[3]);
}
