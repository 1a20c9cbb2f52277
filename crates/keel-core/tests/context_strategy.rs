//! A context strategy of a library user's own (issue 32): registered on the agent, it decides
//! when the context crosses the threshold, its state is checkpointed with the run, and a run
//! resumed by a fresh agent that registers it goes on deciding with it, from its state.

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::context::ContextSettings;
use keel_core::context_strategy::{ContextStrategy, ContextView, Decision};
use keel_core::{
    Agent, AgentState, EventKind, Role, RunRequest, Store, Tool, ToolContext, ToolError,
    ToolOutput, ToolSpec,
};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::{Value, json};

/// Keeps only the last `n` messages: drops everything before them, no model call. It counts
/// its drops in its state.
struct KeepLastN {
    n: usize,
}

impl ContextStrategy for KeepLastN {
    fn name(&self) -> &str {
        "keep_last_n"
    }

    fn decide(&self, view: &ContextView<'_>) -> Decision {
        let drops = view.state()["drops"].as_u64().unwrap_or(0);
        let until = view
            .messages()
            .len()
            .saturating_sub(self.n)
            .max(view.start());
        Decision::drop_until(until).with_state(json!({ "drops": drops + 1 }))
    }
}

/// `read {path}` → about 400 tokens of text that names the path.
struct Read;

#[async_trait]
impl Tool for Read {
    fn spec(&self) -> &ToolSpec {
        static SPEC: std::sync::OnceLock<ToolSpec> = std::sync::OnceLock::new();
        SPEC.get_or_init(|| {
            ToolSpec::new(
                "read",
                "reads a file",
                json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            )
            .idempotent()
        })
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = args["path"].as_str().unwrap_or("?");
        Ok(ToolOutput::text(format!(
            "contents of {path}:{}",
            " word".repeat(400)
        )))
    }
}

fn reads(from: usize, to: usize) -> Vec<Step> {
    (from..to)
        .map(|i| Step::tool_call("read", json!({ "path": format!("f{i}") })))
        .collect()
}

/// An agent with a 4,000-token window and, when `strategy`, the custom one registered.
fn agent(provider: Arc<ScriptedProvider>, store: Arc<MemoryStore>, strategy: bool) -> Agent {
    let builder = Agent::builder()
        .provider(provider)
        .model("m")
        .system_prompt("read what you are asked to")
        .store(store)
        .tool(Arc::new(Read))
        .context(ContextSettings {
            window: Some(4_000),
            max_recoveries: 100,
            ..ContextSettings::default()
        });
    let builder = if strategy {
        builder.context_strategy(Arc::new(KeepLastN { n: 4 }))
    } else {
        builder
    };
    builder.build().unwrap()
}

/// The drops the strategy counted, as the run's latest checkpoint keeps them.
async fn checkpointed_drops(store: &MemoryStore, run_id: &str) -> u64 {
    let checkpoint = store.latest_checkpoint(run_id).await.unwrap().unwrap();
    let state: Value = serde_json::from_str(&checkpoint.state).unwrap();
    state["context_state"]["drops"].as_u64().unwrap_or(0)
}

/// The `compaction.run` events of the run, by strategy name.
async fn compactions(store: &MemoryStore, run_id: &str) -> Vec<String> {
    store
        .events(run_id)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|event| match event.kind {
            EventKind::CompactionRun { strategy, .. } => Some(strategy),
            _ => None,
        })
        .collect()
}

/// How many of the provider's requests sent fewer tool results than the one before: each
/// one the strategy's doing. Each sends the last 4 messages: two reads and their results.
fn drops_sent(provider: &ScriptedProvider) -> usize {
    let results: Vec<usize> = provider
        .requests()
        .iter()
        .map(|request| {
            request
                .messages
                .iter()
                .filter(|m| m.role == Role::Tool)
                .count()
        })
        .collect();
    let drops: Vec<usize> = results
        .windows(2)
        .filter(|pair| pair[1] < pair[0])
        .map(|pair| pair[1])
        .collect();
    assert!(drops.iter().all(|&sent| sent == 2), "{results:?}");
    drops.len()
}

