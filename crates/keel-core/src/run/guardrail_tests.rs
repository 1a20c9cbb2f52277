//! Unit tests of the run's recovery and guardrail decisions: retries, fallbacks, the loop
//! guard's ladder, max-tokens recovery, the iteration budget, token and cost budgets, and time
//! limits. Decisions only; no runtime.

use std::time::Duration;

use chrono::DateTime;
use serde_json::json;

use super::*;
use crate::budget::Budgets;
use crate::provider::{ChatResponse, StopReason};
use crate::provider_error::ProviderError;
use crate::provider_error::ProviderErrorKind;
use crate::run_settings::ModelTarget;

fn settings() -> RunSettings {
    let mut settings = RunSettings::new("primary", "m1");
    settings.fallbacks = vec![ModelTarget::new("backup", "m2")];
    settings
}

fn run(settings: RunSettings) -> Run {
    let tools = vec![ToolSpec::new(
        "search",
        "searches",
        json!({"type": "object"}),
    )];
    Run::new(
        "run-1",
        "s1",
        settings,
        tools,
        Vec::new(),
        Message::user("find it"),
        DateTime::from_timestamp(0, 0).unwrap(),
    )
}

fn answer(text: &str, stop: StopReason) -> ChatResponse {
    ChatResponse {
        message: Message::assistant(text),
        stop_reason: stop,
        usage: Usage {
            input_tokens: 100,
            output_tokens: 10,
            ..Usage::default()
        },
        model: "m1".into(),
    }
}

fn call(id: &str, name: &str, args: serde_json::Value) -> ChatResponse {
    let calls = vec![ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.to_string(),
    }];
    ChatResponse {
        message: Message::assistant_with_calls("", calls),
        stop_reason: StopReason::ToolUse,
        usage: Usage {
            input_tokens: 100,
            output_tokens: 10,
            ..Usage::default()
        },
        model: "m1".into(),
    }
}

fn result(id: &str, content: &str) -> Vec<ToolResult> {
    vec![ToolResult {
        call_id: id.into(),
        ok: true,
        content: content.into(),
    }]
}

fn model_call(step: Step) -> ModelCall {
    match step {
        Step::CallModel(call) => call,
        other => panic!("expected a model call, got {other:?}"),
    }
}

fn names(run: &mut Run) -> Vec<&'static str> {
    run.drain_events().iter().map(|e| e.name()).collect()
}

#[test]
fn a_rate_limit_waits_as_asked_and_the_retry_succeeds() {
    let mut run = run(settings());
    run.start();
    let limited = ProviderError::new(ProviderErrorKind::RateLimit, "slow down")
        .with_status(429)
        .with_retry_after(Duration::from_secs(7));
    let retry = model_call(run.on_model_result(Err(limited)));
    assert_eq!(retry.wait, Duration::from_secs(7));
    assert_eq!(
        (retry.provider.as_str(), retry.request.model.as_str()),
        ("primary", "m1")
    );
    assert_eq!(run.iteration(), 1);
    assert!(names(&mut run).contains(&"agent.provider.retry"));
    assert_eq!(
        run.on_model_result(Ok(answer("done", StopReason::EndTurn))),
        Step::Finish
    );
    assert_eq!(run.state(), AgentState::Completed);
}

