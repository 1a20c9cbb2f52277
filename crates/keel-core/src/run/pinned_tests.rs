//! Unit tests of pinned messages through compaction: a summary never stands in for them, the
//! sliding window never drops them, and a pin keeps its whole tool-call exchange (that a later
//! run loading the session from a store sends them after the summary is tested in keel-store's
//! `pinned_context`).

use chrono::DateTime;
use serde_json::json;

use super::*;
use crate::context::{ContextSettings, Strategy};
use crate::message::{Message, SeqRange, ToolCall};
use crate::provider::{ChatResponse, StopReason, Usage};
use crate::run::{ModelCall, RunSettings, Step};
use crate::tool::ToolSpec;

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

fn run_over(settings: RunSettings, history: Vec<crate::store::StoredMessage>) -> Run {
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

#[test]
fn a_summary_never_stands_in_for_a_pinned_message_nor_splits_its_exchange() {
    let mut run = run_over(settings(Strategy::Compact), Run::history(history()));
    let Step::Summarize(summary_call) = run.start() else {
        panic!("the history is over the threshold")
    };
    let input = &summary_call.request.messages[1].content;
    assert!(!input.contains("Always answer in French"), "{input}");
    assert!(
        !input.contains("f1: word"),
        "the pinned result is not summarized"
    );
    assert!(input.contains("f0: word"), "the others are");
    let call = expect_call(run.on_summary(Ok(ChatResponse {
        message: Message::assistant("they read f0..f5"),
        stop_reason: StopReason::EndTurn,
        usage: Usage::default(),
        model: "m1".into(),
    })));
    let sent = contents(&call);
    // The summary, then the pinned rule and the pinned result with its call, in their order,
    // then the live messages.
    // (The summary and the rule are both user messages: the request joins them.)
    let first = &call.request.messages[0].content;
    assert!(
        first.starts_with("Summary of the earlier conversation")
            && first.ends_with("\n\nAlways answer in French."),
        "{first}"
    );
    assert_eq!(sent[1], "call c1");
    assert!(sent[2].starts_with("f1: word"), "{sent:?}");
    assert_eq!(
        sent[3..],
        [
            "call c6",
            "f6: word word word word word word word w",
            "call c7",
            "f7: word word word word word word word w",
            "go on"
        ]
    );
    // The stored summary still names every message it stands in for.
    let summary = run
        .messages()
        .iter()
        .find_map(|m| m.meta.summary_of)
        .unwrap();
    assert_eq!(summary, SeqRange { first: 1, last: 14 });
}

#[test]
fn the_sliding_window_keeps_pinned_messages() {
    let mut run = run_over(settings(Strategy::SlidingWindow), Run::history(history()));
    let call = expect_call(run.start());
    let sent = contents(&call);
    // The first user message stays too (the window's own rule): the request joins the two.
    assert!(
        sent.iter().any(|s| s.contains("Always answer in Fre")),
        "{sent:?}"
    );
    let at = sent
        .iter()
        .position(|s| s == "call c1")
        .expect("the pinned call");
    assert!(sent[at + 1].starts_with("f1: word"), "{sent:?}");
    assert!(
        !sent.iter().any(|s| s == "call c2"),
        "others were dropped: {sent:?}"
    );
}
