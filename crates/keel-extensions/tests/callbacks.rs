//! The typed callbacks of `AgentCallbacks` (seed 004's callback surfaces), fired by real runs on
//! a scripted model, streamed and whole: each gets what happened, in order, and a handler that
//! panics changes nothing for the run.

#[path = "../../keel-core/tests/support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex};

use keel_core::{Agent, AgentBuilder, AgentState, RunRequest, RunStatus, StreamDelta};
use keel_extensions::{AgentCallbacks, Thinking, ToolProgress};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::json;
use support::Echo;

/// What the handlers saw, each as one line, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }

    /// The lines starting with `prefix`, without it.
    fn of(&self, prefix: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|line| line.strip_prefix(prefix).map(str::to_string))
            .collect()
    }
}

/// A builder with all seven callbacks writing to `seen`.
fn watched(builder: AgentBuilder, seen: &Seen) -> AgentBuilder {
    let (a, b, c, d, e, f, g) = (
        seen.clone(),
        seen.clone(),
        seen.clone(),
        seen.clone(),
        seen.clone(),
        seen.clone(),
        seen.clone(),
    );
    builder
        .on_tool_progress(move |progress| {
            a.push(match progress {
                ToolProgress::Started {
                    name, arguments, ..
                } => format!("tool: started {name} {arguments}"),
                ToolProgress::Retrying { name, attempt, .. } => {
                    format!("tool: retrying {name} {attempt}")
                }
                ToolProgress::Completed {
                    name, ok, output, ..
                } => format!("tool: completed {name} ok={ok} {output}"),
            })
        })
        .on_thinking(move |thinking| {
            b.push(match thinking {
                Thinking::Started { iteration } => format!("thinking: started {iteration}"),
                Thinking::Stopped => "thinking: stopped".into(),
            })
        })
        .on_reasoning(move |r| c.push(format!("reasoning: {} {}", r.iteration, r.text)))
        .on_step(move |step| {
            d.push(format!(
                "step: {} [{}] {}",
                step.iteration,
                step.tools.join(","),
                step.usage.total() > 0
            ))
        })
        .on_stream_delta(move |delta| {
            e.push(match delta {
                StreamDelta::Text { text } => format!("delta: text {text}"),
                StreamDelta::Reasoning { text } => format!("delta: reasoning {text}"),
                StreamDelta::ToolCallStarted { name, .. } => format!("delta: call {name}"),
                StreamDelta::ToolCallArguments { .. } => "delta: arguments".into(),
                StreamDelta::Warning { message } => format!("delta: warning {message}"),
                StreamDelta::Finished { stop_reason } => format!("delta: finished {stop_reason:?}"),
            })
        })
        .on_tool_call_parsed(move |call| {
            f.push(format!(
                "parsed: {} {} {} {} {}",
                call.iteration, call.index, call.call_id, call.name, call.arguments
            ))
        })
        .on_status(move |change| {
            g.push(format!(
                "status: {} {} {:?} {}",
                change.status.as_str(),
                change.iteration,
                change.previous.map(RunStatus::as_str),
                change.state
            ))
        })
}

fn script() -> Vec<Step> {
    vec![
        Step::tool_call("echo", json!({"text": "one"})).with_reasoning("look it up"),
        Step::text("the answer").with_reasoning("now say it"),
    ]
}

/// Runs the two-turn script (a tool call, then an answer) with every callback watching.
async fn run_watched(stream: bool) -> (Seen, String) {
    let seen = Seen::default();
    let agent = watched(Agent::builder(), &seen)
        .provider(Arc::new(ScriptedProvider::from_steps(script())))
        .model("m")
        .store(Arc::new(MemoryStore::new()))
        .tool(Echo::tool())
        .stream(stream)
        .build()
        .unwrap();
    let report = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    let call_id = report.tool_calls[0].id.clone();
    (seen, call_id)
}

