//! A later run that loads a session from a store sends the pinned messages a compaction summary
//! replaced after the summary (moved from keel-core's unit tests of pinned messages, which can no
//! longer reach an in-memory store).

use chrono::DateTime;
use keel_core::context::{ContextSettings, Strategy};
use keel_core::message::{Message, SeqRange, ToolCall};
use keel_core::{ModelCall, Run, RunSettings, Step, Store, ToolSpec};
use keel_store::MemoryStore;
use serde_json::json;

fn words(n: usize, tag: &str) -> String {
    format!("{tag}:{}", " word".repeat(n))
}

fn settings(strategy: Strategy) -> RunSettings {
    let mut settings = RunSettings::new("primary", "m1");
    settings.context = ContextSettings {
        window: Some(3_000),
        keep_last: 4,
        deep_keep: 2,
        strategy,
        ..ContextSettings::default()
    };
    settings.max_iterations = 100;
    settings
}

fn read(i: usize, pinned: bool) -> [Message; 2] {
    let call = Message::assistant_with_calls(
        "",
        vec![ToolCall {
            id: format!("c{i}"),
            name: "read".into(),
            arguments: format!(r#"{{"path":"f{i}"}}"#),
        }],
    );
    let mut result = Message::tool_result(format!("c{i}"), words(300, &format!("f{i}")));
    result.meta.pinned = pinned;
    [call, result]
}

/// A history over the threshold: a pinned rule from the user, and a pinned result among eight.
fn history() -> Vec<Message> {
    let mut rule = Message::user("Always answer in French.");
    rule.meta.pinned = true;
    let mut history = vec![Message::user("research the files"), rule];
    for i in 0..8 {
        history.extend(read(i, i == 1));
    }
    history
}

fn run_over(settings: RunSettings, history: Vec<keel_core::StoredMessage>) -> Run {
    Run::new(
        "r",
        "s",
        settings,
        vec![ToolSpec::new("read", "reads", json!({"type": "object"}))],
        history,
        Message::user("go on"),
        DateTime::from_timestamp(0, 0).unwrap(),
    )
}

fn expect_call(step: Step) -> ModelCall {
    match step {
        Step::CallModel(call) => call,
        other => panic!("expected a model call, got {other:?}"),
    }
}

fn contents(call: &ModelCall) -> Vec<String> {
    call.request
        .messages
        .iter()
        .map(|m| {
            if m.tool_calls.is_empty() {
                m.content.chars().take(40).collect()
            } else {
                format!("call {}", m.tool_calls[0].id)
            }
        })
        .collect()
}

#[tokio::test]
async fn a_later_run_loads_the_pinned_messages_a_summary_replaced() {
    loads_the_pinned_messages_a_summary_replaced(&MemoryStore::new()).await;
}

#[tokio::test]
async fn a_later_run_loads_the_pinned_messages_a_summary_replaced_on_postgres() {
    if let Some(store) = keel_store::postgres::testing::store().await {
        loads_the_pinned_messages_a_summary_replaced(&store).await;
    }
}

async fn loads_the_pinned_messages_a_summary_replaced(store: &dyn Store) {
    let mut messages = history();
    let mut summary = Message::internal_user(
        "Summary of the earlier conversation (messages 1–18):\nthey read files",
        keel_core::message::InternalReason::CompactionSummary,
    );
    summary.meta.summary_of = Some(SeqRange { first: 1, last: 18 });
    messages.push(summary);
    messages.extend(read(8, false));
    store.append_messages("s", None, &messages).await.unwrap();
    let loaded = store.context_messages("s").await.unwrap();
    assert_eq!(loaded[0].seq, 2, "from the first pinned message on");
    let mut run = run_over(settings(Strategy::Compact), loaded);
    let call = expect_call(run.start());
    let sent = contents(&call);
    let first = &call.request.messages[0].content;
    assert!(
        first.starts_with("Summary of the earlier conversation")
            && first.ends_with("\n\nAlways answer in French."),
        "{first}"
    );
    assert_eq!(sent[1], "call c1");
    assert!(sent[2].starts_with("f1: word"), "{sent:?}");
    assert_eq!(
        sent[3], "call c8",
        "then what followed the summary: {sent:?}"
    );
    assert!(!sent.iter().any(|s| s == "call c0"), "{sent:?}");
}
