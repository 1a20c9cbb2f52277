//! The memory flush before a compaction and the task list surviving one, on the run state
//! machine with the memory notes and the standard extensions registered (moved from keel-core's
//! unit tests of the run).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use keel_core::context::ContextSettings;
use keel_core::extension::ExtensionSet;
use keel_core::journal::Journal;
use keel_core::message::{Message, ToolCall};
use keel_core::provider::{ChatResponse, StopReason, Usage};
use keel_core::{
    AgentState, EventKind, ModelCall, Run, RunSettings, Step, StoredMessage, ToolResult, ToolSpec,
};
use keel_extensions::memory_notes::{FLUSH_PROMPT, InMemoryNotes, MEMORY, MemoryNotes};
use keel_extensions::todo::{TODO, TodoList};
use serde_json::json;

fn settings() -> RunSettings {
    let mut settings = RunSettings::new("primary", "m1");
    settings.context = ContextSettings {
        window: Some(2000),
        keep_last: 4,
        deep_keep: 2,
        ..ContextSettings::default()
    };
    settings.max_iterations = 100;
    let mut extensions = keel_extensions::standard();
    extensions.push(Arc::new(MemoryNotes {
        backend: Arc::new(InMemoryNotes::default()),
    }));
    settings.extensions = ExtensionSet::new(extensions);
    settings
}

/// A run over a history of 8 reads of ~200 tokens: over the threshold of a 2000-token window.
fn run_with(tools: &[&str], journal: Journal) -> Run {
    let tools = tools
        .iter()
        .map(|name| ToolSpec::new(*name, "a tool", json!({"type": "object"})))
        .collect();
    let mut history = vec![Message::user("research the files")];
    for i in 0..8 {
        history.push(Message::assistant_with_calls(
            "",
            vec![call(&format!("c{i}"), "read", json!({"path": i}))],
        ));
        history.push(Message::tool_result(
            format!("c{i}"),
            format!("f{i}:{}", " word".repeat(200)),
        ));
    }
    Run::new(
        "r",
        "s",
        settings(),
        tools,
        Run::history(history),
        Message::user("go on"),
        DateTime::from_timestamp(0, 0).unwrap(),
    )
    .with_journal(journal)
}

fn call(id: &str, name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.to_string(),
    }
}

fn answer(message: Message) -> ChatResponse {
    ChatResponse {
        message,
        stop_reason: StopReason::EndTurn,
        usage: Usage::default(),
        model: "m1".into(),
    }
}

fn expect_call(step: Step) -> ModelCall {
    match step {
        Step::CallModel(call) => call,
        other => panic!("expected a model call, got {other:?}"),
    }
}

fn names(call: &ModelCall) -> Vec<&str> {
    call.request.tools.iter().map(|t| t.name.as_str()).collect()
}

fn flushed(run: &mut Run) -> Vec<usize> {
    run.drain_events()
        .into_iter()
        .filter_map(|event| match event {
            EventKind::MemoryFlushed { saved } => Some(saved),
            _ => None,
        })
        .collect()
}

#[test]
fn the_model_saves_with_memory_and_todo_only_then_the_compaction_runs() {
    let mut run = run_with(&["read", MEMORY], Journal::default());
    let flush = expect_call(run.start());
    assert_eq!(
        names(&flush),
        [MEMORY, TODO],
        "only the flush tools are offered"
    );
    let last = &flush.request.messages.last().unwrap().content;
    assert!(last.ends_with(FLUSH_PROMPT), "{last}");
    assert_eq!(run.iteration(), 1);
    // The model saves a note, and also tries to read: the read is refused, not run.
    let step = run.on_model_result(Ok(answer(Message::assistant_with_calls(
        "",
        vec![
            call(
                "m1",
                MEMORY,
                json!({"action": "add", "target": "memory", "text": "x"}),
            ),
            call("r1", "read", json!({})),
        ],
    ))));
    let Step::RunTools(calls) = step else {
        panic!("expected the memory call to run, got {step:?}")
    };
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, MEMORY);
    let step = run.on_tool_results(vec![ToolResult {
        call_id: "m1".into(),
        ok: true,
        content: "Saved".into(),
    }]);
    assert!(
        matches!(step, Step::Summarize(_)),
        "then the compaction: {step:?}"
    );
    let refused = run.tool_calls().iter().find(|c| c.id == "r1").unwrap();
    assert!(!refused.ok && refused.output.contains("only `memory` and `todo`"));
    assert_eq!(flushed(&mut run), [1]);
    let next = expect_call(run.on_summary(Ok(answer(Message::assistant("summary")))));
    assert_eq!(
        names(&next),
        [
            "read",
            MEMORY,
            "get_run_journal",
            "update_run_journal",
            "append_run_journal_entry",
            TODO,
            "ask_human",
            "clarify"
        ]
    );
    assert!(flushed(&mut run).is_empty(), "one flush per compaction");
    assert!(
        next.request
            .messages
            .iter()
            .all(|m| !m.content.contains(FLUSH_PROMPT)),
        "a spent flush request is not sent again"
    );
}

