//! The loop end to end in process: a scripted model, real tools written for the test, the
//! in-memory store. What a user of the library would notice.

mod support;

use std::sync::Arc;
use std::time::Duration;

use keel_core::{Agent, AgentState, ErrorReason, EventLog, Role, RunRequest, Store};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::json;
use support::{Echo, Fails, Panics, Slow, Spy, agent_with, last_tool_message, tool_message};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn tool_calls_run_and_the_final_answer_completes_the_run() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("echo", json!({"text": "one"})),
        Step::tool_call("echo", json!({"text": "two"})),
        Step::text("all done"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(provider.clone(), store.clone(), vec![Echo::tool()]);
    let report = agent.run(RunRequest::new("go")).await.unwrap();

    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(report.final_text.as_deref(), Some("all done"));
    assert_eq!(report.iterations, 3);
    assert_eq!(report.tool_calls.len(), 2);
    assert!(report.tool_calls.iter().all(|c| c.ok));
    assert_eq!(report.tool_calls[1].output, "echo: two");
    assert!(report.usage.total() > 0);

    let stored = store.messages(&report.session_id).await.unwrap();
    let roles: Vec<Role> = stored.iter().map(|m| m.message.role).collect();
    use Role::*;
    assert_eq!(roles, [User, Assistant, Tool, Assistant, Tool, Assistant]);
    let run = store.run(&report.run_id).await.unwrap().unwrap();
    assert_eq!(run.state, AgentState::Completed);
    assert_eq!(run.iterations, 3);

    // The model saw each tool result before its next turn.
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(tool_message(&requests[1], 0), "echo: one");
}

#[tokio::test]
async fn bad_tool_calls_become_clear_errors_for_the_model_and_the_run_goes_on() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("no_such_tool", json!({})),
        Step::raw_tool_call("echo", "{\"text\": oops"),
        Step::tool_call("echo", json!({"text": 42})),
        Step::tool_call("fails", json!({})),
        Step::tool_call("panics", json!({})),
        Step::text("recovered"),
    ]));
    let tools = vec![Echo::tool(), Fails::tool(), Panics::tool()];
    let agent = agent_with(provider.clone(), Arc::new(MemoryStore::new()), tools);
    let report = agent.run(RunRequest::new("go")).await.unwrap();

    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(report.final_text.as_deref(), Some("recovered"));
    let outputs: Vec<&str> = report
        .tool_calls
        .iter()
        .map(|c| c.output.as_str())
        .collect();
    assert!(report.tool_calls.iter().all(|c| !c.ok));
    assert!(outputs[0].contains("unknown tool `no_such_tool`") && outputs[0].contains("echo"));
    assert!(outputs[1].contains("not valid JSON") && outputs[1].contains("oops"));
    assert!(outputs[2].contains("invalid arguments for `echo`") && outputs[2].contains("string"));
    assert_eq!(outputs[3], "Error: the disk is on fire");
    assert!(
        outputs[4].contains("crashed (panic: boom)"),
        "{}",
        outputs[4]
    );
    // Each error reached the model as the tool result.
    let requests = provider.requests();
    assert!(last_tool_message(&requests[4]).contains("the disk is on fire"));
    assert!(last_tool_message(&requests[5]).contains("panic"));
}

#[tokio::test]
async fn long_tool_results_are_cut_with_a_visible_marker() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("echo", json!({"text": "x".repeat(500)})),
        Step::text("ok"),
    ]));
    let agent = Agent::builder()
        .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
        .provider(provider.clone())
        .model("m")
        .tool(Echo::tool())
        .tool_result_max_chars(100)
        .build()
        .unwrap();
    let report = agent.run(RunRequest::new("go")).await.unwrap();
    let output = &report.tool_calls[0].output;
    assert!(output.starts_with("echo: xxx"));
    assert!(output.contains("[output truncated: showing the first 100 of 506 characters]"));
    assert_eq!(&tool_message(&provider.requests()[1], 0), output);
}

#[tokio::test]
async fn the_iteration_limit_ends_the_run_as_max_steps_and_says_so() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("echo", json!({"text": "again"})).repeat_forever(),
    ]));
    let store = Arc::new(MemoryStore::new());
    let agent = Agent::builder()
        .provider(provider.clone())
        .model("m")
        .store(store.clone())
        .tool(Echo::tool())
        .max_iterations(3)
        .build()
        .unwrap();
    let report = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(report.state, AgentState::MaxSteps);
    assert_eq!(report.iterations, 3);
    assert_eq!(provider.requests().len(), 3);
    let text = report.final_text.unwrap();
    assert!(
        text.contains("limit of 3 iterations") && text.contains("echo ×3"),
        "{text}"
    );
    let last = store
        .messages(&report.session_id)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(last.message.content, text);
}

#[tokio::test(start_paused = true)]
async fn parallel_calls_run_concurrently_and_results_keep_call_order() {
    // Each call waits on a barrier for both: run one after the other, they would never finish.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("slow", json!({"ms": 300, "tag": "first"}))
            .with_tool_call("slow", json!({"ms": 10, "tag": "second"})),
        Step::text("ok"),
    ]));
    let agent = agent_with(
        provider.clone(),
        Arc::new(MemoryStore::new()),
        vec![Slow::tool(Some(barrier))],
    );
    let report = tokio::time::timeout(Duration::from_secs(60), agent.run(RunRequest::new("go")))
        .await
        .expect("the two calls must run at the same time")
        .unwrap();
    let outputs: Vec<&str> = report
        .tool_calls
        .iter()
        .map(|c| c.output.as_str())
        .collect();
    assert_eq!(outputs, ["first", "second"]);
    assert_eq!(tool_message(&provider.requests()[1], 0), "first");
    assert_eq!(tool_message(&provider.requests()[1], 1), "second");
}

