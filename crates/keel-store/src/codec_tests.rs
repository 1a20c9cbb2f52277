//! Tests of the column codecs: timestamps, JSON columns and stored counts.

use super::*;
use chrono::TimeZone;
use keel_core::SeqRange;

#[test]
fn timestamps_are_fixed_width_lossless_and_sort_as_text() {
    let early = Utc.timestamp_opt(1_700_000_000, 5).unwrap();
    let late = Utc.timestamp_opt(1_700_000_000, 123_456_789).unwrap();
    let (a, b) = (timestamp(early), timestamp(late));
    assert_eq!(a, "2023-11-14T22:13:20.000000005Z");
    assert_eq!(a.len(), b.len());
    assert!(a < b);
    let place = Place::Table("t");
    assert_eq!(parse_timestamp(&a, "at", place).unwrap(), early);
    assert_eq!(parse_timestamp(&b, "at", place).unwrap(), late);
}

#[test]
fn bad_values_are_corrupt_and_say_where() {
    let err = parse_timestamp("yesterday", "created_at", Place::Run("r1")).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)));
    let text = err.to_string();
    assert!(
        text.contains("run `r1`") && text.contains("created_at"),
        "{text}"
    );

    let err = parse_role("robot", Place::Message("s1", 3)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("message 3 of session `s1`") && text.contains("robot"),
        "{text}"
    );
}

#[test]
fn default_parts_of_a_message_are_stored_as_null() {
    let columns = MessageColumns::encode(&Message::user("hi")).unwrap();
    assert_eq!(columns.role, "user");
    assert!(columns.tool_calls.is_none() && columns.reasoning.is_none());
    assert!(columns.meta.is_none() && columns.summary_last.is_none());
}

#[test]
fn a_summary_keeps_the_end_of_its_range_in_a_column() {
    let mut summary = Message::user("earlier turns, summarized");
    summary.meta.summary_of = Some(SeqRange { first: 2, last: 41 });
    let columns = MessageColumns::encode(&summary).unwrap();
    assert_eq!(columns.summary_last, Some(41));
    assert!(columns.meta.unwrap().contains(r#""last":41"#));

    summary.meta.summary_of = Some(SeqRange {
        first: 1,
        last: u64::MAX,
    });
    let err = MessageColumns::encode(&summary).err().unwrap();
    assert!(err.to_string().contains("summary_of.last"), "{err}");
}

#[test]
fn counters_beyond_i64_are_refused() {
    let mut run = RunRecord {
        id: "r".into(),
        session_id: "s".into(),
        state: AgentState::Running,
        reason: None,
        provider: "p".into(),
        model: "m".into(),
        model_used: None,
        iterations: u32::MAX,
        usage: Usage {
            input_tokens: 7,
            ..Usage::default()
        },
        final_text: None,
        error: None,
        started_at: Utc::now(),
        updated_at: Utc::now(),
        finished_at: None,
        cost: 0.0,
        heartbeat_at: None,
        cancel_requested_at: None,
        resume_available: false,
        launch: None,
        worker: None,
    };
    let counts = RunCounts::of(&run).unwrap();
    assert_eq!(
        (counts.iterations, counts.input_tokens),
        (u32::MAX as i64, 7)
    );
    run.usage.cache_write_tokens = u64::MAX;
    let err = RunCounts::of(&run).unwrap_err();
    assert!(err.to_string().contains("cache_write_tokens"), "{err}");
    run.usage.cache_write_tokens = 0;
    run.cost = f64::NAN;
    let err = RunCounts::of(&run).unwrap_err();
    assert!(err.to_string().contains("cost NaN"), "{err}");
}

#[test]
fn json_lines_writes_one_value_per_line_even_with_newlines_inside() {
    let values = [
        serde_json::json!({"output": "two\nlines"}),
        serde_json::json!("third"),
    ];
    let text = json_lines(&values, "a value").unwrap();
    let lines: Vec<serde_json::Value> = text
        .split('\n')
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines, values);
    assert_eq!(json_lines::<serde_json::Value>(&[], "a value").unwrap(), "");
}
