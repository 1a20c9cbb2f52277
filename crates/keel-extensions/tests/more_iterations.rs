//! `request_more_iterations` on the run state machine (moved from keel-core's unit tests of the
//! guardrails; only its extension is registered).

use std::sync::Arc;

use chrono::DateTime;
use keel_core::extension::ExtensionSet;
use keel_core::message::{Message, Role, ToolCall};
use keel_core::provider::{ChatResponse, StopReason, Usage};
use keel_core::run_settings::ModelTarget;
use keel_core::{ModelCall, Run, RunSettings, Step, ToolSpec};
use keel_extensions::iterations::{MoreIterations, REQUEST_MORE_ITERATIONS};
use serde_json::json;

fn settings() -> RunSettings {
    let mut settings = RunSettings::new("primary", "m1");
    settings.fallbacks = vec![ModelTarget::new("backup", "m2")];
    settings.extensions = ExtensionSet::new(vec![Arc::new(MoreIterations)]);
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
fn request_more_iterations_is_answered_by_the_loop_and_raises_the_limit() {
    let mut s = settings();
    s.max_iterations = 2;
    s.iteration_cap = 15;
    let mut run = run(s);
    run.start();
    let ask = call(
        "x",
        REQUEST_MORE_ITERATIONS,
        json!({"reason": "three files left"}),
    );
    // No tools to run: the loop answers and calls the model again.
    let next = model_call(run.on_model_result(Ok(ask)));
    assert_eq!(run.iteration_limit(), 12);
    let answer = next.request.messages.last().unwrap();
    assert_eq!(answer.role, Role::Tool);
    assert!(answer.content.starts_with("Granted: 10 more"));
    let ask = call(
        "y",
        REQUEST_MORE_ITERATIONS,
        json!({"reason": "still more"}),
    );
    run.on_model_result(Ok(ask));
    assert_eq!(run.iteration_limit(), 15, "never beyond the cap");
    assert!(names(&mut run).contains(&"agent.iterations.extended"));
}
