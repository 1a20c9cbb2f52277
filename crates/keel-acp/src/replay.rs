//! Replaying a stored keel conversation as ACP session updates, for `session/load`: the editor
//! shows the conversation as it was, from keel's store alone.
//!
//! Each stored message becomes the updates a live turn would have sent for it: a person's
//! message a `user_message_chunk`, the model's reasoning an `agent_thought_chunk`, its text an
//! `agent_message_chunk`, and each tool call one `tool_call` (titled and kinded as a live turn's,
//! [`crate::updates::tool_call`]) already carrying its final status (`completed`, or `failed`
//! when its result was an error) and its result as text content. A
//! call with no stored result yet (its run stopped before the result was committed, or it waits
//! for approval) replays as `pending`; a resumed run sends its updates under the same call id.
//! Messages the loop injected (continuation prompts, loop nudges, compaction summaries) and
//! system messages are keel's own bookkeeping and are not replayed. Every chunk carries a
//! message id, `keel-<seq>` (the message's place in the session), so two messages in a row of
//! the same role stay two messages.

use std::collections::HashMap;

use agent_client_protocol::v1::schema::{
    ContentChunk, MessageId, Plan, SessionUpdate, ToolCallContent, ToolCallStatus,
};
use keel_core::journal::Journal;
use keel_core::message::{Message, Role, StoredMessage};
use keel_extensions::todo::TodoList;

use crate::updates::{MAX_TOOL_OUTPUT_CHARS, chunk, plan_of, tool_call};

/// The ids of the tool calls `updates` (a replay) shows as pending: called, with no result.
pub fn pending_calls(updates: &[SessionUpdate]) -> Vec<String> {
    updates
        .iter()
        .filter_map(|update| match update {
            SessionUpdate::ToolCall(call) if call.status == ToolCallStatus::Pending => {
                Some(call.tool_call_id.0.to_string())
            }
            _ => None,
        })
        .collect()
}

/// The updates that replay `messages` (a session's stored messages, in order).
pub fn replay(messages: &[StoredMessage]) -> Vec<SessionUpdate> {
    let results: HashMap<&str, &Message> = messages
        .iter()
        .filter(|stored| stored.message.role == Role::Tool)
        .filter_map(|stored| {
            let id = stored.message.tool_call_id.as_deref()?;
            Some((id, &stored.message))
        })
        .collect();
    let mut updates = Vec::new();
    for stored in messages {
        let message = &stored.message;
        if message.is_internal() {
            continue;
        }
        let id = message_id(stored.seq);
        match message.role {
            Role::System | Role::Tool => {}
            Role::User => {
                if !message.content.is_empty() {
                    updates.push(SessionUpdate::UserMessageChunk(message_chunk(
                        &message.content,
                        &id,
                    )));
                }
            }
            Role::Assistant => {
                if let Some(reasoning) = &message.reasoning
                    && !reasoning.text.is_empty()
                {
                    let thought = message_id_for_thought(stored.seq);
                    updates.push(SessionUpdate::AgentThoughtChunk(message_chunk(
                        &reasoning.text,
                        &thought,
                    )));
                }
                if !message.content.is_empty() {
                    updates.push(SessionUpdate::AgentMessageChunk(message_chunk(
                        &message.content,
                        &id,
                    )));
                }
                for call in &message.tool_calls {
                    let (status, content) = match results.get(call.id.as_str()) {
                        Some(result) if result.meta.failed => {
                            (ToolCallStatus::Failed, text_content(&result.content))
                        }
                        Some(result) => (ToolCallStatus::Completed, text_content(&result.content)),
                        None => (ToolCallStatus::Pending, Vec::new()),
                    };
                    let update =
                        tool_call(&call.id, &call.name, &call.arguments, status).content(content);
                    updates.push(SessionUpdate::ToolCall(update));
                }
            }
        }
    }
    updates
}

/// The session's task list (the `todo` tool's, kept in its journal) as an ACP plan, as a live
/// turn shows it ([`plan_of`]), when it has one.
pub fn plan(journal: &Journal) -> Option<Plan> {
    let todo = TodoList::of(journal);
    (!todo.is_empty()).then(|| plan_of(&todo))
}

