//! The run journal's tools and `clarify` on the run state machine: the boundaries they make, what
//! a checkpoint keeps of them, what the next run is shown (moved from keel-core's unit tests of a
//! run's durability; the standard extensions are registered).

use chrono::DateTime;
use keel_core::Boundary;
use keel_core::agent_tools::ASK_HUMAN;
use keel_core::extension::ExtensionSet;
use keel_core::message::{Message, Role, ToolCall};
use keel_core::provider::{ChatResponse, StopReason, Usage};
use keel_core::run::{NextStep, prompt_hash};
use keel_core::{ModelCall, Run, RunSettings, Step, StoredMessage, ToolResult, ToolSpec};
use keel_extensions::journal_tools::{APPEND_RUN_JOURNAL_ENTRY, UPDATE_RUN_JOURNAL};
use serde_json::json;

fn run() -> Run {
    let mut settings = RunSettings::new("p", "m");
    settings.system_prompt = Some("be careful".into());
    settings.extensions = ExtensionSet::new(keel_extensions::standard());
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
fn the_journal_goes_with_the_next_runs_message_and_never_changes_the_system_prompt() {
    let mut run = run();
    let first = model_call(run.start());
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
    // The journal changed during the run: the prefix it sends does not (the model has the
    // calls that changed it).
    assert_eq!(messages[0].content, "be careful");
    assert_eq!(
        messages[..2],
        first.request.messages[..2],
        "the system prompt and the run's message are sent as before"
    );
    assert!(
        messages
            .iter()
            .all(|m| !m.content.contains("Your run journal"))
    );
    // The next run of the session sends it in full with its message; the system prompt is
    // the same bytes.
    let next = Run::new(
        "r2",
        "s1",
        run.settings().clone(),
        Vec::new(),
        Vec::new(),
        Message::user("and now?"),
        DateTime::from_timestamp(9, 0).unwrap(),
    )
    .with_journal(run.journal().clone());
    let mut next = next;
    let call = model_call(next.start());
    let messages = &call.request.messages;
    assert_eq!(messages[0].content, "be careful");
    let last = &messages.last().unwrap().content;
    assert!(
        last.starts_with("<turn-context>\nYour run journal so far:\n\n# Run journal")
            && last.contains("- first append worked")
            && last.ends_with("</turn-context>\n\nand now?"),
        "{last}"
    );
    assert!(
        next.messages()
            .iter()
            .all(|m| !m.content.contains("Your run journal")),
        "never stored"
    );
    assert_eq!(
        run.prompt_hash(),
        prompt_hash(Some("be careful")),
        "the journal does not change the hash"
    );
}

#[test]
fn clarify_pauses_with_its_choices_and_takes_a_choice_number() {
    use keel_extensions::clarify::CLARIFY;
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
    let question = keel_core::human::Question {
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
    use keel_extensions::clarify::CLARIFY;
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
