//! Tests of the context module, including a property test that a cut never separates a tool
//! call from its result.

use proptest::prelude::*;

use super::{
    ContextSettings, DEFAULT_WINDOW, SENT_MIN_CHARS, WindowTable, clip_for_request, cut_point,
    pinned_results, pinned_section, sent_share, summary_input,
};
use crate::message::Message;
use crate::message::ToolCall;

fn call(id: &str, name: &str, args: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.into(),
    }
}

#[test]
fn windows_come_from_the_table_by_longest_prefix() {
    let table = WindowTable::default();
    assert_eq!(table.window("gpt-4o-mini-2024-07-18"), 128_000);
    assert_eq!(table.window("gpt-4.1-mini"), 1_047_576);
    assert_eq!(table.window("gpt-4-0613"), 8_192);
    assert_eq!(table.window("claude-haiku-4-5"), 200_000);
    assert_eq!(table.window("llama3.1:8b"), DEFAULT_WINDOW);
    let mut settings = ContextSettings::default();
    settings.windows.set("llama3.1", 131_072);
    assert_eq!(settings.window_for("llama3.1:8b"), 131_072);
    settings.window = Some(4000);
    assert_eq!(settings.window_for("gpt-4o"), 4000, "an override wins");
}

#[test]
fn a_cut_moves_back_to_keep_results_with_their_call() {
    let messages = vec![
        Message::user("task"),
        Message::assistant_with_calls("", vec![call("a", "read", "{}"), call("b", "read", "{}")]),
        Message::tool_result("a", "A"),
        Message::tool_result("b", "B"),
        Message::assistant("done"),
    ];
    // Keeping 2 would start at the result of `b`: the cut moves back to its call.
    assert_eq!(cut_point(&messages, 0, 2), 1);
    assert_eq!(cut_point(&messages, 0, 1), 4);
    assert_eq!(cut_point(&messages, 0, 10), 0, "nothing to cut");
    assert_eq!(cut_point(&messages, 3, 1), 4);
}

#[test]
fn the_latest_successful_result_of_each_tool_is_pinned_and_errors_never_are() {
    let messages = vec![
        Message::assistant_with_calls("", vec![call("1", "read", r#"{"p":"a"}"#)]),
        Message::tool_result("1", "first read"),
        Message::assistant_with_calls("", vec![call("2", "read", r#"{"p":"b"}"#)]),
        Message::tool_result("2", "second read"),
        Message::assistant_with_calls("", vec![call("3", "read", r#"{"p":"c"}"#)]),
        Message::tool_result("3", "Error: no such file: c"),
        Message::assistant_with_calls("", vec![call("4", "search", r#"{"q":"x"}"#)]),
        Message::tool_result("4", "Error: timeout"),
        Message::assistant_with_calls("", vec![call("5", "list", "{}")]),
        Message::tool_result("5", "a.txt b.txt"),
    ];
    let refs: Vec<&Message> = messages.iter().collect();
    let pinned = pinned_results(&refs);
    assert_eq!(
        pinned,
        vec![
            (
                "read".to_string(),
                r#"{"p":"b"}"#.to_string(),
                "second read".to_string()
            ),
            (
                "list".to_string(),
                "{}".to_string(),
                "a.txt b.txt".to_string()
            ),
        ]
    );
    let section = pinned_section(&pinned);
    assert!(
        section.contains("- read {\"p\":\"b\"}:\nsecond read"),
        "{section}"
    );
    let input = summary_input(None, &refs, &pinned);
    assert!(input.contains("[tool call] read {\"p\":\"a\"}") && input.contains("Pinned results"));
}

/// A well-formed history: user turns and assistant turns, some calling tools whose results
/// follow them directly.
fn history() -> impl Strategy<Value = Vec<Message>> {
    prop::collection::vec((0usize..4, 1usize..3), 1..25).prop_map(|turns| {
        let mut messages = Vec::new();
        let mut next_id = 0;
        for (kind, calls) in turns {
            match kind {
                0 => messages.push(Message::user("u")),
                1 => messages.push(Message::assistant("a")),
                _ => {
                    let ids: Vec<String> = (0..calls)
                        .map(|_| {
                            next_id += 1;
                            format!("c{next_id}")
                        })
                        .collect();
                    messages.push(Message::assistant_with_calls(
                        "",
                        ids.iter().map(|id| call(id, "t", "{}")).collect(),
                    ));
                    for id in ids {
                        messages.push(Message::tool_result(id, "r"));
                    }
                }
            }
        }
        messages
    })
}

/// Every result in `tail` answers a call made in `tail`, and every call there is answered.
fn pairs_intact(tail: &[Message]) -> bool {
    let calls: Vec<&str> = tail
        .iter()
        .flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str()))
        .collect();
    let results: Vec<&str> = tail
        .iter()
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    results.iter().all(|r| calls.contains(r)) && calls.iter().all(|c| results.contains(c))
}

proptest! {
    #[test]
    fn no_cut_ever_separates_a_call_from_its_result(
        messages in history(),
        start_fraction in 0.0f64..1.0,
        keep in 0usize..12,
    ) {
        let start = cut_point(&messages, 0, ((messages.len() as f64) * (1.0 - start_fraction)) as usize);
        prop_assert!(pairs_intact(&messages[start..]));
        let cut = cut_point(&messages, start, keep);
        prop_assert!(cut >= start);
        prop_assert!(pairs_intact(&messages[cut..]), "cut {cut} of {}", messages.len());
        prop_assert!(pairs_intact(&messages[start..cut]), "the summarized head keeps its pairs too");
    }
}

#[test]
fn requests_carry_oversized_arguments_and_results_cut_and_short_ones_whole() {
    assert_eq!(sent_share(8_192, 20), 204);
    assert_eq!(sent_share(1_000, 20), SENT_MIN_CHARS);
    let short = Message::tool_result("c1", "ok");
    assert!(clip_for_request(&short, 200).is_none());
    let long = Message::tool_result("c1", "y".repeat(1_000));
    let sent = clip_for_request(&long, 200).unwrap();
    assert!(sent.content.starts_with(&"y".repeat(200)));
    assert!(
        sent.content.contains("output truncated"),
        "{}",
        sent.content
    );
    assert_eq!(long.content.len(), 1_000, "the message itself stays whole");
}