/// The message id of the stored message at `seq`.
fn message_id(seq: u64) -> MessageId {
    MessageId::new(format!("keel-{seq}"))
}

/// The message id of the reasoning that came with the stored message at `seq`: a thought is a
/// message of its own beside the answer's text.
fn message_id_for_thought(seq: u64) -> MessageId {
    MessageId::new(format!("keel-{seq}-thought"))
}

fn message_chunk(text: &str, id: &MessageId) -> ContentChunk {
    chunk(text).message_id(id.clone())
}

/// A tool's result as the call's content, cut as a live turn cuts it.
fn text_content(text: &str) -> Vec<ToolCallContent> {
    let text = match text.char_indices().nth(MAX_TOOL_OUTPUT_CHARS) {
        Some((cut, _)) => format!("{}\n[… cut for the editor]", &text[..cut]),
        None if text.is_empty() => return Vec::new(),
        None => text.to_string(),
    };
    vec![ToolCallContent::from(text)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::message::{InternalReason, Reasoning, ToolCall as KeelCall};
    use serde_json::Value;

    fn stored(messages: Vec<Message>) -> Vec<StoredMessage> {
        (1..)
            .zip(messages)
            .map(|(seq, message): (u64, Message)| {
                serde_json::from_value(serde_json::json!({
                    "seq": seq,
                    "run_id": "r",
                    "created_at": "2026-11-29T21:00:00Z",
                    "message": message,
                }))
                .unwrap()
            })
            .collect()
    }

    fn call(id: &str, name: &str, arguments: &str) -> KeelCall {
        KeelCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    fn failed(call_id: &str, text: &str) -> Message {
        let mut message = Message::tool_result(call_id, text);
        message.meta.failed = true;
        message
    }

    /// The updates as their wire JSON, which is what an editor sees.
    fn wire(updates: &[SessionUpdate]) -> Vec<Value> {
        updates
            .iter()
            .map(|update| serde_json::to_value(update).unwrap())
            .collect()
    }

    #[test]
    fn a_turn_with_reasoning_tools_and_an_answer_replays_in_order() {
        let mut thinking = Message::assistant_with_calls(
            "Reading the plan.",
            vec![
                call("c1", "read_file", r#"{"path":"plan.txt"}"#),
                call("c2", "shell", r#"{"command":"false"}"#),
            ],
        );
        thinking.reasoning = Some(Reasoning {
            text: "I should look first.".into(),
            replay: None,
        });
        let updates = wire(&replay(&stored(vec![
            Message::system("you are keel"),
            Message::user("do the plan"),
            thinking,
            Message::tool_result("c1", "append alpha"),
            failed("c2", "exit status 1"),
            Message::assistant("Done."),
        ])));
        let kinds: Vec<&str> = updates
            .iter()
            .map(|u| u["sessionUpdate"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "user_message_chunk",
                "agent_thought_chunk",
                "agent_message_chunk",
                "tool_call",
                "tool_call",
                "agent_message_chunk"
            ]
        );
        assert_eq!(updates[0]["content"]["text"], "do the plan");
        assert_eq!(updates[0]["messageId"], "keel-2");
        assert_eq!(updates[1]["content"]["text"], "I should look first.");
        assert_eq!(updates[1]["messageId"], "keel-3-thought");
        assert_eq!(updates[2]["messageId"], "keel-3");
        let read = &updates[3];
        assert_eq!(read["toolCallId"], "c1");
        assert_eq!(read["title"], "read_file: plan.txt");
        assert_eq!(read["kind"], "read");
        assert_eq!(read["status"], "completed");
        assert_eq!(read["rawInput"]["path"], "plan.txt");
        assert_eq!(read["content"][0]["type"], "content");
        assert_eq!(read["content"][0]["content"]["text"], "append alpha");
        let shell = &updates[4];
        assert_eq!(shell["kind"], "execute");
        assert_eq!(shell["title"], "shell: false");
        assert_eq!(shell["status"], "failed");
        assert_eq!(shell["content"][0]["content"]["text"], "exit status 1");
        assert_eq!(updates[5]["content"]["text"], "Done.");
        assert_eq!(updates[5]["messageId"], "keel-6");
    }

    #[test]
    fn a_call_without_a_stored_result_replays_pending() {
        let updates = wire(&replay(&stored(vec![
            Message::user("append"),
            Message::assistant_with_calls(
                "",
                vec![call(
                    "a1",
                    "append_file",
                    r#"{"path":"log.txt","content":"x"}"#,
                )],
            ),
        ])));
        assert_eq!(updates.len(), 2, "{updates:#?}");
        assert_eq!(updates[1]["sessionUpdate"], "tool_call");
        assert_eq!(updates[1]["kind"], "edit");
        // Pending is the wire default, so it is left out.
        assert!(updates[1]["status"].is_null() || updates[1]["status"] == "pending");
        assert!(updates[1].get("content").is_none(), "{:#?}", updates[1]);
    }

    #[test]
    fn the_pending_calls_are_the_ones_without_a_result() {
        let updates = replay(&stored(vec![
            Message::user("read, then append"),
            Message::assistant_with_calls(
                "",
                vec![
                    call("r1", "read_file", r#"{"path":"a"}"#),
                    call("a1", "append_file", r#"{"path":"log.txt","content":"x"}"#),
                ],
            ),
            Message::tool_result("r1", "contents"),
        ]));
        assert_eq!(pending_calls(&updates), vec!["a1".to_string()]);
    }

    #[test]
    fn the_loops_own_messages_are_not_replayed() {
        let mut summary =
            Message::internal_user("summary of 1..4", InternalReason::CompactionSummary);
        summary.meta.summary_of = Some(keel_core::message::SeqRange { first: 1, last: 4 });
        let updates = wire(&replay(&stored(vec![
            Message::system("prompt"),
            Message::user("first"),
            Message::internal_user("go on", InternalReason::MaxTokensRecovery),
            summary,
            Message::user("second"),
            Message::user(""),
        ])));
        let texts: Vec<&str> = updates
            .iter()
            .map(|u| u["content"]["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["first", "second"]);
        // Two person's messages in a row stay two messages.
        assert_ne!(updates[0]["messageId"], updates[1]["messageId"]);
    }

    #[test]
    fn an_empty_conversation_replays_nothing() {
        assert!(replay(&[]).is_empty());
    }

    #[test]
    fn malformed_arguments_and_orphan_results_do_not_break_the_replay() {
        let updates = wire(&replay(&stored(vec![
            Message::assistant_with_calls("", vec![call("m1", "mcp__x", "{not json")]),
            Message::tool_result("m1", "bad arguments"),
            Message::tool_result("nobody", "an answer to no call"),
        ])));
        assert_eq!(updates.len(), 1, "{updates:#?}");
        assert_eq!(updates[0]["rawInput"], "{not json");
        assert_eq!(updates[0]["title"], "mcp__x");
        assert_eq!(updates[0]["status"], "completed");
    }

    #[test]
    fn a_huge_result_is_cut_as_a_live_turn_cuts_it() {
        let huge = "x".repeat(MAX_TOOL_OUTPUT_CHARS + 10);
        let updates = wire(&replay(&stored(vec![
            Message::assistant_with_calls("", vec![call("c1", "read_file", r#"{"path":"big"}"#)]),
            Message::tool_result("c1", huge),
        ])));
        let text = updates[0]["content"][0]["content"]["text"]
            .as_str()
            .unwrap();
        assert!(
            text.ends_with("[… cut for the editor]"),
            "{}",
            &text[text.len() - 40..]
        );
        assert!(text.chars().count() < MAX_TOOL_OUTPUT_CHARS + 40);
    }

    #[test]
    fn the_task_list_becomes_a_plan() {
        let mut journal = Journal::default();
        assert!(plan(&journal).is_none());
        journal.extensions.insert(
            "todos".into(),
            serde_json::json!([
                {"id": "1", "text": "read", "status": "done"},
                {"id": "2", "text": "write", "status": "in_progress"},
                {"id": "3", "text": "test", "status": "pending"},
                {"id": "4", "text": "dropped", "status": "cancelled"}
            ]),
        );
        let plan = serde_json::to_value(plan(&journal).unwrap()).unwrap();
        let entries: Vec<(&str, &str)> = plan["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["content"].as_str().unwrap(),
                    e["status"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            entries,
            [
                ("read", "completed"),
                ("write", "in_progress"),
                ("test", "pending"),
                ("dropped", "completed")
            ]
        );
    }
}
