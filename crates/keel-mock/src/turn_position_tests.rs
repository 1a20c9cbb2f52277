use keel_core::{InternalReason, Message, ToolCall};
use serde_json::{Value, json};

use super::*;

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "read_file".into(),
        arguments: r#"{"path":"a.txt"}"#.into(),
    }
}

/// A turn of keel's messages: the user's question, then `replies` tool-calling replies, each
/// answered by two results.
fn turn(question: &str, replies: usize) -> Vec<Message> {
    let mut messages = vec![Message::user(question)];
    for r in 0..replies {
        let (a, b) = (format!("c{question}{r}a"), format!("c{question}{r}b"));
        messages.push(Message::assistant_with_calls(
            "Looking.",
            vec![call(&a), call(&b)],
        ));
        messages.push(Message::tool_result(a, "one"));
        messages.push(Message::tool_result(b, "two"));
    }
    messages
}

#[test]
fn in_process_positions_count_replies_since_the_last_real_user_message() {
    let mut messages = vec![Message::system("Be brief.")];
    messages.extend(turn("q1", 0));
    assert_eq!(of_messages(&messages), 0);
    messages.extend(turn("q1", 2).into_iter().skip(1));
    assert_eq!(of_messages(&messages), 2);
    messages.push(Message::assistant("Done."));
    messages.extend(turn("q2", 1));
    assert_eq!(
        of_messages(&messages),
        1,
        "a new user message starts a turn"
    );
}

#[test]
fn in_process_internal_messages_neither_start_turns_nor_count() {
    let mut messages = turn("q", 1);
    messages.push(Message::internal_user(
        "You are repeating yourself.",
        InternalReason::LoopNudge,
    ));
    assert_eq!(of_messages(&messages), 1);
    let mut note = Message::assistant("Stopped at the iteration limit.");
    note.meta.internal = Some(InternalReason::IterationLimit);
    messages.push(note);
    messages.push(Message::internal_user(
        "Budget nearly spent.",
        InternalReason::Warning,
    ));
    assert_eq!(of_messages(&messages), 1);
    let mut summary_first = vec![Message::internal_user(
        "Summary of the earlier conversation",
        InternalReason::CompactionSummary,
    )];
    summary_first.extend(turn("q", 2));
    assert_eq!(of_messages(&summary_first), 2);
}

/// A chat-completions body's messages as keel's adapter writes them.
fn chat(replies: usize, then: &[Value]) -> Vec<Value> {
    let mut messages = vec![
        json!({"role": "system", "content": "Be brief."}),
        json!({"role": "user", "content": "q"}),
    ];
    for r in 0..replies {
        let id = format!("call_{r}_0");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function",
             "function": {"name": "read_file", "arguments": "{}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": "hello"}));
    }
    messages.extend(then.iter().cloned());
    messages
}

#[test]
fn chat_completions_positions() {
    assert_eq!(of_chat_completions(&chat(0, &[])), 0);
    assert_eq!(of_chat_completions(&chat(3, &[])), 3);
    let warning = json!({"role": "user", "content": "Budget nearly spent."});
    assert_eq!(
        of_chat_completions(&chat(2, &[warning])),
        2,
        "a user message right after tool results continues the turn"
    );
    let next_turn = [
        json!({"role": "assistant", "content": "Done."}),
        json!({"role": "user", "content": "and now?"}),
    ];
    assert_eq!(of_chat_completions(&chat(2, &next_turn)), 0);
}

/// An Anthropic Messages body's messages as keel's adapter writes them.
fn anthropic(replies: usize, then: &[Value]) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "content": [{"type": "text", "text": "q"}]})];
    for r in 0..replies {
        let id = format!("toolu_{r}_0");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": id, "name": "read_file", "input": {}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": "hello"}]}));
    }
    messages.extend(then.iter().cloned());
    messages
}

#[test]
fn anthropic_messages_positions() {
    assert_eq!(of_messages_api(&anthropic(0, &[])), 0);
    assert_eq!(of_messages_api(&anthropic(2, &[])), 2);
    // The adapter merges the loop's warning into the tool-result turn.
    let mut merged = anthropic(2, &[]);
    if let Some(Value::Array(blocks)) = merged.last_mut().and_then(|m| m.get_mut("content")) {
        blocks.push(json!({"type": "text", "text": "Budget nearly spent."}));
    }
    assert_eq!(of_messages_api(&merged), 2);
    let next_turn = [
        json!({"role": "assistant", "content": [{"type": "text", "text": "Done."}]}),
        json!({"role": "user", "content": "and now?"}),
    ];
    assert_eq!(of_messages_api(&anthropic(1, &next_turn)), 0);
}

/// A Responses body's input as keel's adapter writes it: each reply is a reasoning item, a
/// message and two function calls, answered by two outputs.
fn responses(replies: usize, then: &[Value]) -> Value {
    let mut items = vec![json!({"role": "user", "content": [{"type": "input_text", "text": "q"}]})];
    for r in 0..replies {
        let (a, b) = (format!("call_{r}_0"), format!("call_{r}_1"));
        items.push(
            json!({"type": "reasoning", "id": format!("rs_{r}"), "summary": [],
                          "encrypted_content": "gAAA"}),
        );
        items.push(json!({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": "Looking."}]}));
        for id in [&a, &b] {
            items.push(
                json!({"type": "function_call", "call_id": id, "name": "read_file",
                              "arguments": "{}"}),
            );
        }
        for id in [&a, &b] {
            items.push(json!({"type": "function_call_output", "call_id": id, "output": "hi"}));
        }
    }
    items.extend(then.iter().cloned());
    Value::Array(items)
}

#[test]
fn responses_positions_count_runs_of_output_items() {
    assert_eq!(of_responses(Some(&json!("q"))), 0);
    assert_eq!(of_responses(Some(&responses(0, &[]))), 0);
    assert_eq!(of_responses(Some(&responses(3, &[]))), 3);
    let warning = json!({"role": "user",
                         "content": [{"type": "input_text", "text": "Budget nearly spent."}]});
    assert_eq!(of_responses(Some(&responses(2, &[warning]))), 2);
    let next_turn = [
        json!({"type": "message", "role": "assistant",
               "content": [{"type": "output_text", "text": "Done."}]}),
        json!({"role": "user", "content": [{"type": "input_text", "text": "and now?"}]}),
    ];
    assert_eq!(of_responses(Some(&responses(2, &next_turn))), 0);
}
