//! The behaviour every `Store` must have, run against `SqliteStore` (in memory and on a file) and
//! against keel-core's `MemoryStore`, so both implementations are held to one contract.

mod common;
use chrono::Duration;
use common::{
    at, memory, openai_run_record as run_record, postgres, sqlite_file, sqlite_in_memory,
};
use keel_core::store::session_title;
use keel_core::{
    AgentState, ErrorReason, InternalReason, Message, Reasoning, RunRecord, ToolCall, Usage,
};
use keel_platform::DaemonStore;
use serde_json::json;

/// Runs every contract check on a fresh store made by `make`.
macro_rules! contract_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn every_message_shape_round_trips() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                every_message_shape_round_trips_on(&store).await;
            }

            #[tokio::test]
            async fn seq_continues_across_calls_and_is_per_session() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                seq_numbering_on(&store).await;
            }

            #[tokio::test]
            async fn a_long_batch_is_numbered_and_titled_like_a_short_one() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                long_batch_on(&store).await;
            }

            #[tokio::test]
            async fn sessions_have_titles_counts_and_order() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                sessions_on(&store).await;
            }

            #[tokio::test]
            async fn runs_upsert_and_carry_their_messages() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                run_upsert_on(&store).await;
            }

            #[tokio::test]
            async fn runs_list_newest_first_with_filter_and_limit() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                run_listing_on(&store).await;
            }
        }
    };
}

contract_tests!(memory_store, memory());
contract_tests!(sqlite_in_memory_store, sqlite_in_memory());
contract_tests!(sqlite_file_store, sqlite_file());
contract_tests!(postgres_store, postgres());

/// One message of every shape the loop writes.
fn every_shape() -> Vec<Message> {
    let mut reasoning = Message::assistant("Let me look.");
    reasoning.reasoning = Some(Reasoning {
        text: "The user wants the file.\nRead it first.".into(),
        replay: Some(json!([
            {"type": "thinking", "thinking": "…", "signature": "EqQBCkYIAxgCIkA=="},
            {"type": "reasoning", "encrypted_content": "gAAAAB", "summary": [], "n": 1.5e-7}
        ])),
    });
    let mut text_only_reasoning = Message::assistant("ok");
    text_only_reasoning.reasoning = Some(Reasoning {
        text: String::new(),
        replay: None,
    });
    let mut pinned = Message::user("Always answer in French.");
    pinned.meta.pinned = true;
    pinned.meta.importance = Some(0.75);
    let mut important = Message::assistant("noted");
    important.meta.importance = Some(0.1);
    important.meta.model = Some("gpt-4o-2024-08-06".into());
    important.meta.output_tokens = Some(42);
    let mut summary = Message::internal_user(
        "Summary of earlier turns.",
        InternalReason::CompactionSummary,
    );
    summary.meta.pinned = true;

    vec![
        Message::system("You are keel.\n\nBe brief."),
        Message::user("Héllo wörld 👋 — 日本語\r\nsecond line\n\n\ttabbed \"quoted\" \\ back"),
        Message::assistant_with_calls(
            "",
            vec![
                ToolCall {
                    id: "call_1".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path": "a.txt",  "lines":[1, 2]}"#.into(),
                },
                ToolCall {
                    id: "call_2".into(),
                    name: "shell".into(),
                    // Malformed JSON from the model must come back exactly as it was.
                    arguments: "{\"cmd\": \"ls -la\n\", \"unterminated".into(),
                },
                ToolCall {
                    id: "call_3".into(),
                    name: "noop".into(),
                    arguments: String::new(),
                },
            ],
        ),
        Message::tool_result("call_1", "line one\nline two\n"),
        Message::tool_result("call_2", ""),
        Message::tool_result("call_3", "binary\0output\u{7f}\u{feff}"),
        reasoning,
        text_only_reasoning,
        pinned,
        important,
        summary,
        Message::internal_user("continue", InternalReason::MaxTokensRecovery),
        Message::internal_user("you are repeating yourself", InternalReason::LoopNudge),
        Message::assistant(""),
        Message::user("x".repeat(100_000)),
    ]
}

async fn every_message_shape_round_trips_on(store: &dyn DaemonStore) {
    let written = every_shape();
    store
        .append_messages("shapes", Some("run-1"), &written)
        .await
        .unwrap();
    let read = store.messages("shapes").await.unwrap();
    assert_eq!(read.len(), written.len());
    for (i, (stored, original)) in read.iter().zip(&written).enumerate() {
        assert_eq!(&stored.message, original, "message {i}");
        assert_eq!(stored.seq, i as u64 + 1);
        assert_eq!(stored.run_id.as_deref(), Some("run-1"));
    }
    let info = store.session("shapes").await.unwrap().unwrap();
    assert_eq!(info.message_count, written.len() as u64);
    assert_eq!(info.title.as_deref(), Some("Héllo wörld 👋 — 日本語"));
}

