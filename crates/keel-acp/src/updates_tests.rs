use super::*;

use keel_core::ParsedToolCall;
use serde_json::{Value, json};

fn event(kind: EventKind) -> Event {
    Event {
        ts: chrono_now(),
        run_id: "r".into(),
        session_id: "s".into(),
        kind,
    }
}

fn chrono_now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

/// The updates as JSON, to compare with the wire shape.
fn wire(updates: Vec<SessionUpdate>) -> Vec<Value> {
    updates
        .into_iter()
        .map(|u| serde_json::to_value(u).unwrap())
        .collect()
}

#[test]
fn a_tool_call_is_announced_pending_then_in_progress_then_completed() {
    let mut turn = TurnMapper::new();
    let parsed = wire(turn.map(&event(EventKind::ToolCallParsed(ParsedToolCall {
        iteration: 1,
        index: 0,
        call_id: "call_1".into(),
        name: "shell".into(),
        arguments: r#"{"command":"ls -la"}"#.into(),
    }))));
    assert_eq!(parsed.len(), 1);
    assert_eq!(parsed[0]["sessionUpdate"], "tool_call");
    assert_eq!(parsed[0]["toolCallId"], "call_1");
    assert_eq!(parsed[0]["title"], "shell: ls -la");
    assert_eq!(parsed[0]["kind"], "execute");
    // `pending` is the protocol's default status: the wire leaves it out.
    assert!(
        parsed[0].get("status").is_none_or(|s| s == "pending"),
        "{parsed:?}"
    );
    assert_eq!(parsed[0]["rawInput"], json!({"command": "ls -la"}));

    let started = wire(turn.map(&event(EventKind::ToolStarted {
        call_id: "call_1".into(),
        name: "shell".into(),
        arguments: r#"{"command":"ls -la"}"#.into(),
    })));
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["sessionUpdate"], "tool_call_update");
    assert_eq!(started[0]["status"], "in_progress");

    let done = wire(turn.map(&event(EventKind::ToolCompleted {
        call_id: "call_1".into(),
        name: "shell".into(),
        ok: false,
        output: "exit 2".into(),
        truncated: false,
        duration_ms: 3,
    })));
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0]["status"], "failed");
    assert_eq!(done[0]["content"][0]["type"], "content");
    assert_eq!(done[0]["content"][0]["content"]["text"], "exit 2");
}

#[test]
fn a_call_started_without_being_parsed_is_announced_in_progress() {
    let mut turn = TurnMapper::new();
    let started = wire(turn.map(&event(EventKind::ToolStarted {
        call_id: "c".into(),
        name: "read_file".into(),
        arguments: r#"{"path":"a.txt"}"#.into(),
    })));
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["sessionUpdate"], "tool_call");
    assert_eq!(started[0]["status"], "in_progress");
    assert_eq!(started[0]["kind"], "read");
}

#[test]
fn text_and_reasoning_stream_as_chunks_and_whole_reasoning_is_not_repeated() {
    let mut turn = TurnMapper::new();
    assert!(!turn.streamed_text());
    turn.map(&event(EventKind::ModelRequest {
        iteration: 1,
        model: "m".into(),
        messages: 1,
        tools: 0,
        stream: true,
    }));
    let thought = wire(turn.map(&event(EventKind::StreamDelta {
        delta: StreamDelta::Reasoning { text: "hmm".into() },
    })));
    assert_eq!(thought[0]["sessionUpdate"], "agent_thought_chunk");
    let text = wire(turn.map(&event(EventKind::StreamDelta {
        delta: StreamDelta::Text { text: "Hi".into() },
    })));
    assert_eq!(text[0]["sessionUpdate"], "agent_message_chunk");
    assert_eq!(text[0]["content"]["text"], "Hi");
    assert!(turn.streamed_text());
    let whole = turn.map(&event(EventKind::ModelReasoning(
        keel_core::ModelReasoning {
            iteration: 1,
            text: "hmm".into(),
        },
    )));
    assert!(whole.is_empty(), "streamed reasoning is not sent twice");
    let whole = wire(turn.map(&event(EventKind::ModelReasoning(
        keel_core::ModelReasoning {
            iteration: 2,
            text: "later".into(),
        },
    ))));
    assert_eq!(whole[0]["content"]["text"], "later");
}

fn parsed(call_id: &str, name: &str, arguments: Value) -> Event {
    event(EventKind::ToolCallParsed(ParsedToolCall {
        iteration: 1,
        index: 0,
        call_id: call_id.into(),
        name: name.into(),
        arguments: arguments.to_string(),
    }))
}

