//! A run's transcript as the run page shows it: the messages the run wrote, in order, each tool
//! call paired with its result (folded on the page), the loop's own messages marked — a
//! compaction summary as a summary, the rest as internal notes — and system messages left out.

use keel_core::{InternalReason, Role, StoredMessage};

/// One entry of a transcript.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    /// What a person wrote.
    User {
        /// The text.
        text: String,
    },
    /// What the model wrote (text, reasoning, or both), before its tool calls.
    Assistant {
        /// The answer's text (may be empty when it only calls tools).
        text: String,
        /// The reasoning the provider exposed, if any.
        reasoning: Option<String>,
        /// The model that wrote it, when known.
        model: Option<String>,
    },
    /// A tool call the model made, with its result once there is one.
    ToolCall {
        /// The call's id.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments, as the model wrote them (pretty-printed when they are JSON).
        arguments: String,
        /// Its result, when it came back.
        result: Option<ToolResult>,
    },
    /// A summary that stands in for older messages (compaction).
    Summary {
        /// The summary.
        text: String,
    },
    /// A message the loop wrote in the user's place (a nudge, a limit's note, …).
    Internal {
        /// Why the loop wrote it, in words.
        why: &'static str,
        /// The text.
        text: String,
    },
}

/// A tool call's result.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResult {
    /// The result as the model saw it.
    pub output: String,
    /// The call failed (an error, a refusal, a timeout).
    pub failed: bool,
}

/// The transcript of the messages of `run_id` among `messages`, oldest first.
pub fn of_run(messages: &[StoredMessage], run_id: &str) -> Vec<Entry> {
    let mut entries = Vec::new();
    for stored in messages
        .iter()
        .filter(|m| m.run_id.as_deref() == Some(run_id))
    {
        let message = &stored.message;
        match message.role {
            Role::System => {}
            Role::User => match message.meta.internal {
                Some(InternalReason::CompactionSummary) => entries.push(Entry::Summary {
                    text: message.content.clone(),
                }),
                Some(reason) => entries.push(Entry::Internal {
                    why: internal_why(reason),
                    text: message.content.clone(),
                }),
                None if message.meta.summary_of.is_some() => entries.push(Entry::Summary {
                    text: message.content.clone(),
                }),
                None => entries.push(Entry::User {
                    text: message.content.clone(),
                }),
            },
            Role::Assistant => {
                let reasoning = message
                    .reasoning
                    .as_ref()
                    .map(|r| r.text.clone())
                    .filter(|text| !text.trim().is_empty());
                if message.meta.summary_of.is_some() {
                    entries.push(Entry::Summary {
                        text: message.content.clone(),
                    });
                } else if !message.content.is_empty() || reasoning.is_some() {
                    entries.push(Entry::Assistant {
                        text: message.content.clone(),
                        reasoning,
                        model: message.meta.model.clone(),
                    });
                }
                for call in &message.tool_calls {
                    entries.push(Entry::ToolCall {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        arguments: pretty_json(&call.arguments),
                        result: None,
                    });
                }
            }
            Role::Tool => {
                let result = ToolResult {
                    output: message.content.clone(),
                    failed: message.meta.failed,
                };
                let call_id = message.tool_call_id.as_deref().unwrap_or_default();
                let open_call = entries.iter_mut().rev().find_map(|entry| match entry {
                    Entry::ToolCall { id, result, .. } if id == call_id && result.is_none() => {
                        Some(result)
                    }
                    _ => None,
                });
                match open_call {
                    Some(slot) => *slot = Some(result),
                    // A result whose call is not in this run's messages (it was written by an
                    // earlier run of the conversation): shown alone, still folded.
                    None => entries.push(Entry::ToolCall {
                        id: call_id.to_string(),
                        name: "(earlier call)".to_string(),
                        arguments: String::new(),
                        result: Some(result),
                    }),
                }
            }
        }
    }
    entries
}

/// Why the loop wrote a message, in a few words for the page.
fn internal_why(reason: InternalReason) -> &'static str {
    match reason {
        InternalReason::MaxTokensRecovery => "continuation after the answer was cut",
        InternalReason::LoopNudge => "loop guard's note",
        InternalReason::CompactionSummary => "summary",
        InternalReason::IterationLimit => "iteration limit reached",
        InternalReason::TimeLimitSummary => "time limit: summary asked",
        InternalReason::Warning => "warning",
        InternalReason::MemoryFlush => "memory saved before compaction",
        InternalReason::Other => "internal note",
    }
}

/// `text` pretty-printed when it is JSON; as it is otherwise.
pub fn pretty_json(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::{Message, ToolCall};

    fn stored(seq: u64, run: &str, message: Message) -> StoredMessage {
        StoredMessage {
            seq,
            run_id: Some(run.to_string()),
            created_at: chrono::Utc::now(),
            message,
        }
    }

    #[test]
    fn calls_pair_with_their_results_and_loop_messages_are_marked() {
        let mut failed = Message::tool_result("c2", "no such file");
        failed.meta.failed = true;
        let messages = vec![
            stored(1, "r1", Message::system("be brief")),
            stored(1, "r1", Message::user("read a and b")),
            stored(
                2,
                "r1",
                Message::assistant_with_calls(
                    "",
                    vec![
                        ToolCall {
                            id: "c1".into(),
                            name: "read_file".into(),
                            arguments: r#"{"path":"a"}"#.into(),
                        },
                        ToolCall {
                            id: "c2".into(),
                            name: "read_file".into(),
                            arguments: "not json".into(),
                        },
                    ],
                ),
            ),
            stored(3, "r1", Message::tool_result("c1", "hello")),
            stored(4, "r1", failed),
            stored(
                5,
                "r1",
                Message::internal_user(
                    "older turns, summarized",
                    InternalReason::CompactionSummary,
                ),
            ),
            stored(
                6,
                "r1",
                Message::internal_user("try another tool", InternalReason::LoopNudge),
            ),
            stored(7, "r2", Message::user("another run's message")),
            stored(8, "r1", Message::assistant("Done.")),
        ];
        let entries = of_run(&messages, "r1");
        assert_eq!(
            entries,
            vec![
                Entry::User {
                    text: "read a and b".into()
                },
                Entry::ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    arguments: "{\n  \"path\": \"a\"\n}".into(),
                    result: Some(ToolResult {
                        output: "hello".into(),
                        failed: false
                    }),
                },
                Entry::ToolCall {
                    id: "c2".into(),
                    name: "read_file".into(),
                    arguments: "not json".into(),
                    result: Some(ToolResult {
                        output: "no such file".into(),
                        failed: true
                    }),
                },
                Entry::Summary {
                    text: "older turns, summarized".into()
                },
                Entry::Internal {
                    why: "loop guard's note",
                    text: "try another tool".into()
                },
                Entry::Assistant {
                    text: "Done.".into(),
                    reasoning: None,
                    model: None
                },
            ]
        );
    }

    #[test]
    fn a_call_still_running_has_no_result() {
        let messages = vec![stored(
            1,
            "r1",
            Message::assistant_with_calls(
                "Let me look.",
                vec![ToolCall {
                    id: "c1".into(),
                    name: "shell".into(),
                    arguments: r#"{"command":"ls"}"#.into(),
                }],
            ),
        )];
        let entries = of_run(&messages, "r1");
        assert_eq!(entries.len(), 2);
        assert!(matches!(&entries[1], Entry::ToolCall { result: None, .. }));
    }
}
