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
