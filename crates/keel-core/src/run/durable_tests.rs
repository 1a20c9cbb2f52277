//! Unit tests of a run's durability: boundaries, checkpoints and restores, the human's answers,
//! the journal, and the halts that refuse to guess.

use chrono::DateTime;
use serde_json::json;

use super::*;
use crate::agent_tools::ASK_HUMAN;
use crate::journal::{APPEND_RUN_JOURNAL_ENTRY, UPDATE_RUN_JOURNAL};
use crate::message::{Message, Role, ToolCall};
use crate::provider::{ChatResponse, StopReason, Usage};
use crate::run::{ModelCall, RunSettings};
use crate::tool::ToolSpec;

fn run() -> Run {
    let mut settings = RunSettings::new("p", "m");
    settings.system_prompt = Some("be careful".into());
    Run::new(
        "r1",
        "s1",
        settings,
        vec![ToolSpec::new(
            "append",
            "appends",
            json!({"type": "object"}),
        )],
        Run::history(vec![Message::user("earlier"), Message::assistant("ok")]),
        Message::user("append twice"),
        DateTime::from_timestamp(0, 0).unwrap(),
    )
}

fn calls(list: &[(&str, &str, serde_json::Value)]) -> ChatResponse {
    let calls = list
        .iter()
        .map(|(id, name, args)| ToolCall {
            id: (*id).into(),
            name: (*name).into(),
            arguments: args.to_string(),
        })
        .collect();
    ChatResponse {
        message: Message::assistant_with_calls("", calls),
        stop_reason: StopReason::ToolUse,
        usage: Usage::default(),
        model: "m".into(),
    }
}

fn ok(id: &str, content: &str) -> ToolResult {
    ToolResult {
        call_id: id.into(),
        ok: true,
        content: content.into(),
    }
}

/// What the store would hold after the run's boundaries: its messages with their seqs.
fn stored(run: &Run) -> Vec<StoredMessage> {
    run.messages()
        .iter()
        .enumerate()
        .map(|(i, message)| StoredMessage {
            seq: i as u64 + 1,
            run_id: Some(run.id().to_string()),
            created_at: DateTime::from_timestamp(0, 0).unwrap(),
            message: message.clone(),
        })
        .collect()
}

fn model_call(step: Step) -> ModelCall {
    match step {
        Step::CallModel(call) => call,
        other => panic!("expected a model call, got {other:?}"),
    }
}

#[test]
fn each_transition_names_its_boundary() {
    let mut run = run();
    run.start();
    assert_eq!(
        (run.boundary(), run.next_step()),
        (Boundary::Input, NextStep::CallModel)
    );
    run.on_model_result(Ok(calls(&[("a", "append", json!({}))])));
    assert_eq!(
        (run.boundary(), run.next_step()),
        (Boundary::LlmResponse, NextStep::RunTools)
    );
    run.on_tool_results(vec![ok("a", "done")]);
    assert_eq!(
        (run.boundary(), run.next_step()),
        (Boundary::ToolResult, NextStep::CallModel)
    );
    run.on_model_result(Ok(calls(&[(
        "j",
        UPDATE_RUN_JOURNAL,
        json!({"objective": "append twice"}),
    )])));
    assert_eq!(run.boundary(), Boundary::JournalUpdate);
    assert!(run.take_journal_change().is_some());
    assert!(run.take_journal_change().is_none(), "taken once");
    let answer = ChatResponse {
        message: Message::assistant("done"),
        stop_reason: StopReason::EndTurn,
        usage: Usage::default(),
        model: "m".into(),
    };
    run.on_model_result(Ok(answer));
    assert_eq!(
        (run.boundary(), run.next_step()),
        (Boundary::Final, NextStep::Finish)
    );
}

