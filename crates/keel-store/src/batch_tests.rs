//! Tests of [`super::plan`]: how a write is numbered, split and sized.

use super::*;
use std::collections::BTreeSet;

/// Every `$n` of a text.
fn placeholders(sql: &str) -> BTreeSet<usize> {
    sql.split('$')
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// Each batch uses only parameters it binds, and every one it binds but the shared `$1`…`$5`.
fn assert_numbered_without_gaps(batches: &[Batch]) {
    for batch in batches {
        let used = placeholders(&batch.text());
        let bound: BTreeSet<usize> = (1..=batch.params()).collect();
        assert!(used.is_subset(&bound), "{}", batch.text());
        let unused: Vec<usize> = bound.difference(&used).copied().collect();
        assert!(
            unused.iter().all(|n| *n <= 5),
            "{unused:?}: {}",
            batch.text()
        );
    }
}

/// A running run `r` of session `s`.
pub(crate) fn run() -> keel_core::RunRecord {
    let now = chrono::Utc::now();
    keel_core::RunRecord {
        id: "r".into(),
        session_id: "s".into(),
        state: keel_core::AgentState::Running,
        reason: None,
        provider: "p".into(),
        model: "m".into(),
        model_used: None,
        iterations: 0,
        usage: keel_core::Usage::default(),
        final_text: None,
        error: None,
        started_at: now,
        updated_at: now,
        finished_at: None,
        cost: 0.0,
        heartbeat_at: None,
        cancel_requested_at: None,
        resume_available: false,
        launch: None,
        worker: None,
    }
}

#[test]
fn parameters_are_numbered_without_gaps_or_overlap() {
    let run = run();
    let messages = [Message::user("a"), Message::assistant("b")];
    let commit = Commit::new(&run, &messages);
    let batches = plan("s", Some("r"), &messages, Some(&commit)).unwrap();
    assert_eq!(batches.len(), 1);
    assert_numbered_without_gaps(&batches);
    let sql = batches[0].text();
    assert!(sql.contains("- $4 + 1, $5, $6, $7, $8, $9, $10, $11, $12, $2)"));
    assert!(sql.contains("- $4 + 2, $5, $13, $14, $15, $16, $17, $18, $19, $2)"));
    assert!(sql.contains("VALUES ($5, $1, $20, "), "{sql}");
    assert!(sql.contains("SET state = $20 WHERE id = $5 AND state <> $20"));
}

#[test]
fn an_empty_write_only_ensures_the_session() {
    let batches = plan("s", None, &[], None).unwrap();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].text(), ENSURE_SESSION);
    let run = run();
    let batches = plan("s", Some("r"), &[], Some(&Commit::new(&run, &[]))).unwrap();
    let sql = batches[0].text();
    assert!(sql.starts_with(ENSURE_SESSION) && sql.contains("VALUES ($5, $1, $6, "));
    assert!(!sql.contains("INSERT INTO messages"));
    assert_numbered_without_gaps(&batches);
}

#[test]
fn long_writes_split_into_batches_within_sqlite_parameter_limits() {
    let messages: Vec<Message> = (0..ROWS_PER_QUERY * 2 + 1)
        .map(|i| Message::assistant(i.to_string()))
        .collect();
    let run = run();
    let commit = Commit::new(&run, &messages);
    let batches = plan("s", Some("r"), &messages, Some(&commit)).unwrap();
    assert_eq!(batches.len(), 3);
    assert_numbered_without_gaps(&batches);
    let full = batches[0].params();
    assert_eq!(full, 5 + ROWS_PER_QUERY * MESSAGE_PARAMS);
    assert!(batches[2].text().contains(CANCEL_REQUESTED));
    assert!(
        batches
            .iter()
            .all(|batch| batch.params() <= PARAMS_PER_BATCH)
    );
    // Each batch that stores the run's messages checks the lane fence first.
    for batch in &batches {
        assert!(batch.text().starts_with(LANE_FENCE));
    }
}

#[test]
fn only_a_runs_messages_are_fenced() {
    let messages = [Message::user("hi")];
    let unfenced = plan("s", None, &messages, None).unwrap();
    assert!(!unfenced[0].text().contains("session_lanes"));
    let run = run();
    let bookkeeping = plan("s", Some("r"), &[], Some(&Commit::new(&run, &[]))).unwrap();
    assert!(!bookkeeping[0].text().contains(LANE_FENCE));
    let fenced = plan("s", Some("r"), &messages, None).unwrap();
    assert_eq!(fenced[0].text().split(";\n").next(), Some(LANE_FENCE));
}

/// A model call's boundary as `keel bench` commits it: the answer, the run, a checkpoint, a
/// tool call's envelope row, three events and the call's charge.
#[test]
fn a_typical_boundary_is_planned_in_the_room_its_batch_takes_at_once() {
    use keel_core::token_log::TokenCharge;
    use keel_core::{Boundary, Checkpoint, Event, EventKind, StopReason, ToolCallRecord, Usage};

    let run = run();
    let now = chrono::Utc::now();
    let checkpoint = Checkpoint {
        run_id: "r".into(),
        seq: 2,
        boundary: Boundary::LlmResponse,
        iteration: 1,
        message_cursor: 1,
        persisted: 2,
        prompt_hash: "sha256:9f86d081884c7d65".into(),
        completed_calls: Vec::new(),
        state: "{\"iteration_limit\":6}".repeat(40),
        frame: None,
        created_at: now,
    };
    let call = ToolCallRecord {
        run_id: "r".into(),
        call_id: "call_0_0".into(),
        name: "lookup".into(),
        arguments: "{\"item\":\"item-1\"}".into(),
        idempotent: false,
        started_at: now,
        completed_at: None,
        ok: None,
        output: None,
    };
    let event = |kind| Event {
        ts: now,
        run_id: "r".into(),
        session_id: "s".into(),
        kind,
    };
    let events = [
        event(EventKind::ModelResponse {
            iteration: 1,
            model: "m".into(),
            stop_reason: StopReason::ToolUse,
            tool_calls: 1,
            usage: Usage::default(),
            latency_ms: 200,
        }),
        event(EventKind::ToolStarted {
            call_id: "call_0_0".into(),
            name: "lookup".into(),
            arguments: "{\"item\":\"item-1\"}".into(),
        }),
        event(EventKind::ToolStarted {
            call_id: "call_0_1".into(),
            name: "lookup".into(),
            arguments: "{\"item\":\"item-2\"}".into(),
        }),
    ];
    let charge = TokenCharge {
        user_id: Some("ada".into()),
        model: "m".into(),
        usage: Usage::default(),
        cost: 0.01,
        at: now,
    };
    let messages = [Message::assistant("Looking item-1 up.")];
    let commit = Commit {
        checkpoint: Some(&checkpoint),
        tool_calls: std::slice::from_ref(&call),
        events: &events,
        charges: std::slice::from_ref(&charge),
        ..Commit::new(&run, &messages)
    };
    let batches = plan("s", Some("r"), &messages, Some(&commit)).unwrap();
    assert_eq!(batches.len(), 1);
    let batch = &batches[0];
    assert!(
        batch.text().contains("INSERT INTO token_log"),
        "the whole boundary"
    );
    // Nothing grew: the text and the parameters fit the room taken when the batch was made.
    assert_eq!(
        batch.sql.capacity(),
        SESSION_TEXT + MESSAGE_TEXT + BOUNDARY_TEXT
    );
    assert_eq!(batch.args.capacity(), 5 + MESSAGE_PARAMS + BOUNDARY_PARAMS);
}