async fn seq_numbering_on(store: &dyn DaemonStore) {
    store
        .append_messages("a", None, &[Message::user("1"), Message::assistant("2")])
        .await
        .unwrap();
    store
        .append_messages("b", Some("rb"), &[Message::user("b1")])
        .await
        .unwrap();
    store.append_messages("a", None, &[]).await.unwrap();
    store
        .append_messages("a", Some("r2"), &[Message::user("3")])
        .await
        .unwrap();
    let run = run_record("r3", "a", at(10));
    store
        .save_run(&run, &[Message::assistant("4"), Message::user("5")])
        .await
        .unwrap();

    let a = store.messages("a").await.unwrap();
    let seqs: Vec<u64> = a.iter().map(|m| m.seq).collect();
    let texts: Vec<&str> = a.iter().map(|m| m.message.content.as_str()).collect();
    let runs: Vec<Option<&str>> = a.iter().map(|m| m.run_id.as_deref()).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    assert_eq!(texts, ["1", "2", "3", "4", "5"]);
    assert_eq!(runs, [None, None, Some("r2"), Some("r3"), Some("r3")]);
    assert!(a.windows(2).all(|w| w[0].created_at <= w[1].created_at));

    let b = store.messages("b").await.unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].seq, 1);
    assert_eq!(store.session("a").await.unwrap().unwrap().message_count, 5);
    assert_eq!(store.session("b").await.unwrap().unwrap().message_count, 1);
    assert!(store.messages("nobody").await.unwrap().is_empty());
}

async fn long_batch_on(store: &dyn DaemonStore) {
    // Long enough to be written in several statements by a SQL store.
    let mut batch: Vec<Message> = (0..300)
        .map(|i| Message::assistant(format!("step {i}")))
        .collect();
    batch[250] = Message::user("the first real question");
    store
        .append_messages("long", Some("r"), &batch[..1])
        .await
        .unwrap();
    store
        .save_run(&run_record("r", "long", at(0)), &batch[1..])
        .await
        .unwrap();
    let stored = store.messages("long").await.unwrap();
    let seqs: Vec<u64> = stored.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, (1..=300).collect::<Vec<u64>>());
    let messages: Vec<Message> = stored.into_iter().map(|m| m.message).collect();
    assert_eq!(messages, batch);
    let info = store.session("long").await.unwrap().unwrap();
    assert_eq!(info.message_count, 300);
    assert_eq!(info.title.as_deref(), Some("the first real question"));
}

async fn sessions_on(store: &dyn DaemonStore) {
    assert!(store.session("s1").await.unwrap().is_none());
    assert!(store.list_sessions(10).await.unwrap().is_empty());

    store.ensure_session("s1").await.unwrap();
    let fresh = store.session("s1").await.unwrap().unwrap();
    assert_eq!(fresh.id, "s1");
    assert_eq!(fresh.title, None);
    assert_eq!(fresh.message_count, 0);
    assert_eq!(fresh.created_at, fresh.updated_at);
    store.ensure_session("s1").await.unwrap();
    assert_eq!(store.session("s1").await.unwrap().unwrap(), fresh);

    // Neither an empty append nor internal, system or assistant messages give a title.
    store.append_messages("s1", None, &[]).await.unwrap();
    assert_eq!(store.session("s1").await.unwrap().unwrap(), fresh);
    store
        .append_messages(
            "s1",
            None,
            &[
                Message::system("system prompt"),
                Message::internal_user("internal", InternalReason::LoopNudge),
                Message::assistant("hello"),
            ],
        )
        .await
        .unwrap();
    let untitled = store.session("s1").await.unwrap().unwrap();
    assert_eq!(untitled.title, None);
    assert_eq!(untitled.message_count, 3);
    assert_eq!(untitled.created_at, fresh.created_at);
    assert!(untitled.updated_at > fresh.updated_at);

    // The first real user message names the session, once.
    let long = format!("{}\nsecond line", "word ".repeat(30));
    store
        .append_messages("s1", None, &[Message::user(long.clone())])
        .await
        .unwrap();
    store
        .append_messages("s1", None, &[Message::user("a later question")])
        .await
        .unwrap();
    let titled = store.session("s1").await.unwrap().unwrap();
    assert_eq!(titled.title, Some(session_title(&long)));
    assert!(titled.title.as_deref().unwrap().ends_with('…'));
    assert_eq!(titled.message_count, 5);

    // save_run creates its session; an empty save does not move updated_at.
    let run = run_record("r1", "s2", at(1));
    store.save_run(&run, &[]).await.unwrap();
    let s2 = store.session("s2").await.unwrap().unwrap();
    assert_eq!((s2.message_count, s2.title.as_deref()), (0, None));
    store.save_run(&run, &[]).await.unwrap();
    assert_eq!(store.session("s2").await.unwrap().unwrap(), s2);

    // Listing: most recently updated first, limited.
    store
        .append_messages("s3", None, &[Message::user("third")])
        .await
        .unwrap();
    store
        .append_messages("s1", None, &[Message::assistant("bump")])
        .await
        .unwrap();
    let listed = store.list_sessions(10).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["s1", "s3", "s2"]);
    assert_eq!(listed[0].message_count, 6);
    assert_eq!(listed[1].title.as_deref(), Some("third"));
    let top: Vec<String> = store
        .list_sessions(2)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(top, ["s1", "s3"]);
    assert!(store.list_sessions(0).await.unwrap().is_empty());
}