#[test]
fn a_checkpoint_holds_no_messages_and_restores_to_the_same_next_step() {
    let mut run = run();
    run.start();
    let calls = calls(&[
        ("a", "append", json!({"n": 1})),
        ("b", "append", json!({"n": 2})),
    ]);
    let first = run
        .checkpoint(1, DateTime::from_timestamp(8, 0).unwrap())
        .unwrap();
    let frame = first
        .frame
        .clone()
        .expect("the first checkpoint carries the frame");
    assert!(frame.contains("be careful") && frame.contains("\"append\""));
    let step = run.on_model_result(Ok(calls));
    run.mark_persisted();
    let mut checkpoint = run
        .checkpoint(2, DateTime::from_timestamp(9, 0).unwrap())
        .unwrap();
    assert_eq!(checkpoint.boundary, Boundary::LlmResponse);
    assert_eq!((checkpoint.message_cursor, checkpoint.persisted), (1, 4));
    assert_eq!(checkpoint.prompt_hash, prompt_hash(Some("be careful")));
    assert_eq!(checkpoint.frame, None, "the frame is written once");
    let state = &checkpoint.state;
    assert!(
        !state.contains("append twice"),
        "messages stay in the store: {state}"
    );
    assert!(
        !state.contains("be careful"),
        "settings stay in the frame: {state}"
    );
    assert!(
        state.len() < 2_000,
        "a checkpoint is small: {} bytes",
        state.len()
    );

    // A checkpoint written before frames existed holds the frame's fields in its state.
    let mut old = checkpoint.clone();
    let mut merged: serde_json::Value = serde_json::from_str(&old.state).unwrap();
    let frame_fields: serde_json::Value = serde_json::from_str(&frame).unwrap();
    for (key, value) in frame_fields.as_object().unwrap() {
        merged[key] = value.clone();
    }
    old.state = merged.to_string();
    let mut from_old = Run::restore(&old, stored(&run)).unwrap();
    assert_eq!(from_old.resume(), step);

    // The store fills in the latest frame.
    checkpoint.frame = Some(frame);
    let mut restored = Run::restore(&checkpoint, stored(&run)).unwrap();
    assert_eq!(restored.resume(), step, "the owed step comes back");
    assert_eq!(restored.messages(), run.messages());
    // Both go on identically.
    let results = vec![ok("a", "1"), ok("b", "2")];
    assert_eq!(
        model_call(restored.on_tool_results(results.clone())),
        model_call(run.on_tool_results(results))
    );
}

#[test]
fn a_restore_refuses_when_the_store_lost_messages() {
    let mut run = run();
    run.start();
    run.mark_persisted();
    let checkpoint = run
        .checkpoint(1, DateTime::from_timestamp(0, 0).unwrap())
        .unwrap();
    let mut messages = stored(&run);
    messages.pop();
    let error = Run::restore(&checkpoint, messages).unwrap_err();
    assert!(
        error.to_string().contains("holds 2 of the 3 messages"),
        "{error}"
    );
}

#[test]
fn ask_human_waits_for_the_answer_and_keeps_call_order() {
    let mut run = run();
    run.start();
    let step = run.on_model_result(Ok(calls(&[
        ("q", ASK_HUMAN, json!({"question": "Which file?"})),
        ("a", "append", json!({})),
    ])));
    let Step::RunTools(to_run) = step else {
        panic!("the other tools run first")
    };
    assert_eq!(to_run.len(), 1);
    assert_eq!(
        run.on_tool_results(vec![ok("a", "appended")]),
        Step::AskHuman("Which file?".into())
    );
    assert_eq!(run.state(), AgentState::WaitingOnHuman);
    assert_eq!(run.boundary(), Boundary::HumanPause);
    assert_eq!(run.question(), Some("Which file?"));

    // The pause survives a checkpoint.
    run.mark_persisted();
    let checkpoint = run
        .checkpoint(3, DateTime::from_timestamp(0, 0).unwrap())
        .unwrap();
    let mut restored = Run::restore(&checkpoint, stored(&run)).unwrap();
    assert_eq!(restored.resume(), Step::AskHuman("Which file?".into()));

    let call = model_call(restored.on_human_answer("notes.txt"));
    let results: Vec<(&str, &str)> = call
        .request
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| (m.tool_call_id.as_deref().unwrap(), m.content.as_str()))
        .collect();
    assert_eq!(
        results,
        [("q", "The human answered: notes.txt"), ("a", "appended")]
    );
    assert_eq!(restored.state(), AgentState::Running);
}

