//! Unit tests of what a checkpoint holds and how it reads back: the previous formats, the
//! restored loop guard, and a state that does not grow with the run's calls.

use chrono::DateTime;
use serde_json::json;

use super::*;

/// A checkpoint's state as the previous format wrote it (every field, the guard's thresholds
/// included), after `append_four_times`.
const STATE_WITH_EVERY_FIELD: &str = r#"{"id":"r1","session_id":"s1","first_seq":1,"next_seq":3,"persisted":2,"encoding":"cl100k_base","fixed_tokens":78,"context_start":0,"summary_index":null,"first_user":0,"ladder":{"recoveries":0,"last_r1":null,"last_r2":null,"overflow_retried":false},"pending_summary":null,"iteration":5,"iteration_limit":25,"state":"running","reason":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0},"cost":0.0,"model_used":"m","chain":[{"provider":"p","model":"m"}],"chain_index":0,"retries":0,"tool_choice":{"type":"auto"},"warnings":[],"next_tool_choice":null,"guard":{"config":{"window":6,"identical_calls":3,"pattern_calls":4,"repeated_batches":3,"repeated_texts":3},"recent":[{"name":"append","signature":10655889510611235751,"learned":true},{"name":"append","signature":14428017734814205079,"learned":false},{"name":"append","signature":11818989894267134028,"learned":false},{"name":"append","signature":12265509334834437323,"learned":false}],"seen_results":[5164123159059806109],"last_batch":16897080682308653953,"same_batches":1,"last_text":null,"same_texts":0,"level":0},"text_detection":null,"continued_text":"","max_tokens_recoveries":0,"soft_limit":"NotReached","budget_warned":false,"pending":[],"answered_by_loop":[],"next":"call_model","boundary":"tool_result","prompt_hash":"8ae0ecaffc390e64","journal":{"objective":"","current_state":"","verified_findings":[],"decisions":[],"artifacts":[],"open_questions":[],"blockers":[],"handoff_next_action":""},"journal_changed":false,"question":null,"user_id":null,"tool_calls":[{"id":"c0","name":"append","ok":true},{"id":"c1","name":"append","ok":true},{"id":"c2","name":"append","ok":true},{"id":"c3","name":"append","ok":true}],"final_text":null,"error":null,"started_at":"1970-01-01T00:00:00Z","rng":11388251236157067613}"#;

fn append_four_times() -> Run {
    let mut run = run();
    run.start();
    for i in 0..4 {
        let id = format!("c{i}");
        run.on_model_result(Ok(calls(&[(&id, "append", json!({"n": i}))])));
        run.on_tool_results(vec![ok(&id, "ok")]);
    }
    run
}

/// Restores `run` from `current` and from `other` (the same boundary in another format) and
/// checks both give the same state, calls and next step; returns the one from `other`.
fn restored_alike(run: &Run, current: &Checkpoint, other: &Checkpoint) -> Run {
    let mut from_current = Run::restore(current, stored(run)).unwrap();
    let mut from_other = Run::restore(other, stored(run)).unwrap();
    assert_eq!(
        serde_json::to_string(&from_other).unwrap(),
        serde_json::to_string(&from_current).unwrap()
    );
    assert_eq!(from_other.tool_calls(), from_current.tool_calls());
    assert_eq!(from_other.resume(), from_current.resume());
    from_other
}

#[test]
fn a_checkpoint_in_the_previous_format_restores_to_the_same_run() {
    let mut run = append_four_times();
    let now = DateTime::from_timestamp(8, 0).unwrap();
    let current = run.checkpoint(1, now).unwrap();
    assert!(
        current.state.len() < STATE_WITH_EVERY_FIELD.len() * 3 / 4,
        "defaults and empty fields are left out: {}",
        current.state
    );
    let previous = Checkpoint {
        state: STATE_WITH_EVERY_FIELD.to_string(),
        ..current.clone()
    };
    let from_previous = restored_alike(&run, &current, &previous);
    assert_eq!(from_previous.tool_calls().len(), 4);
    assert_eq!(from_previous.guard.level(), 0);
}