#[test]
fn a_missing_model_falls_back_at_once_to_the_next_in_the_chain() {
    let mut run = run(settings());
    run.start();
    let missing = ProviderError::new(ProviderErrorKind::ModelNotFound, "no m1").with_status(404);
    let next = model_call(run.on_model_result(Err(missing)));
    assert_eq!(
        (next.provider.as_str(), next.request.model.as_str()),
        ("backup", "m2")
    );
    assert_eq!(next.wait, Duration::ZERO);
    let events = run.drain_events();
    let fallback = events
        .iter()
        .find_map(|e| match e {
            EventKind::ProviderFallback { from, to, kind, .. } => Some((from, to, *kind)),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        fallback,
        (
            &"primary:m1".to_string(),
            &"backup:m2".to_string(),
            ProviderErrorKind::ModelNotFound
        )
    );
}

#[test]
fn repeated_server_errors_exhaust_retries_then_fall_back_then_fail() {
    let mut run = run(settings());
    run.start();
    let server = || ProviderError::new(ProviderErrorKind::Server, "boom").with_status(500);
    let models: Vec<String> = (0..6)
        .map_while(|_| match run.on_model_result(Err(server())) {
            Step::CallModel(call) => Some(call.request.model),
            _ => None,
        })
        .collect();
    // Two retries of m1, then m2 and its two retries; the sixth failure ends the run.
    assert_eq!(models, ["m1", "m1", "m2", "m2", "m2"]);
    assert_eq!(run.state(), AgentState::Error);
    assert_eq!(run.reason(), Some(ErrorReason::ProviderFatal));
}

#[test]
fn auth_errors_stop_at_once_and_say_what_to_fix() {
    let mut run = run(settings());
    run.start();
    let auth = ProviderError::new(ProviderErrorKind::Auth, "invalid x-api-key").with_status(401);
    assert_eq!(run.on_model_result(Err(auth)), Step::Finish);
    assert_eq!(run.state(), AgentState::Error);
    assert!(
        run.error().unwrap().contains("API key"),
        "{:?}",
        run.error()
    );
}

#[test]
fn a_model_calling_the_same_tool_forever_is_nudged_directed_then_stopped_as_stuck() {
    let mut run = run(settings());
    let mut step = run.start();
    let mut iterations = 0;
    let mut choices = Vec::new();
    while let Step::CallModel(call) = step {
        iterations += 1;
        choices.push(call.request.tool_choice.clone());
        assert!(iterations < 10, "the guard must stop the loop");
        let id = format!("c{iterations}");
        match run.on_model_result(Ok(call_result(&id))) {
            Step::RunTools(_) => step = run.on_tool_results(result(&id, "same")),
            other => step = other,
        }
    }
    assert_eq!(run.state(), AgentState::Error);
    assert_eq!(run.reason(), Some(ErrorReason::Stuck));
    // Third identical call: nudge; fourth: directive (no tools on the next call); fifth: stuck.
    assert_eq!(iterations, 5);
    assert_eq!(choices[3], ToolChoice::Auto);
    assert_eq!(choices[4], ToolChoice::None, "the directive forbids tools");
    let nudges = run
        .messages()
        .iter()
        .filter(|m| m.meta.internal == Some(InternalReason::LoopNudge))
        .count();
    assert_eq!(nudges, 2);
    let events = run.drain_events();
    let levels: Vec<u8> = events
        .iter()
        .filter_map(|e| match e {
            EventKind::LoopDetected { level, .. } => Some(*level),
            _ => None,
        })
        .collect();
    assert_eq!(levels, [1, 2, 3]);
}

fn call_result(id: &str) -> ChatResponse {
    call(id, "search", json!({"q": "the same thing"}))
}

#[test]
fn answers_cut_at_max_tokens_are_continued_and_joined() {
    let mut run = run(settings());
    run.start();
    let next = model_call(run.on_model_result(Ok(answer("The first ", StopReason::MaxTokens))));
    let last = next.request.messages.last().unwrap();
    assert_eq!(last.content, CONTINUE_PROMPT);
    assert_eq!(last.meta.internal, Some(InternalReason::MaxTokensRecovery));
    run.on_model_result(Ok(answer("part, the second ", StopReason::MaxTokens)));
    run.on_model_result(Ok(answer("part.", StopReason::EndTurn)));
    assert_eq!(run.state(), AgentState::Completed);
    assert_eq!(run.final_text(), Some("The first part, the second part."));
    assert_eq!(
        names(&mut run)
            .iter()
            .filter(|n| **n == "agent.max_tokens.recovery")
            .count(),
        2
    );
}

#[test]
fn after_its_recoveries_a_cut_answer_is_the_end_of_the_turn() {
    let mut s = settings();
    s.max_tokens_recoveries = 1;
    let mut run = run(s);
    run.start();
    run.on_model_result(Ok(answer("a", StopReason::MaxTokens)));
    assert_eq!(
        run.on_model_result(Ok(answer("b", StopReason::MaxTokens))),
        Step::Finish
    );
    assert_eq!(run.state(), AgentState::Completed);
    assert_eq!(run.final_text(), Some("ab"));
}

#[test]
fn a_token_budget_stops_a_run_that_keeps_calling_tools() {
    let mut s = settings();
    s.budgets = Budgets {
        token_budget: Some(250),
        reserve_tokens: 100,
        ..Budgets::default()
    };
    let mut run = run(s);
    run.start();
    run.on_model_result(Ok(call("a", "search", json!({"q": 1}))));
    // 110 of 250 used: 140 left is above the reserve.
    let next = model_call(run.on_tool_results(result("a", "x")));
    assert!(
        next.request
            .messages
            .iter()
            .all(|m| m.meta.internal != Some(InternalReason::Warning))
    );
    run.on_model_result(Ok(call("b", "search", json!({"q": 2}))));
    // 220 used: 30 left is within the reserve, so the next request carries a warning layer
    // that the transcript does not.
    let next = model_call(run.on_tool_results(result("b", "y")));
    let warning = next.request.messages.last().unwrap();
    assert!(
        warning.content.contains("Budget notice"),
        "{}",
        warning.content
    );
    assert!(
        run.messages()
            .iter()
            .all(|m| m.meta.internal != Some(InternalReason::Warning))
    );
    assert!(names(&mut run).contains(&"agent.budget.near"));
    assert_eq!(
        run.on_model_result(Ok(call("c", "search", json!({"q": 3})))),
        Step::Finish
    );
    assert_eq!(run.state(), AgentState::BudgetExceeded);
    assert!(run.error().unwrap().contains("token budget of 250"));
}

#[test]
fn a_cost_limit_counts_each_model_at_its_price() {
    let mut s = settings();
    s.model = "gpt-4o".into();
    s.budgets = Budgets {
        cost_limit: Some(0.0001),
        ..Budgets::default()
    };
    let mut run = run(s);
    run.start();
    let mut expensive = call("a", "search", json!({"q": 1}));
    expensive.model = "gpt-4o-2024-08-06".into();
    assert_eq!(run.on_model_result(Ok(expensive)), Step::Finish);
    assert_eq!(run.state(), AgentState::BudgetExceeded);
    assert!((run.cost() - 0.00035).abs() < 1e-9, "{}", run.cost());
}

#[test]
fn the_soft_limit_gives_one_summary_turn_without_tools() {
    let mut run = run(settings());
    run.start();
    run.on_model_result(Ok(call("a", "search", json!({"q": 1}))));
    run.on_soft_limit();
    let last = model_call(run.on_tool_results(result("a", "x")));
    assert_eq!(last.request.tool_choice, ToolChoice::None);
    assert_eq!(
        last.request.messages.last().unwrap().content,
        SUMMARIZE_PROMPT
    );
    // Whatever the model asks for, the summary ends the run.
    let mut summary = call("b", "search", json!({"q": 2}));
    summary.message.content = "I searched once; nothing is left but the write-up.".into();
    assert_eq!(run.on_model_result(Ok(summary)), Step::Finish);
    assert_eq!(run.state(), AgentState::TimedOut);
    assert_eq!(
        run.final_text(),
        Some("I searched once; nothing is left but the write-up.")
    );
    assert!(names(&mut run).contains(&"agent.exhaustion.soft_limit"));
}

#[test]
fn the_hard_limit_ends_the_run_as_timed_out() {
    let mut run = run(settings());
    run.start();
    assert_eq!(run.on_hard_limit(Duration::from_secs(20)), Step::Finish);
    assert_eq!(run.state(), AgentState::TimedOut);
    assert!(run.error().unwrap().contains("20 s"));
}

#[test]
fn guardrail_counters_survive_a_checkpoint() {
    let mut run = run(settings());
    run.start();
    for id in ["a", "b"] {
        run.on_model_result(Ok(call_result(id)));
        run.on_tool_results(result(id, "same"));
    }
    let mut restored = checkpointed(&mut run);
    restored.on_model_result(Ok(call_result("c")));
    restored.on_tool_results(result("c", "same"));
    // The third identical call after the restore is still the third.
    assert!(names(&mut restored).contains(&"agent.loop.detected"));
}

#[test]
fn tool_calls_made_after_the_directive_are_refused_not_run() {
    let mut run = run(settings());
    let mut step = run.start();
    let mut ran = Vec::new();
    for n in 1..=5 {
        let Step::CallModel(call) = step else {
            panic!("expected a model call")
        };
        let forbidden = call.request.tool_choice == ToolChoice::None;
        let id = format!("c{n}");
        step = match run.on_model_result(Ok(call_result(&id))) {
            Step::RunTools(calls) => {
                assert!(
                    !forbidden,
                    "a call made against tool_choice none must not run"
                );
                ran.push(calls[0].id.clone());
                run.on_tool_results(result(&id, "same"))
            }
            other => other,
        };
    }
    // The third call drew a nudge, the fourth a directive; the fifth came against it.
    assert_eq!(ran, ["c1", "c2", "c3", "c4"]);
    let refusal = run
        .messages()
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("c5"))
        .unwrap();
    assert!(
        refusal.content.contains("not allowed on this turn"),
        "{}",
        refusal.content
    );
    assert_eq!(step, Step::Finish);
    assert_eq!(run.reason(), Some(ErrorReason::Stuck));
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