#[test]
fn an_approval_pause_survives_a_checkpoint_and_a_denial_answers_the_call() {
    use crate::approval::{ApprovalDecision, PendingApproval};
    let mut run = run();
    run.start();
    let Step::RunTools(to_run) = run.on_model_result(Ok(calls(&[
        ("a", "append", json!({"text": "x"})),
        ("b", "append", json!({"text": "y"})),
    ]))) else {
        panic!("the batch is owed")
    };
    assert_eq!(to_run.len(), 2);
    let pending = PendingApproval {
        call_id: "b".into(),
        tool: "append".into(),
        arguments: "{}".into(),
        reason: "why".into(),
        pattern: "*".into(),
    };
    assert_eq!(
        run.await_approval(pending.clone()),
        Step::AwaitApproval(pending.clone())
    );
    assert_eq!(run.state(), AgentState::WaitingOnHuman);
    assert_eq!(run.boundary(), Boundary::HumanPause);

    run.mark_persisted();
    let checkpoint = run
        .checkpoint(3, DateTime::from_timestamp(0, 0).unwrap())
        .unwrap();
    let mut restored = Run::restore(&checkpoint, stored(&run)).unwrap();
    assert_eq!(restored.resume(), Step::AwaitApproval(pending.clone()));
    assert_eq!(restored.pending_approval(), Some(&pending));

    // Denied: only the other call is left to run, and the denied one has its refusal.
    let Step::RunTools(left) = restored.on_approval(ApprovalDecision::Deny) else {
        panic!("the rest of the batch runs")
    };
    assert_eq!(
        left.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    assert!(restored.pending_approval().is_none());
    assert!(!restored.is_approved("b"));
    let call = model_call(restored.on_tool_results(vec![ok("a", "appended")]));
    let denied = call
        .request
        .messages
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("b"))
        .unwrap();
    assert!(
        denied.content.contains("was denied and not run"),
        "{}",
        denied.content
    );
}

#[test]
fn the_journal_reaches_every_request_as_a_digest_and_in_full() {
    let mut run = run();
    run.start();
    run.on_model_result(Ok(calls(&[
        (
            "j1",
            UPDATE_RUN_JOURNAL,
            json!({"objective": "Append twice", "handoff_next_action": "append again"}),
        ),
        (
            "j2",
            APPEND_RUN_JOURNAL_ENTRY,
            json!({"section": "verified_findings", "entry": "first append worked"}),
        ),
    ])));
    let call = model_call(run.resume());
    let messages = &call.request.messages;
    assert!(
        messages[0]
            .content
            .starts_with("be careful\n\nRun journal digest: Objective: Append twice")
    );
    let full = messages
        .iter()
        .find(|m| m.content.starts_with("Your run journal so far"))
        .unwrap();
    assert!(full.content.contains("- first append worked"));
    assert!(
        run.messages()
            .iter()
            .all(|m| !m.content.contains("Your run journal")),
        "never stored"
    );
    assert_eq!(
        run.prompt_hash(),
        prompt_hash(Some("be careful")),
        "the digest does not change the hash"
    );
}

#[test]
fn an_unsafe_resume_halts_and_keeps_the_batch_owed() {
    let mut run = run();
    run.start();
    run.on_model_result(Ok(calls(&[("a", "append", json!({}))])));
    let call = run.pending_calls()[0].clone();
    assert_eq!(run.halt_resume_unsafe(&call), Step::Finish);
    assert_eq!(run.state(), AgentState::WaitingOnHuman);
    assert_eq!(run.reason(), Some(ErrorReason::ResumeUnsafe));
    assert!(run.error().unwrap().contains("--unsafe-call"));
    assert!(
        run.drain_events()
            .iter()
            .any(|e| e.name() == "agent_run.resume_unsafe")
    );
    run.clear_halt(None);
    assert_eq!(
        run.boundary(),
        Boundary::Input,
        "the decision is the new input"
    );
    assert!(matches!(run.resume(), Step::RunTools(calls) if calls.len() == 1));
}

