//! Tests of the callbacks' views of events and of the panic-catching sink.

use std::sync::{Arc, Mutex};

use super::*;
use keel_core::AgentState;

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
        delta: keel_core::StreamDelta::Text { text: "x".into() },
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