#[test]
fn a_flush_turn_that_only_answers_does_not_end_the_run() {
    let mut run = run_with(&["read", MEMORY], Journal::default());
    expect_call(run.start());
    let step = run.on_model_result(Ok(answer(Message::assistant("nothing to save"))));
    assert!(matches!(step, Step::Summarize(_)), "{step:?}");
    assert_eq!(run.state(), AgentState::Running);
    assert_eq!(flushed(&mut run), [0]);
    assert!(
        run.messages()
            .iter()
            .all(|m| m.content != "nothing to save"),
        "the flush turn's answer is not kept"
    );
}

#[test]
fn without_the_memory_tool_there_is_no_flush() {
    let mut run = run_with(&["read"], Journal::default());
    assert!(matches!(run.start(), Step::Summarize(_)));
    assert!(flushed(&mut run).is_empty());
}

#[test]
fn a_run_restored_mid_flush_asks_the_same_again() {
    let mut run = run_with(&["read", MEMORY], Journal::default());
    let flush = expect_call(run.start());
    let checkpoint = run
        .checkpoint(1, DateTime::from_timestamp(1, 0).unwrap())
        .unwrap();
    let stored: Vec<StoredMessage> = run
        .messages()
        .iter()
        .enumerate()
        .map(|(i, message)| StoredMessage {
            seq: i as u64 + 1,
            run_id: None,
            created_at: DateTime::<Utc>::UNIX_EPOCH,
            message: Message::clone(message),
        })
        .collect();
    // A resuming agent attaches its extensions to the restored run.
    let mut restored = Run::restore(&checkpoint, stored)
        .unwrap()
        .with_extensions(settings().extensions);
    assert_eq!(expect_call(restored.resume()), flush);
    let step = restored.on_model_result(Ok(answer(Message::assistant("done"))));
    assert!(matches!(step, Step::Summarize(_)), "{step:?}");
}

#[test]
fn the_task_list_comes_back_after_a_compaction() {
    let mut journal = Journal::default();
    let mut todos = TodoList::default();
    todos
        .apply(&json!({"action": "add", "items": [{"text": "read every file", "status": "in_progress"}]}))
        .unwrap();
    todos.keep_in(&mut journal);
    let mut run = run_with(&["read"], journal);
    let Step::Summarize(_) = run.start() else {
        panic!("the history is over the threshold")
    };
    let call = expect_call(run.on_summary(Ok(answer(Message::assistant("they read files")))));
    let contents: Vec<&str> = call
        .request
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    // The list goes with the run's own message, in its turn context, after the summary.
    let summary = contents
        .iter()
        .position(|c| c.contains("they read files"))
        .unwrap();
    assert!(
        !contents[summary].contains("Your task list"),
        "{contents:#?}"
    );
    // The run's own message is the task list's turn context, then the message; nothing else
    // but the context notice may follow it. This history sits at the notice's edge (~90% of
    // the threshold): a few tokens more in the tool definitions (serde_json's key order, which
    // a workspace-wide feature such as `preserve_order` changes) add it, and it is not what
    // this test is about.
    let expected = "<turn-context>\nYour task list (kept through the summary):\nTask list:\n[~] \
                    1: read every file (in_progress)\n</turn-context>\n\ngo on";
    let last = *contents.last().unwrap();
    assert!(
        last == expected
            || last
                .strip_prefix(expected)
                .is_some_and(|rest| rest.starts_with("\n\nContext notice: ")),
        "{last:?}"
    );
}

#[test]
fn the_task_list_is_not_repeated_before_any_compaction() {
    let mut journal = Journal::default();
    let mut todos = TodoList::default();
    todos
        .apply(&json!({"action": "add", "items": [{"text": "a"}]}))
        .unwrap();
    todos.keep_in(&mut journal);
    let mut settings = settings();
    settings.context.window = Some(100_000);
    let mut run = Run::new(
        "r",
        "s",
        settings,
        Vec::new(),
        Run::history(vec![Message::user("hi")]),
        Message::user("go on"),
        DateTime::from_timestamp(0, 0).unwrap(),
    )
    .with_journal(journal);
    let call = expect_call(run.start());
    assert!(
        call.request
            .messages
            .iter()
            .all(|m| !m.content.contains("Task list"))
    );
    // The todo tool edits the list the journal keeps.
    let step = run.on_model_result(Ok(answer(Message::assistant_with_calls(
        "",
        vec![call_todo()],
    ))));
    expect_call(step);
    assert_eq!(TodoList::of(run.journal()).items()[0].status, "done");
    assert!(
        run.take_journal_change().is_some(),
        "kept at the next commit"
    );
}

fn call_todo() -> ToolCall {
    call(
        "t1",
        TODO,
        json!({"action": "update", "id": "1", "status": "done"}),
    )
}