#[test]
fn accepting_a_new_prompt_writes_a_new_frame() {
    let mut run = run();
    run.start();
    let at = DateTime::from_timestamp(0, 0).unwrap();
    assert!(run.checkpoint(1, at).unwrap().frame.is_some());
    assert!(run.checkpoint(2, at).unwrap().frame.is_none());
    run.halt_prompt_drift();
    run.clear_halt(Some(("be bold".into(), prompt_hash(Some("be bold")))));
    assert_eq!(run.prompt_hash(), prompt_hash(Some("be bold")));
    let frame = run.checkpoint(3, at).unwrap().frame.expect("a new frame");
    assert!(frame.contains("be bold"), "{frame}");
}

#[test]
fn prompt_hashes_are_stable() {
    assert_eq!(prompt_hash(Some("abc")), prompt_hash(Some("abc")));
    assert_ne!(prompt_hash(Some("abc")), prompt_hash(Some("abd")));
    assert_eq!(prompt_hash(None), prompt_hash(Some("")));
    assert_eq!(prompt_hash(Some("")).len(), 16);
}

/// A checkpoint's state as the previous format wrote it (every field, the guard's thresholds
/// included), after `append_four_times`.
const STATE_WITH_EVERY_FIELD: &str = r#"{"id":"r1","session_id":"s1","first_seq":1,"next_seq":3,"persisted":2,"encoding":"cl100k_base","fixed_tokens":582,"context_start":0,"summary_index":null,"first_user":0,"ladder":{"recoveries":0,"last_r1":null,"last_r2":null,"overflow_retried":false},"pending_summary":null,"iteration":5,"iteration_limit":25,"state":"running","reason":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0},"cost":0.0,"model_used":"m","chain":[{"provider":"p","model":"m"}],"chain_index":0,"retries":0,"tool_choice":{"type":"auto"},"warnings":[],"next_tool_choice":null,"guard":{"config":{"window":6,"identical_calls":3,"pattern_calls":4,"repeated_batches":3,"repeated_texts":3},"recent":[{"name":"append","signature":10655889510611235751,"learned":true},{"name":"append","signature":14428017734814205079,"learned":false},{"name":"append","signature":11818989894267134028,"learned":false},{"name":"append","signature":12265509334834437323,"learned":false}],"seen_results":[5164123159059806109],"last_batch":16897080682308653953,"same_batches":1,"last_text":null,"same_texts":0,"level":0},"text_detection":null,"continued_text":"","max_tokens_recoveries":0,"soft_limit":"NotReached","budget_warned":false,"pending":[],"answered_by_loop":[],"next":"call_model","boundary":"tool_result","prompt_hash":"8ae0ecaffc390e64","journal":{"objective":"","current_state":"","verified_findings":[],"decisions":[],"artifacts":[],"open_questions":[],"blockers":[],"handoff_next_action":""},"journal_changed":false,"question":null,"user_id":null,"tool_calls":[{"id":"c0","name":"append","ok":true},{"id":"c1","name":"append","ok":true},{"id":"c2","name":"append","ok":true},{"id":"c3","name":"append","ok":true}],"final_text":null,"error":null,"started_at":"1970-01-01T00:00:00Z","rng":11388251236157067613}"#;

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
    let mut from_current = Run::restore(&current, stored(&run)).unwrap();
    let mut from_previous = Run::restore(&previous, stored(&run)).unwrap();
    assert_eq!(
        serde_json::to_string(&from_previous).unwrap(),
        serde_json::to_string(&from_current).unwrap()
    );
    assert_eq!(from_previous.tool_calls(), from_current.tool_calls());
    assert_eq!(from_previous.tool_calls().len(), 4);
    assert_eq!(from_previous.guard.level(), 0);
    assert_eq!(from_previous.resume(), from_current.resume());
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
    let mut from_current = Run::restore(&current, stored(&run)).unwrap();
    let mut from_listing = Run::restore(&listing, stored(&run)).unwrap();
    assert_eq!(
        serde_json::to_string(&from_listing).unwrap(),
        serde_json::to_string(&from_current).unwrap()
    );
    assert_eq!(from_listing.tool_calls(), from_current.tool_calls());
    assert_eq!(from_listing.tool_calls().len(), 4);
    assert_eq!(from_listing.resume(), from_current.resume());
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
fn a_restored_run_counts_huge_arguments_as_they_are_sent() {
    let mut run = run();
    run.start();
    let huge = "y ".repeat(100_000);
    run.on_model_result(Ok(calls(&[("a", "append", json!({ "text": huge }))])));
    run.mark_persisted();
    let checkpoint = run
        .checkpoint(1, DateTime::from_timestamp(9, 0).unwrap())
        .unwrap();
    assert!(run.context_tokens() < 20_000, "{}", run.context_tokens());
    let restored = Run::restore(&checkpoint, stored(&run)).unwrap();
    assert_eq!(restored.context_tokens(), run.context_tokens());
}

