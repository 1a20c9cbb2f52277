//! The tools a run offers: the registry's, then the ones the loop answers itself, in the order
//! of the standard extensions (moved from keel-core's unit tests of the run).

use std::time::Duration;

use chrono::DateTime;
use keel_core::extension::ExtensionSet;
use keel_core::message::{Message, Role};
use keel_core::{Run, RunSettings, Step, ToolSpec};
use serde_json::json;

fn settings(max_iterations: u32) -> RunSettings {
    let mut settings = RunSettings::new("mock", "m1");
    settings.max_iterations = max_iterations;
    settings.system_prompt = Some("be brief".into());
    settings.extensions = ExtensionSet::new(keel_extensions::standard());
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

#[test]
fn first_step_calls_the_model_with_system_prompt_history_and_input() {
    let mut run = run_with(5, vec![Message::user("earlier"), Message::assistant("yes")]);
    let Step::CallModel(call) = run.start() else {
        panic!("expected a model call")
    };
    assert_eq!(
        (call.provider.as_str(), call.wait),
        ("mock", Duration::ZERO)
    );
    let request = call.request;
    let roles: Vec<Role> = request.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::System, Role::User, Role::Assistant, Role::User]
    );
    assert_eq!(request.messages[0].content, "be brief");
    assert_eq!(request.messages[3].content, "hello");
    let tools: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    // The registry's tools, then the ones the loop answers itself.
    assert_eq!(
        tools,
        [
            "read_file",
            "request_more_iterations",
            "get_run_journal",
            "update_run_journal",
            "append_run_journal_entry",
            "todo",
            "ask_human",
            "clarify"
        ]
    );
    assert_eq!(run.iteration(), 1);
    // Only the new input is waiting to be stored; the history already is.
    assert_eq!(run.unpersisted().len(), 1);
    assert_eq!(run.drain_events()[0].name(), "agent_run.started");
}