#[test]
fn the_state_leaves_out_what_the_checkpoints_columns_hold_and_a_restore_takes_it_from_them() {
    let mut run = append_four_times();
    let now = DateTime::from_timestamp(8, 0).unwrap();
    let checkpoint = run.checkpoint(1, now).unwrap();
    let state: serde_json::Value = serde_json::from_str(&checkpoint.state).unwrap();
    for key in [
        "id",
        "first_seq",
        "next_seq",
        "persisted",
        "iteration",
        "boundary",
        "prompt_hash",
    ] {
        assert!(state.get(key).is_none(), "`{key}` is in the state: {state}");
    }
    let restored = Run::restore(&checkpoint, stored(&run)).unwrap();
    assert_eq!(restored.id, run.id);
    assert_eq!(restored.first_seq, run.first_seq);
    assert_eq!(restored.iteration, run.iteration);
    assert_eq!(restored.boundary, run.boundary);
    assert_eq!(restored.prompt_hash, run.prompt_hash);
    assert_eq!(restored.persisted, run.messages.len());
    assert_eq!(
        restored.seq_of(restored.messages.len()),
        run.seq_of(run.messages.len()),
        "the next message gets the same seq"
    );
}

#[test]
fn checkpoints_list_no_calls_and_ones_that_did_restore_the_same() {
    let mut run = append_four_times();
    let now = DateTime::from_timestamp(8, 0).unwrap();
    let current = run.checkpoint(1, now).unwrap();
    assert!(current.completed_calls.is_empty(), "{current:?}");
    // Checkpoints written before 2026-11-25 listed every call so far.
    let listing = Checkpoint {
        completed_calls: vec!["c0".into(), "c1".into(), "c2".into(), "c3".into()],
        ..current.clone()
    };
    let from_listing = restored_alike(&run, &current, &listing);
    assert_eq!(from_listing.tool_calls().len(), 4);
}

#[test]
fn a_restored_loop_guard_has_the_runs_thresholds() {
    let mut settings = RunSettings::new("p", "m");
    settings.guard.repeated_batches = 2;
    let mut run = Run::new(
        "r2",
        "s1",
        settings,
        vec![ToolSpec::new(
            "append",
            "appends",
            json!({"type": "object"}),
        )],
        Vec::new(),
        Message::user("append"),
        DateTime::from_timestamp(0, 0).unwrap(),
    );
    run.start();
    let checkpoint = run
        .checkpoint(1, DateTime::from_timestamp(8, 0).unwrap())
        .unwrap();
    let mut restored = Run::restore(&checkpoint, stored(&run)).unwrap();
    for i in 0..2 {
        let id = format!("same{i}");
        restored.on_model_result(Ok(calls(&[(&id, "append", json!({"n": 9}))])));
        restored.on_tool_results(vec![ok(&id, "same")]);
    }
    assert_eq!(
        restored.guard.level(),
        1,
        "two equal batches are one too many"
    );
}

#[test]
fn checkpoints_do_not_grow_with_calls_and_a_restore_rebuilds_them_from_the_runs_own_results() {
    // The session's history holds another run's call and result: not this run's.
    let history = vec![
        Message::user("earlier"),
        Message::assistant_with_calls(
            "",
            vec![ToolCall {
                id: "x0".into(),
                name: "append".into(),
                arguments: "{}".into(),
            }],
        ),
        Message::tool_result("x0", "line 1"),
        Message::assistant("ok"),
    ];
    let mut settings = RunSettings::new("p", "m");
    settings.max_iterations = 100;
    let mut run = Run::new(
        "r1",
        "s1",
        settings,
        vec![ToolSpec::new(
            "append",
            "appends",
            json!({"type": "object"}),
        )],
        Run::history(history),
        Message::user("append forty times"),
        DateTime::from_timestamp(0, 0).unwrap(),
    );
    run.start();
    let now = DateTime::from_timestamp(8, 0).unwrap();
    let mut sizes = Vec::new();
    let mut frame = None;
    for i in 0..40u32 {
        let id = format!("c{i}");
        run.on_model_result(Ok(calls(&[(&id, "append", json!({"n": i}))])));
        let result = if i % 3 == 0 {
            ToolResult {
                call_id: id,
                ok: false,
                content: format!("Error: disk full {i}"),
            }
        } else {
            ok(&id, &format!("line {i}"))
        };
        run.on_tool_results(vec![result]);
        let checkpoint = run.checkpoint(i + 1, now).unwrap();
        frame = frame.or(checkpoint.frame);
        sizes.push(checkpoint.state.len());
    }
    // Only counters and the guard's bounded window change; no list of calls or results.
    assert!(sizes[39] <= sizes[9] + 16, "{sizes:?}");

    let mut stored = stored(&run);
    for message in &mut stored[..4] {
        message.run_id = Some("r0".into());
    }
    let checkpoint = Checkpoint {
        frame,
        ..run.checkpoint(41, now).unwrap()
    };
    let mut restored = Run::restore(&checkpoint, stored).unwrap();
    assert_eq!(restored.tool_calls(), run.tool_calls());
    assert_eq!(restored.tool_calls().len(), 40);
    assert!(!restored.tool_calls()[0].ok && restored.tool_calls()[1].ok);
    assert_eq!(restored.tool_calls()[1].arguments, json!({"n": 1}));
    assert_eq!(restored.tool_calls()[1].output, "line 1");
    // The guard remembers the run's successful results (another run's "line 1" was never
    // this run's, but this run saw it too), and not its failures.
    for (text, new) in [
        ("line 2", false),
        ("line 38", false),
        ("line 39", true),
        ("Error: disk full 3", true),
    ] {
        assert_eq!(restored.guard.learns(true, text), new, "{text}");
        assert_eq!(run.guard.learns(true, text), new, "{text}");
    }
    assert_eq!(restored.resume(), run.resume());
}