#[test]
fn the_todo_list_becomes_the_plan_as_the_loop_keeps_it() {
    let mut turn = TurnMapper::new();
    let added = wire(turn.map(&parsed(
        "t1",
        "todo",
        json!({"action": "add", "items": [
            {"text": "read the code", "status": "done"},
            {"text": "fix: the bug", "status": "in_progress"},
            {"text": "test"}
        ]}),
    )));
    let kinds: Vec<&str> = added
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tool_call", "tool_call_update", "plan"]);
    assert_eq!(added[1]["status"], "completed");
    let entries = added[2]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0]["content"], "read the code");
    assert_eq!(entries[0]["status"], "completed");
    assert_eq!(entries[1]["content"], "fix: the bug");
    assert_eq!(entries[1]["status"], "in_progress");
    assert_eq!(entries[2]["status"], "pending");
    // A later turn starts from the kept list; a bad call fails and changes no plan.
    let mut later = TurnMapper::with_todo(turn.todo.clone());
    let bad = wire(later.map(&parsed("t2", "todo", json!({"action": "fly"}))));
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert_eq!(bad[1]["status"], "failed");
    let updated = wire(later.map(&parsed(
        "t3",
        "todo",
        json!({"action": "update", "id": "3", "status": "done"}),
    )));
    assert_eq!(updated[2]["entries"][2]["status"], "completed");
    // Nothing left open for the step's end.
    assert!(later.map(&step()).is_empty());
}

fn step() -> Event {
    event(EventKind::StepCompleted(keel_core::StepSummary {
        iteration: 1,
        tools: vec![],
        usage: Default::default(),
    }))
}

#[test]
fn calls_the_loop_answers_are_closed_when_the_step_completes() {
    let mut turn = TurnMapper::new();
    turn.map(&parsed("c1", "clarify", json!({"question": "why?"})));
    turn.map(&parsed("c2", "read_file", json!({"path": "a"})));
    turn.map(&event(EventKind::ToolCompleted {
        call_id: "c2".into(),
        name: "read_file".into(),
        ok: true,
        output: "a".into(),
        truncated: false,
        duration_ms: 1,
    }));
    let closed = wire(turn.map(&step()));
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0]["toolCallId"], "c1");
    assert_eq!(closed[0]["status"], "completed");
}

#[test]
fn titles_and_kinds() {
    assert_eq!(
        title("read_file", &json!({"path": "src/a.rs"})),
        "read_file: src/a.rs"
    );
    assert_eq!(title("todo", &json!({"action": "add"})), "todo");
    let long = "x".repeat(200);
    assert!(title("shell", &json!({"command": long})).ends_with('…'));
    assert!(title("shell", &json!({"command": "a\nb"})).ends_with("a…"));
    assert_eq!(tool_kind("write_file"), ToolKind::Edit);
    assert_eq!(tool_kind("http_get"), ToolKind::Fetch);
    assert_eq!(tool_kind("session_search"), ToolKind::Search);
    assert_eq!(tool_kind("mcp_thing"), ToolKind::Other);
}

#[test]
fn another_sessions_events_are_not_sent() {
    #[derive(Default)]
    struct Collected(Mutex<Vec<(String, SessionUpdate)>>);
    impl UpdateOut for Collected {
        fn send(&self, session_id: &str, update: SessionUpdate) {
            self.0
                .lock()
                .unwrap()
                .push((session_id.to_string(), update));
        }
    }
    let out = Arc::new(Collected::default());
    let sink = UpdateSink::new("s", out.clone());
    let delta = EventKind::StreamDelta {
        delta: StreamDelta::Text { text: "x".into() },
    };
    let mut child = event(delta.clone());
    child.session_id = "sub-1-x".into();
    sink.emit(&child);
    assert!(out.0.lock().unwrap().is_empty());
    sink.emit(&event(delta));
    assert_eq!(out.0.lock().unwrap().len(), 1);
    assert!(sink.streamed_text());
    sink.begin_turn(TodoList::default());
    assert!(!sink.streamed_text());
}

#[test]
fn a_denied_call_fails_without_running() {
    let mut turn = TurnMapper::new();
    let denied = wire(turn.map(&event(EventKind::ApprovalDecided {
        call_id: "c".into(),
        decision: keel_core::ApprovalDecision::Deny,
    })));
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0]["status"], "failed");
    let approved = turn.map(&event(EventKind::ApprovalDecided {
        call_id: "c".into(),
        decision: keel_core::ApprovalDecision::ApproveOnce,
    }));
    assert!(approved.is_empty());
}
