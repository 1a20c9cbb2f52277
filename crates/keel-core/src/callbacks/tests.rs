use std::sync::{Arc, Mutex};

use super::*;
use crate::state::AgentState;

fn event(kind: EventKind) -> Event {
    Event {
        ts: chrono::DateTime::from_timestamp(0, 0).unwrap(),
        run_id: "r".into(),
        session_id: "s".into(),
        kind,
    }
}

fn change(status: RunStatus, previous: Option<RunStatus>, iteration: u32) -> StatusChange {
    StatusChange {
        status,
        previous,
        iteration,
        state: AgentState::Running,
    }
}

#[test]
fn thinking_starts_with_a_model_call_and_stops_when_the_run_moves_on() {
    use RunStatus::{Executing, Finished};
    const THINKING: RunStatus = RunStatus::Thinking;
    let started = Some(Thinking::Started { iteration: 2 });
    assert_eq!(Thinking::of(&change(THINKING, None, 2)), [None, started]);
    assert_eq!(
        Thinking::of(&change(Executing, Some(THINKING), 2)),
        [Some(Thinking::Stopped), None]
    );
    // A continuation: the spell of one call ends, the next begins.
    assert_eq!(
        Thinking::of(&change(THINKING, Some(THINKING), 2)),
        [Some(Thinking::Stopped), started]
    );
    assert_eq!(
        Thinking::of(&change(Finished, Some(Executing), 2)),
        [None, None]
    );
}

#[test]
fn tool_progress_reads_the_tool_events_and_nothing_else() {
    let started = EventKind::ToolStarted {
        call_id: "c1".into(),
        name: "echo".into(),
        arguments: "{}".into(),
    };
    assert_eq!(
        ToolProgress::of(&started),
        Some(ToolProgress::Started {
            call_id: "c1",
            name: "echo",
            arguments: "{}"
        })
    );
    let delta = EventKind::StreamDelta {
        delta: crate::provider::StreamDelta::Text { text: "x".into() },
    };
    assert_eq!(ToolProgress::of(&delta), None);
}

#[test]
fn a_panicking_handler_is_caught_and_called_again() {
    let calls = Arc::new(Mutex::new(0));
    let seen = calls.clone();
    let sink = Callback::new("on_test", move |_: &EventKind| {
        *seen.lock().unwrap() += 1;
        panic!("handler bug");
    });
    let kind = EventKind::StatusChanged(change(RunStatus::Thinking, None, 1));
    sink.emit(&event(kind.clone()));
    sink.emit(&event(kind));
    assert_eq!(*calls.lock().unwrap(), 2);
}

#[test]
fn live_events_round_trip_flat_with_their_names() {
    let kind = EventKind::ToolCallParsed(ParsedToolCall {
        iteration: 1,
        index: 0,
        call_id: "c1".into(),
        name: "echo".into(),
        arguments: r#"{"text":"hi"}"#.into(),
    });
    let json = serde_json::to_value(event(kind.clone())).unwrap();
    assert_eq!(json["event"], "agent.tool_call.parsed");
    assert_eq!(json["name"], "echo");
    assert_eq!(json["run_id"], "r");
    let back: Event = serde_json::from_value(json).unwrap();
    assert_eq!(back.kind, kind);
    assert!(!kind.is_durable());

    let step = EventKind::StepCompleted(StepSummary {
        iteration: 1,
        tools: vec!["echo".into()],
        usage: Default::default(),
    });
    let json = serde_json::to_value(event(step.clone())).unwrap();
    assert_eq!(json["event"], "agent.step.completed");
    assert_eq!(serde_json::from_value::<Event>(json).unwrap().kind, step);
    assert!(step.is_durable());
}