#[test]
fn runs_with_equal_tools_share_one_list_and_a_different_list_is_never_shared() {
    let with_tool = |name: &str| {
        Run::new(
            "r1",
            "s1",
            RunSettings::new("p", "m"),
            vec![ToolSpec::new(name, "a tool", json!({"type": "object"}))],
            Vec::new(),
            Message::user("go"),
            DateTime::from_timestamp(0, 0).unwrap(),
        )
    };
    // Other tests build runs on other threads at the same time and may take the last list
    // in between; sharing is an economy, so it needs to happen once in a few tries, while a
    // wrong share must never happen.
    let mut shared = false;
    for _ in 0..100 {
        let (a, b, other) = (with_tool("alpha"), with_tool("alpha"), with_tool("beta"));
        assert!(!Arc::ptr_eq(&a.tools, &other.tools));
        assert_eq!(a.tools[..], b.tools[..]);
        assert!(other.tools.iter().any(|t| t.name == "beta"));
        assert!(other.tools.iter().all(|t| t.name != "alpha"));
        shared |= Arc::ptr_eq(&a.tools, &b.tools);
    }
    assert!(
        shared,
        "two runs in a row with the same tools never shared their list"
    );
}

#[test]
fn a_restore_pairs_each_result_with_the_latest_call_before_it_and_keeps_orphans() {
    let mut run = Run::new(
        "r1",
        "s1",
        RunSettings::new("p", "m"),
        Vec::new(),
        Vec::new(),
        Message::user("go"),
        DateTime::from_timestamp(0, 0).unwrap(),
    );
    run.start();
    let checkpoint = run
        .checkpoint(1, DateTime::from_timestamp(8, 0).unwrap())
        .unwrap();
    let call = |n: u32| ToolCall {
        id: "x".into(),
        name: format!("tool{n}"),
        arguments: json!({ "n": n }).to_string(),
    };
    // Older data may repeat an id, and a store may hold a result whose call it lost.
    let mut messages = vec![Message::user("go")];
    for n in 1..=2 {
        messages.push(Message::assistant_with_calls("", vec![call(n)]));
        messages.push(Message::tool_result("x", format!("result {n}")));
    }
    messages.push(Message::tool_result("orphan", "nobody asked"));
    let stored: Vec<StoredMessage> = messages
        .into_iter()
        .enumerate()
        .map(|(i, message)| StoredMessage {
            seq: i as u64 + 1,
            run_id: Some("r1".into()),
            created_at: DateTime::from_timestamp(0, 0).unwrap(),
            message,
        })
        .collect();
    let checkpoint = Checkpoint {
        message_cursor: 1,
        persisted: stored.len() as u64,
        ..checkpoint
    };
    let restored = Run::restore(&checkpoint, stored).unwrap();
    let reports: Vec<(&str, &str, serde_json::Value, &str)> = restored
        .tool_calls()
        .iter()
        .map(|r| {
            (
                r.id.as_str(),
                r.name.as_str(),
                r.arguments.clone(),
                r.output.as_str(),
            )
        })
        .collect();
    assert_eq!(
        reports,
        [
            ("x", "tool1", json!({"n": 1}), "result 1"),
            ("x", "tool2", json!({"n": 2}), "result 2"),
            ("orphan", "", serde_json::Value::Null, "nobody asked"),
        ]
    );
}