#[tokio::test(start_paused = true)]
async fn an_interactive_tool_runs_alone() {
    let spy = Spy::default();
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("busy", json!({}))
            .with_tool_call("ask", json!({}))
            .with_tool_call("busy", json!({}))
            .with_tool_call("busy", json!({})),
        Step::text("ok"),
    ]));
    let tools = vec![spy.tool("busy", false), spy.tool("ask", true)];
    let agent = agent_with(provider, Arc::new(MemoryStore::new()), tools);
    let report = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(
        spy.max_in_flight_during_interactive(),
        1,
        "nothing ran beside `ask`"
    );
    assert_eq!(
        spy.max_in_flight(),
        2,
        "the last two busy calls ran together"
    );
}

#[tokio::test]
async fn runs_on_one_session_share_history() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::text("first answer"),
        Step::text("second answer"),
    ]));
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(provider.clone(), store.clone(), vec![]);
    let first = agent.run(RunRequest::new("one")).await.unwrap();
    let second = agent
        .run(RunRequest::new("two").session(first.session_id.clone()))
        .await
        .unwrap();
    assert_eq!(first.session_id, second.session_id);
    let contents: Vec<String> = provider.requests()[1]
        .messages
        .iter()
        .filter(|m| m.role != Role::System)
        .map(|m| m.content.clone())
        .collect();
    assert_eq!(contents, ["one", "first answer", "two"]);
    assert_eq!(store.messages(&first.session_id).await.unwrap().len(), 4);
}

#[tokio::test]
async fn chat_returns_the_answer_and_keeps_its_conversation() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::text("hello"),
        Step::text("again"),
    ]));
    let agent = agent_with(provider.clone(), Arc::new(MemoryStore::new()), vec![]);
    assert_eq!(agent.chat("hi").await.unwrap(), "hello");
    assert_eq!(agent.chat("hi again").await.unwrap(), "again");
    assert_eq!(provider.requests()[1].messages.len(), 4, "system + 3 turns");
}

#[tokio::test(start_paused = true)]
async fn a_provider_failure_ends_the_run_in_error_with_the_message_stored() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![Step::error(401)]));
    let store = Arc::new(MemoryStore::new());
    let agent = agent_with(provider, store.clone(), vec![]);
    let report = agent.run(RunRequest::new("please")).await.unwrap();
    assert_eq!(report.state, AgentState::Error);
    assert_eq!(report.reason, Some(ErrorReason::ProviderFatal));
    assert!(
        report.error.as_deref().unwrap().contains("auth"),
        "{:?}",
        report.error
    );
    let stored = store.messages(&report.session_id).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].message.content, "please");
    assert!(agent.chat("x").await.is_err());
}

#[tokio::test(start_paused = true)]
async fn cancelling_mid_call_abandons_it_and_stores_no_reply() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::text("too late").with_delay_ms(10_000),
    ]));
    let store = Arc::new(MemoryStore::new());
    let events = Arc::new(EventLog::new());
    let agent = Agent::builder()
        .provider(provider)
        .model("m")
        .store(store.clone())
        .event_sink(events.clone())
        .build()
        .unwrap();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        trigger.cancel();
    });
    let started = tokio::time::Instant::now();
    let report = agent
        .run(RunRequest::new("go").cancel_token(cancel))
        .await
        .unwrap();
    assert_eq!(report.state, AgentState::Cancelled);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the call was abandoned at once"
    );
    let stored = store.messages(&report.session_id).await.unwrap();
    assert_eq!(stored.len(), 1, "only the user's message");
    assert_eq!(events.names().last(), Some(&"agent_run.cancelled"));
}

#[tokio::test]
async fn events_name_every_step_and_carry_the_stream() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("echo", json!({"text": "a"})).with_text("looking"),
        Step::text("final words"),
    ]));
    let events = Arc::new(EventLog::new());
    let agent = Agent::builder()
        .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
        .provider(provider)
        .model("m")
        .tool(Echo::tool())
        .event_sink(events.clone())
        .build()
        .unwrap();
    agent.run(RunRequest::new("go")).await.unwrap();
    let names: Vec<&str> = events
        .names()
        .into_iter()
        .filter(|n| *n != "agent.stream.delta")
        .collect();
    assert_eq!(
        names,
        [
            "agent.checkpoint",
            "agent_run.started",
            "agent.tools.offered",
            "agent.status",
            "agent.model.request",
            "agent.model.response",
            "agent.tool_call.parsed",
            "agent.checkpoint",
            "agent.status",
            "agent.tool.started",
            "agent.tool.completed",
            "agent.step.completed",
            "agent.checkpoint",
            "agent.status",
            "agent.model.request",
            "agent.model.response",
            "agent.step.completed",
            "agent.status",
            "agent.checkpoint",
            "agent_run.completed",
        ]
    );
    let streamed: String = events
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            keel_core::EventKind::StreamDelta {
                delta: keel_core::StreamDelta::Text { text },
            } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, "lookingfinal words");
}

#[test]
fn the_builder_says_what_is_missing() {
    let err = Agent::builder()
        .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
        .model("m")
        .build()
        .err()
        .unwrap();
    assert!(err.to_string().contains("provider is required"));
    let provider = Arc::new(ScriptedProvider::from_steps(vec![]));
    let err = Agent::builder()
        .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
        .provider(provider.clone())
        .build()
        .err()
        .unwrap();
    assert!(err.to_string().contains("model is required"));
    let err = Agent::builder()
        .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
        .provider(provider)
        .model("m")
        .tool(Echo::tool())
        .tool(Echo::tool())
        .build()
        .err()
        .unwrap();
    assert!(err.to_string().contains("already registered"));
}