/// What every callback but `on_stream_delta` sees, streamed or not.
async fn check_turns(stream: bool) -> Seen {
    let (seen, call_id) = run_watched(stream).await;
    assert_eq!(
        seen.of("tool: "),
        [
            r#"started echo {"text":"one"}"#,
            "completed echo ok=true echo: one"
        ]
    );
    assert_eq!(
        seen.of("thinking: "),
        ["started 1", "stopped", "started 2", "stopped"]
    );
    assert_eq!(seen.of("reasoning: "), ["1 look it up", "2 now say it"]);
    assert_eq!(seen.of("step: "), ["1 [echo] true", "2 [] true"]);
    assert_eq!(
        seen.of("parsed: "),
        [format!(r#"1 0 {call_id} echo {{"text":"one"}}"#)]
    );
    assert_eq!(
        seen.of("status: "),
        [
            "thinking 1 None running",
            "executing 1 Some(\"thinking\") waiting_for_tool",
            "thinking 2 Some(\"executing\") running",
            "finished 2 Some(\"thinking\") completed",
        ]
    );
    seen
}

#[tokio::test]
async fn every_callback_fires_with_its_data_on_a_streamed_run() {
    let seen = check_turns(true).await;
    let deltas = seen.of("delta: ");
    assert_eq!(
        deltas,
        [
            "reasoning look",
            "reasoning  it",
            "reasoning  up",
            "call echo",
            "arguments",
            "arguments",
            "finished Some(ToolUse)",
            "reasoning now",
            "reasoning  say",
            "reasoning  it",
            "text the",
            "text  answer",
            "finished Some(EndTurn)",
        ],
        "{deltas:?}"
    );
}

#[tokio::test]
async fn every_callback_but_the_deltas_fires_the_same_on_a_whole_run() {
    let seen = check_turns(false).await;
    assert_eq!(seen.of("delta: "), Vec::<String>::new());
}

#[tokio::test]
async fn callbacks_fire_in_the_order_things_happen() {
    let (seen, _) = run_watched(false).await;
    let lines = seen.0.lock().unwrap().clone();
    let position = |line: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no `{line}` in {lines:#?}"))
    };
    // Thinking, then what the answer carried, then the tool, then the turn is complete.
    assert!(position("thinking: started 1") < position("reasoning: 1"));
    assert!(position("reasoning: 1") < position("parsed: 1"));
    assert!(position("parsed: 1") < position("thinking: stopped"));
    assert!(position("status: executing") < position("tool: started"));
    assert!(position("tool: completed") < position("step: 1"));
    assert!(position("step: 1") < position("thinking: started 2"));
    assert!(position("step: 2") < position("status: finished"));
}

#[tokio::test]
async fn a_run_waiting_for_the_human_says_so_and_its_turn_is_not_complete() {
    let seen = Seen::default();
    let provider = ScriptedProvider::from_steps(vec![Step::tool_call(
        "ask_human",
        json!({"question": "Which file?"}),
    )]);
    let agent = watched(
        Agent::builder().store(std::sync::Arc::new(keel_store::MemoryStore::new())),
        &seen,
    )
    .provider(Arc::new(provider))
    .model("m")
    .build()
    .unwrap();
    let report = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(report.state, AgentState::WaitingOnHuman);
    assert_eq!(
        seen.of("status: ").last().map(String::as_str),
        Some("waiting_for_human 1 Some(\"thinking\") waiting_on_human")
    );
    assert_eq!(seen.of("step: "), Vec::<String>::new());
    // The loop answers its own tools: no tool progress, but the call was parsed.
    assert_eq!(seen.of("tool: "), Vec::<String>::new());
    assert_eq!(seen.of("parsed: ").len(), 1);
}

#[tokio::test]
async fn handlers_that_panic_neither_stop_nor_change_the_run() {
    let seen = Seen::default();
    let builder = Agent::builder()
        .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
        .on_tool_progress(|_| panic!("tool progress handler bug"))
        .on_thinking(|_| panic!("thinking handler bug"))
        .on_reasoning(|_| panic!("reasoning handler bug"))
        .on_step(|_| panic!("step handler bug"))
        .on_stream_delta(|_| panic!("delta handler bug"))
        .on_tool_call_parsed(|_| panic!("parsed handler bug"))
        .on_status(|_| panic!("status handler bug"));
    let agent = watched(builder, &seen)
        .provider(Arc::new(ScriptedProvider::from_steps(script())))
        .model("m")
        .tool(Echo::tool())
        .build()
        .unwrap();
    let report = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(report.final_text.as_deref(), Some("the answer"));
    // The well-behaved handlers after the panicking ones still saw everything.
    assert_eq!(seen.of("step: "), ["1 [echo] true", "2 [] true"]);
    assert_eq!(seen.of("thinking: ").len(), 4);
}

#[tokio::test]
async fn live_callback_events_are_not_stored_and_completed_turns_are() {
    let store = Arc::new(MemoryStore::new());
    let agent = Agent::builder()
        .provider(Arc::new(ScriptedProvider::from_steps(script())))
        .model("m")
        .store(store.clone())
        .tool(Echo::tool())
        .on_status(|_| {})
        .build()
        .unwrap();
    let report = agent.run(RunRequest::new("go")).await.unwrap();
    use keel_core::Store;
    let names: Vec<String> = store
        .events(&report.run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind.name().to_string())
        .collect();
    assert_eq!(
        names
            .iter()
            .filter(|n| *n == "agent.step.completed")
            .count(),
        2,
        "{names:?}"
    );
    for live in [
        "agent.status",
        "agent.model.reasoning",
        "agent.tool_call.parsed",
        "agent.stream.delta",
    ] {
        assert!(!names.iter().any(|n| n == live), "{live} stored: {names:?}");
    }
}
