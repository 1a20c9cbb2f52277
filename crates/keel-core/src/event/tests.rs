//! Tests of the event vocabulary: how an event serializes and reads back.

use super::*;

#[test]
fn serializes_flat_with_its_name() {
    let event = Event {
        ts: DateTime::from_timestamp(0, 0).unwrap(),
        run_id: "r".into(),
        session_id: "s".into(),
        kind: EventKind::StreamDelta {
            delta: StreamDelta::Text { text: "hi".into() },
        },
    };
    let json = serde_json::to_value(&event).unwrap();
    assert_eq!(json["event"], "agent.stream.delta");
    assert_eq!(json["kind"], "text");
    assert_eq!(json["text"], "hi");
    assert_eq!(json["run_id"], "r");
    let back: Event = serde_json::from_value(json).unwrap();
    assert_eq!(back, event);
    assert_eq!(event.kind.name(), "agent.stream.delta");
}

fn stamped(kind: EventKind) -> Event {
    Event {
        ts: DateTime::from_timestamp(0, 0).unwrap(),
        run_id: "r".into(),
        session_id: "s".into(),
        kind,
    }
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
    let json = serde_json::to_value(stamped(kind.clone())).unwrap();
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
    let json = serde_json::to_value(stamped(step.clone())).unwrap();
    assert_eq!(json["event"], "agent.step.completed");
    assert_eq!(serde_json::from_value::<Event>(json).unwrap().kind, step);
    assert!(step.is_durable());
}