#[tokio::test]
async fn a_registered_strategy_decides_is_checkpointed_and_keeps_deciding_after_a_resume() {
    let store = Arc::new(MemoryStore::new());
    let mut script = reads(0, 10);
    script.push(Step::tool_call(
        "ask_human",
        json!({"question": "Shall I read on?"}),
    ));
    let first = Arc::new(ScriptedProvider::from_steps(script));
    let report = agent(first.clone(), store.clone(), true)
        .run(RunRequest::new("read the files"))
        .await
        .unwrap();
    assert_eq!(report.state, AgentState::WaitingOnHuman, "{report:?}");
    let run_id = report.run_id;

    // It decided: the oldest reads left the context, with no summary call.
    let before = compactions(&store, &run_id).await;
    assert!(!before.is_empty(), "the strategy never ran");
    assert!(
        before.iter().all(|name| name == "keep_last_n"),
        "{before:?}"
    );
    assert!(drops_sent(&first) > 0);
    let last = first.requests().last().unwrap().messages.clone();
    assert!(!last.iter().any(|m| m.content.contains("contents of f0:")));
    // Its state is in the checkpoint, and the checkpoint's frame names it.
    let drops = checkpointed_drops(&store, &run_id).await;
    assert_eq!(drops, before.len() as u64);
    let frames: Vec<String> = store
        .checkpoints(&run_id)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|checkpoint| checkpoint.frame)
        .collect();
    assert!(!frames.is_empty());
    assert!(
        frames
            .iter()
            .all(|frame| frame.contains(r#""custom":"keep_last_n""#)),
        "{frames:?}"
    );

    // A fresh agent with the strategy registered answers the question and the run goes on:
    // the strategy decides again, from the state the checkpoint kept.
    let mut script = reads(10, 20);
    script.push(Step::text("done"));
    let second = Arc::new(ScriptedProvider::from_steps(script));
    let done = agent(second.clone(), store.clone(), true)
        .answer(&run_id, "yes")
        .await
        .unwrap();
    assert_eq!(done.state, AgentState::Completed, "{done:?}");
    assert_eq!(done.final_text.as_deref(), Some("done"));
    let after = compactions(&store, &run_id).await;
    assert!(after.len() > before.len(), "the resumed run never decided");
    assert!(after.iter().all(|name| name == "keep_last_n"), "{after:?}");
    assert!(drops_sent(&second) > 0);
    assert_eq!(
        checkpointed_drops(&store, &run_id).await,
        after.len() as u64
    );
}

#[tokio::test]
async fn without_the_strategy_a_resumed_run_falls_back_to_the_built_in_one() {
    let store = Arc::new(MemoryStore::new());
    let mut script = reads(0, 10);
    script.push(Step::tool_call(
        "ask_human",
        json!({"question": "Shall I read on?"}),
    ));
    let first = Arc::new(ScriptedProvider::from_steps(script));
    let report = agent(first, store.clone(), true)
        .run(RunRequest::new("read the files"))
        .await
        .unwrap();
    let run_id = report.run_id;
    let drops = checkpointed_drops(&store, &run_id).await;
    assert!(drops > 0);

    // This agent has no strategy of that name: compaction (the configured built-in) decides,
    // with a summary call, and the strategy's state stays as it was for a later resume. (The
    // summary calls take their answers from the script too, whatever they are.)
    let mut script = reads(10, 16);
    script.extend((0..6).map(|_| Step::text("done")));
    let second = Arc::new(ScriptedProvider::from_steps(script));
    let done = agent(second, store.clone(), false)
        .answer(&run_id, "yes")
        .await
        .unwrap();
    assert_ne!(done.state, AgentState::WaitingOnHuman);
    let names = compactions(&store, &run_id).await;
    assert_eq!(
        names.last().map(String::as_str),
        Some("compact"),
        "{names:?}"
    );
    assert_eq!(checkpointed_drops(&store, &run_id).await, drops);
    let checkpoint = store.latest_checkpoint(&run_id).await.unwrap().unwrap();
    let frame = store
        .checkpoints(&run_id)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .find_map(|checkpoint| checkpoint.frame)
        .unwrap();
    assert!(frame.contains(r#""custom":"keep_last_n""#), "{frame}");
    assert!(checkpoint.seq > 0);
}