#[test]
fn clarify_pauses_with_its_choices_and_takes_a_choice_number() {
    use crate::clarify::CLARIFY;
    let mut run = run();
    run.start();
    let asked = json!({"question": "Which format?", "choices": ["CSV", "JSON"]});
    let step = run.on_model_result(Ok(calls(&[
        ("c", CLARIFY, asked),
        // One question per batch: a second one is refused, not asked.
        ("q", ASK_HUMAN, json!({"question": "And?"})),
        ("a", "append", json!({})),
    ])));
    let Step::RunTools(to_run) = step else {
        panic!("the other tools run first")
    };
    assert_eq!(to_run.len(), 1);
    let question = crate::human::Question {
        text: "Which format?".into(),
        choices: vec!["CSV".into(), "JSON".into()],
    };
    assert_eq!(
        run.on_tool_results(vec![ok("a", "appended")]),
        Step::AskHuman(question.clone())
    );
    assert_eq!(run.question_choices(), ["CSV", "JSON"]);

    // The choices survive a checkpoint.
    run.mark_persisted();
    let checkpoint = run
        .checkpoint(3, DateTime::from_timestamp(0, 0).unwrap())
        .unwrap();
    let mut restored = Run::restore(&checkpoint, stored(&run)).unwrap();
    assert_eq!(restored.resume(), Step::AskHuman(question));
    let call = model_call(restored.on_human_answer("2"));
    let results: Vec<(&str, &str)> = call
        .request
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| (m.tool_call_id.as_deref().unwrap(), m.content.as_str()))
        .collect();
    assert_eq!(results[0], ("c", "The human chose: JSON"));
    assert!(results[1].0 == "q" && results[1].1.contains("one question at a time"));
    assert_eq!(results[2], ("a", "appended"));
    assert!(restored.question_choices().is_empty());
}

#[test]
fn a_bad_clarify_call_is_answered_with_the_reason_and_asks_nothing() {
    use crate::clarify::CLARIFY;
    let mut run = run();
    run.start();
    let step = run.on_model_result(Ok(calls(&[(
        "c",
        CLARIFY,
        json!({"question": "Pick", "choices": ["a", "A"]}),
    )])));
    let call = model_call(step);
    let result = call
        .request
        .messages
        .iter()
        .find(|m| m.role == Role::Tool)
        .unwrap();
    assert!(result.content.contains("given twice"), "{}", result.content);
    assert_eq!(run.question(), None);
    assert!(
        run.tools()
            .iter()
            .any(|t| t.name == CLARIFY && t.interactive)
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
