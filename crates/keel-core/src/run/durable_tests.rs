//! Unit tests of a run's durability: checkpoints and restores, the human's answers, and the
//! halts that refuse to guess (with the journal's tools and `clarify`: keel-extensions'
//! `run_durability` tests).

use chrono::DateTime;
use serde_json::json;

use super::*;
use crate::agent_tools::ASK_HUMAN;
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
            message: Message::clone(message),
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

#[path = "durable_format_tests.rs"]
mod format;
