//! Unit tests of the run state machine: decisions only, no runtime.

use std::time::Duration;

use chrono::DateTime;
use serde_json::json;

use super::*;
use crate::message::Role;
use crate::provider::ChatResponse;
use crate::provider::StopReason;
use crate::provider_error::ProviderError;
use crate::provider_error::ProviderErrorKind;

fn settings(max_iterations: u32) -> RunSettings {
    let mut settings = RunSettings::new("mock", "m1");
    settings.max_iterations = max_iterations;
    settings.system_prompt = Some("be brief".into());
    settings
}

fn run_with(max_iterations: u32, history: Vec<Message>) -> Run {
    let tool = ToolSpec::new("read_file", "reads", json!({"type": "object"}));
    Run::new(
        "r1",
        "s1",
        settings(max_iterations),
        vec![tool],
        Run::history(history),
        Message::user("hello"),
        DateTime::from_timestamp(0, 0).unwrap(),
    )
}

fn answer(text: &str) -> ChatResponse {
    ChatResponse {
        message: Message::assistant(text),
        stop_reason: StopReason::EndTurn,
        usage: Usage {
            input_tokens: 10,
            output_tokens: 2,
            ..Usage::default()
        },
        model: "m1-2025".into(),
    }
}

fn calls(ids: &[&str]) -> ChatResponse {
    let calls = ids
        .iter()
        .map(|id| ToolCall {
            id: (*id).into(),
            name: "read_file".into(),
            arguments: format!(r#"{{"path":"{id}"}}"#),
        })
        .collect();
    ChatResponse {
        message: Message::assistant_with_calls("", calls),
        stop_reason: StopReason::ToolUse,
        usage: Usage {
            input_tokens: 5,
            output_tokens: 5,
            ..Usage::default()
        },
        model: "m1-2025".into(),
    }
}

fn ok(id: &str, content: &str) -> ToolResult {
    ToolResult {
        call_id: id.into(),
        ok: true,
        content: content.into(),
    }
}

#[test]
fn a_final_answer_completes_the_run() {
    let mut run = run_with(5, vec![]);
    run.start();
    assert_eq!(run.on_model_result(Ok(answer("done"))), Step::Finish);
    assert_eq!(run.state(), AgentState::Completed);
    assert_eq!(run.final_text(), Some("done"));
    assert_eq!(run.model_used(), Some("m1-2025"));
    assert_eq!(run.usage().total(), 12);
    let unpersisted = run.unpersisted();
    assert_eq!(unpersisted.len(), 2, "input and answer are both new");
    // The stored answer names the model that wrote it and its output tokens (seed 003).
    assert_eq!(unpersisted[1].meta.model.as_deref(), Some("m1-2025"));
    assert_eq!(unpersisted[1].meta.output_tokens, Some(2));
    assert_eq!(
        unpersisted[0].meta.model, None,
        "a person's message has none"
    );
    let record = run.record(DateTime::from_timestamp(5, 0).unwrap());
    assert_eq!(record.state, AgentState::Completed);
    assert!(record.finished_at.is_some());
}

#[test]
fn tool_results_go_back_in_call_order_whatever_order_they_arrive_in() {
    let mut run = run_with(5, vec![]);
    run.start();
    let Step::RunTools(to_run) = run.on_model_result(Ok(calls(&["a", "b", "c"]))) else {
        panic!("expected tools")
    };
    assert_eq!(to_run.len(), 3);
    assert_eq!(run.state(), AgentState::WaitingForTool);
    let step = run.on_tool_results(vec![ok("c", "C"), ok("a", "A"), ok("b", "B")]);
    assert!(matches!(step, Step::CallModel(_)));
    let tail: Vec<(&str, &str)> = run.messages()[2..]
        .iter()
        .map(|m| (m.tool_call_id.as_deref().unwrap(), m.content.as_str()))
        .collect();
    assert_eq!(tail, [("a", "A"), ("b", "B"), ("c", "C")]);
    assert_eq!(run.tool_calls()[0].arguments, json!({"path": "a"}));
    assert_eq!(run.tool_calls()[2].arguments, json!({"path": "c"}));
}

#[test]
fn a_request_shares_the_runs_messages_instead_of_copying_them() {
    let mut run = run_with(5, vec![Message::user("earlier"), Message::assistant("yes")]);
    run.start();
    run.on_model_result(Ok(calls(&["a"])));
    let Step::CallModel(call) = run.on_tool_results(vec![ok("a", "A")]) else {
        panic!("expected a model call")
    };
    // After the system message, every message of the request is the run's own, not a copy:
    // building a request costs what is new in it, not the history.
    let sent = &call.request.messages[1..];
    assert_eq!(sent.len(), run.messages().len());
    for (sent, own) in sent.iter().zip(run.messages()) {
        assert!(Arc::ptr_eq(sent, own), "copied: {sent:?}");
    }
}

#[test]
fn a_call_without_a_result_gets_an_error_result() {
    let mut run = run_with(5, vec![]);
    run.start();
    run.on_model_result(Ok(calls(&["a", "b"])));
    run.on_tool_results(vec![ok("a", "A")]);
    let last = run.messages().last().unwrap();
    assert_eq!(last.tool_call_id.as_deref(), Some("b"));
    assert!(last.content.contains("no result"));
    assert!(!run.tool_calls()[1].ok);
}

#[test]
fn the_iteration_limit_ends_the_run_as_max_steps_with_a_summary() {
    let mut run = run_with(2, vec![]);
    run.start();
    run.on_model_result(Ok(calls(&["a"])));
    assert!(matches!(
        run.on_tool_results(vec![ok("a", "A")]),
        Step::CallModel(_)
    ));
    run.on_model_result(Ok(calls(&["b"])));
    assert_eq!(run.on_tool_results(vec![ok("b", "B")]), Step::Finish);
    assert_eq!(run.state(), AgentState::MaxSteps);
    assert_eq!(run.iteration(), 2);
    let text = run.final_text().unwrap();
    assert!(
        text.contains("limit of 2 iterations") && text.contains("read_file ×2"),
        "{text}"
    );
    let note = run.messages().last().unwrap();
    assert_eq!(note.role, Role::Assistant);
    assert_eq!(note.meta.internal, Some(InternalReason::IterationLimit));
    assert!(
        run.drain_events()
            .iter()
            .any(|e| e.name() == "agent_run.failed")
    );
}

#[test]
fn a_model_error_that_outlasts_its_retries_ends_the_run_with_the_input_still_to_be_stored() {
    let mut run = run_with(5, vec![]);
    run.start();
    let error = || ProviderError::new(ProviderErrorKind::Network, "cannot reach http://x");
    for attempt in 1..=2 {
        let Step::CallModel(call) = run.on_model_result(Err(error())) else {
            panic!("a network error is retried")
        };
        assert!(call.wait > Duration::ZERO, "retry {attempt} waits");
        assert_eq!(run.iteration(), 1, "a retry is not a new iteration");
    }
    assert_eq!(run.on_model_result(Err(error())), Step::Finish);
    assert_eq!(run.state(), AgentState::Error);
    assert_eq!(run.reason(), Some(ErrorReason::ProviderFatal));
    assert!(run.error().unwrap().contains("cannot reach http://x"));
    assert_eq!(run.unpersisted().len(), 1);
    assert_eq!(run.unpersisted()[0].content, "hello");
}

#[test]
fn cancel_writes_nothing_more() {
    let mut run = run_with(5, vec![]);
    run.start();
    assert_eq!(run.cancel(), Step::Finish);
    assert_eq!(run.state(), AgentState::Cancelled);
    assert_eq!(run.messages().len(), 1);
    assert_eq!(run.cancel(), Step::Finish, "cancelling twice is harmless");
}

#[test]
fn persisted_prefix_moves_with_mark_persisted() {
    let mut run = run_with(5, vec![Message::user("old")]);
    run.start();
    run.mark_persisted();
    assert!(run.unpersisted().is_empty());
    run.on_model_result(Ok(answer("x")));
    assert_eq!(run.unpersisted().len(), 1);
}

#[test]
fn a_run_survives_serialization_mid_turn() {
    let mut run = run_with(5, vec![]);
    run.start();
    run.on_model_result(Ok(calls(&["a"])));
    let mut restored = checkpointed(&mut run);
    let step = restored.on_tool_results(vec![ok("a", "A")]);
    assert!(matches!(step, Step::CallModel(_)));
    assert_eq!(restored.iteration(), 2);
}

/// The run as a checkpoint and the store would bring it back in another process.
fn checkpointed(run: &mut Run) -> Run {
    run.mark_persisted();
    let checkpoint = run
        .checkpoint(1, DateTime::from_timestamp(0, 0).unwrap())
        .unwrap();
    let stored = run
        .messages()
        .iter()
        .enumerate()
        .map(|(i, message)| crate::store::StoredMessage {
            seq: i as u64 + 1,
            run_id: None,
            created_at: DateTime::from_timestamp(0, 0).unwrap(),
            message: Message::clone(message),
        })
        .collect();
    Run::restore(&checkpoint, stored).unwrap()
}

#[test]
fn the_started_event_reports_what_the_context_is_built_from() {
    let history = vec![
        Message::user("earlier question"),
        Message::assistant("an answer"),
    ];
    let mut run = run_with(5, history);
    run.start();
    let pieces = run
        .drain_events()
        .into_iter()
        .find_map(|event| match event {
            EventKind::RunStarted { context, .. } => Some(context),
            _ => None,
        })
        .expect("agent_run.started");
    assert!(pieces.system_prompt_tokens > 0, "{pieces:?}");
    assert!(pieces.tools_tokens > 0, "{pieces:?}");
    assert_eq!((pieces.facts_tokens, pieces.summary_tokens), (0, 0));
    assert_eq!(pieces.history_messages, 2, "{pieces:?}");
    assert!(pieces.history_tokens > pieces.message_tokens && pieces.message_tokens > 0);
    assert_eq!(
        pieces.total_tokens,
        pieces.system_prompt_tokens
            + pieces.tools_tokens
            + pieces.history_tokens
            + pieces.message_tokens,
        "{pieces:?}"
    );
    assert_eq!(pieces.total_tokens, run.context_tokens());
}