async fn run_upsert_on(store: &dyn DaemonStore) {
    assert!(store.run("r1").await.unwrap().is_none());
    let mut run = run_record("r1", "s", at(0));
    store
        .save_run(&run, &[Message::user("do it")])
        .await
        .unwrap();
    assert_eq!(store.run("r1").await.unwrap().unwrap(), run);

    run.state = AgentState::Error;
    run.reason = Some(ErrorReason::ProviderFatal);
    run.model_used = Some("gpt-4.1-2025-04-14".into());
    run.iterations = 7;
    run.usage = Usage {
        input_tokens: 12_345,
        output_tokens: 678,
        cache_read_tokens: 9_000,
        cache_write_tokens: 1,
    };
    run.final_text = Some("partial answer\nwith ünïcode".into());
    run.error = Some("provider said no".into());
    run.updated_at = at(5) + Duration::nanoseconds(123_456_789);
    run.finished_at = Some(at(6) + Duration::nanoseconds(1));
    store
        .save_run(&run, &[Message::assistant("failed")])
        .await
        .unwrap();

    assert_eq!(store.run("r1").await.unwrap().unwrap(), run);
    assert_eq!(store.list_runs(None, 10).await.unwrap(), [run.clone()]);
    let messages = store.messages("s").await.unwrap();
    assert_eq!(messages.len(), 2);
    assert!(messages.iter().all(|m| m.run_id.as_deref() == Some("r1")));

    // A save replaces the whole record, its session and start time included.
    let mut moved = run.clone();
    moved.session_id = "elsewhere".into();
    moved.started_at = at(-30);
    store.save_run(&moved, &[]).await.unwrap();
    assert_eq!(store.run("r1").await.unwrap().unwrap(), moved);
    assert!(store.list_runs(Some("s"), 10).await.unwrap().is_empty());
    assert_eq!(
        store.list_runs(Some("elsewhere"), 10).await.unwrap(),
        [moved]
    );
    store.save_run(&run, &[]).await.unwrap();
    assert_eq!(store.list_runs(Some("s"), 10).await.unwrap(), [run.clone()]);

    for state in [
        AgentState::Queued,
        AgentState::WaitingForTool,
        AgentState::WaitingOnHuman,
        AgentState::Completed,
        AgentState::Cancelled,
        AgentState::TimedOut,
        AgentState::MaxSteps,
        AgentState::BudgetExceeded,
    ] {
        run.state = state;
        run.reason = (state == AgentState::WaitingOnHuman).then_some(ErrorReason::ResumeUnsafe);
        store.save_run(&run, &[]).await.unwrap();
        assert_eq!(store.run("r1").await.unwrap().unwrap(), run);
    }
}

async fn run_listing_on(store: &dyn DaemonStore) {
    for (id, session, minute) in [
        ("r-a1", "a", 1),
        ("r-b1", "b", 2),
        ("r-a2", "a", 3),
        ("r-b2", "b", 4),
        ("r-a3", "a", 4),
    ] {
        // Finished: PostgreSQL keeps one executing run per conversation.
        let run = RunRecord {
            state: AgentState::Completed,
            ..run_record(id, session, at(minute))
        };
        store.save_run(&run, &[]).await.unwrap();
    }
    let ids = |runs: Vec<RunRecord>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    // Newest started first; equal start times fall back to the id, descending.
    assert_eq!(
        ids(store.list_runs(None, 10).await.unwrap()),
        ["r-b2", "r-a3", "r-a2", "r-b1", "r-a1"]
    );
    assert_eq!(
        ids(store.list_runs(Some("a"), 10).await.unwrap()),
        ["r-a3", "r-a2", "r-a1"]
    );
    assert_eq!(
        ids(store.list_runs(Some("a"), 2).await.unwrap()),
        ["r-a3", "r-a2"]
    );
    assert_eq!(ids(store.list_runs(None, 1).await.unwrap()), ["r-b2"]);
    assert!(store.list_runs(Some("none"), 10).await.unwrap().is_empty());
    assert!(store.list_runs(None, 0).await.unwrap().is_empty());
}
