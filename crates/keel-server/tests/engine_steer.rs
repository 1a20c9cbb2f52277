//! The `steer` policy through the engine, on `MemoryStore` and keel-mock's in-process model in
//! tokio's paused time: a message sent while a run works joins it before its next model call
//! (the calls of the batch not started yet are skipped), its own queued run ends "steered into"
//! the running one; another person's message, a message sent while the run gives its answer,
//! and one waiting when the run is cancelled, wait for runs of their own; and 50 conversations × 5 messages at once keep the lane
//! invariant: no two runs of a conversation overlap, order is kept, every message is in exactly
//! one run's input.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use keel_core::{
    Agent, AgentState, EventKind, LanePolicy, Permission, Role, SessionInfo, Store, Tool,
    ToolContext, ToolError, ToolOutput, ToolSpec,
};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_platform::{ConversationStore, NewConversation};
use keel_server::engine::{Engine, EngineOptions};
use keel_server::live::LiveEvents;
use keel_store::MemoryStore;
use serde_json::{Value, json};

/// The hub, told nothing here.
struct Quiet;

impl keel_core::EventSink for Quiet {
    fn emit(&self, _: &keel_core::Event) {}
}

impl LiveEvents for Quiet {
    fn run_starting(&self, _: &str, _: &str, _: u64) {}
    fn run_stopped(&self, _: &str, _: AgentState) {}
    fn shutdown(&self) {}
}

/// A side-effecting `work {ms}` tool: takes `ms` of (paused) time.
struct Work(ToolSpec);

#[async_trait]
impl Tool for Work {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0))).await;
        Ok(ToolOutput::text("worked"))
    }
}

async fn engine(store: &Arc<MemoryStore>, script: Script) -> (Arc<Engine>, Arc<ScriptedProvider>) {
    let provider = Arc::new(ScriptedProvider::new(script));
    let engine = Engine::new(store.clone(), Arc::new(Quiet), EngineOptions::default());
    let mut work = ToolSpec::new("work", "works a while", json!({"type": "object"}));
    work.required_permission = Permission::Guest;
    let agent = Agent::builder()
        .provider(provider.clone())
        .model("m")
        .store(store.clone())
        .tool(Arc::new(Work(work)))
        .event_sink(engine.sink())
        .build()
        .unwrap();
    engine.start(Arc::new(agent)).await.unwrap();
    (engine, provider)
}

async fn conversation(store: &MemoryStore, id: &str) -> SessionInfo {
    store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: Some("ann".into()),
            lane_policy: LanePolicy::Steer,
            at: Utc::now(),
            place: None,
            trusted: true,
        })
        .await
        .unwrap()
        .unwrap()
}

/// The conversation's stored transcript: (role, text), without the loop's own notes.
async fn transcript(store: &MemoryStore, id: &str) -> Vec<(Role, String)> {
    store
        .messages(id)
        .await
        .unwrap()
        .into_iter()
        .filter(|m| !m.message.is_internal())
        .map(|m| (m.message.role, m.message.content))
        .collect()
}

/// Two `work` calls of 1 s each, then an answer.
fn two_calls_then(answer: &str) -> Vec<Step> {
    vec![
        Step::tool_call("work", json!({"ms": 1_000})).with_tool_call("work", json!({"ms": 1_000})),
        Step::text(answer),
    ]
}

#[tokio::test(start_paused = true)]
async fn a_message_sent_while_a_tool_runs_joins_the_run_before_its_next_model_call() {
    let store = Arc::new(MemoryStore::new());
    let (engine, provider) = engine(&store, Script::new(two_calls_then("blue it is"))).await;
    let lane = conversation(&store, "lane").await;
    let first = engine.submit(&lane, "paint it".into(), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = engine.submit(&lane, "blue, please".into(), None).await;
    let second = second.unwrap();

    let report = engine.wait(&first.run_id).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(report.final_text.as_deref(), Some("blue it is"));
    let steered = engine.wait(&second.run_id).await.unwrap();
    assert_eq!(steered.state, AgentState::Cancelled);
    let record = store.run(&second.run_id).await.unwrap().unwrap();
    assert_eq!(
        record.error.as_deref(),
        Some(format!("steered into run {}", first.run_id).as_str())
    );
    let skipped = keel_core::steering::SKIPPED_FOR_STEER.to_string();
    assert_eq!(
        transcript(&store, "lane").await,
        [
            (Role::User, "paint it".to_string()),
            (Role::Assistant, String::new()),
            (Role::Tool, "worked".to_string()),
            (Role::Tool, skipped),
            (Role::User, "blue, please".to_string()),
            (Role::Assistant, "blue it is".to_string()),
        ]
    );
    assert_eq!(
        provider.requests().len(),
        2,
        "one model call after the steer"
    );
    assert!(store.queued_runs("lane").await.unwrap().is_empty());
    let events = store.events(&first.run_id).await.unwrap();
    assert!(events.iter().any(|e| e.kind
        == EventKind::LaneSteered {
            absorbed: vec![second.run_id.clone()]
        }));
}

#[tokio::test(start_paused = true)]
async fn another_persons_message_waits_for_a_run_of_its_own() {
    let store = Arc::new(MemoryStore::new());
    let mut steps = two_calls_then("done for ann");
    steps.push(Step::text("done for bob"));
    let (engine, _) = engine(&store, Script::new(steps)).await;
    let lane = conversation(&store, "group").await;
    let ann = engine.submit(&lane, "ann's task".into(), Some("ann".into()));
    let ann = ann.await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let bob = engine.submit(&lane, "bob's task".into(), Some("bob".into()));
    let bob = bob.await.unwrap();

    assert_eq!(
        engine.wait(&ann.run_id).await.unwrap().state,
        AgentState::Completed
    );
    let report = engine.wait(&bob.run_id).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(report.final_text.as_deref(), Some("done for bob"));
    let texts: Vec<String> = transcript(&store, "group")
        .await
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    assert_eq!(
        texts,
        [
            "ann's task",
            "",
            "worked",
            "worked",
            "done for ann",
            "bob's task",
            "done for bob"
        ],
        "ann's calls all ran; bob's message came after her answer"
    );
}

#[tokio::test(start_paused = true)]
async fn a_message_sent_while_the_run_answers_runs_next_on_its_own() {
    let store = Arc::new(MemoryStore::new());
    let steps = vec![
        Step::text("first answer").with_delay_ms(1_000),
        Step::text("second answer"),
    ];
    let (engine, provider) = engine(&store, Script::new(steps)).await;
    let lane = conversation(&store, "lane").await;
    let first = engine.submit(&lane, "one".into(), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = engine.submit(&lane, "two".into(), None).await.unwrap();

    let first = engine.wait(&first.run_id).await.unwrap();
    assert_eq!(first.final_text.as_deref(), Some("first answer"));
    let second = engine.wait(&second.run_id).await.unwrap();
    assert_eq!(second.state, AgentState::Completed);
    assert_eq!(second.final_text.as_deref(), Some("second answer"));
    assert_eq!(provider.requests().len(), 2);
    let texts: Vec<String> = transcript(&store, "lane")
        .await
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    assert_eq!(texts, ["one", "first answer", "two", "second answer"]);
}

#[tokio::test(start_paused = true)]
async fn fifty_conversations_of_five_messages_at_once_keep_the_lane_invariant() {
    let store = Arc::new(MemoryStore::new());
    // Every turn: a 200 ms model call asking for two 300 ms calls, then a 200 ms answer.
    let script = Script::new(vec![
        Step::tool_call("work", json!({"ms": 300}))
            .with_tool_call("work", json!({"ms": 300}))
            .with_delay_ms(200),
        Step::text("ok").with_delay_ms(200),
    ])
    .with_per_turn();
    let (engine, _) = engine(&store, script).await;
    let mut lanes = Vec::new();
    for c in 0..50 {
        lanes.push(conversation(&store, &format!("c{c}")).await);
    }
    let sends = lanes.iter().flat_map(|lane| {
        (0..5).map(|m| {
            let engine = engine.clone();
            let lane = lane.clone();
            async move {
                // Spread over the first run's work, so some join it and some wait.
                tokio::time::sleep(Duration::from_millis(150 * m)).await;
                let text = format!("{} m{m}", lane.id);
                let submitted = engine.submit(&lane, text.clone(), None).await.unwrap();
                (lane.id.clone(), submitted.run_id, text)
            }
        })
    });
    let sent = futures::future::join_all(sends).await;
    let mut by_conversation: HashMap<String, Vec<(String, String)>> = HashMap::new();
    for (conversation, run_id, text) in sent {
        by_conversation
            .entry(conversation)
            .or_default()
            .push((run_id, text));
    }
    let mut steered = 0;
    for (conversation, mut runs) in by_conversation {
        // Arrival order is the order of the run ids (time-ordered, made in the lane's gate).
        runs.sort();
        let mut spans = Vec::new();
        for (run_id, _) in &runs {
            let report = engine.wait(run_id).await.unwrap();
            let record = store.run(run_id).await.unwrap().unwrap();
            match report.state {
                AgentState::Completed => {
                    spans.push((record.started_at, record.finished_at.unwrap()));
                }
                AgentState::Cancelled => {
                    let into = record.error.unwrap_or_default();
                    let into = into.strip_prefix("steered into run ").unwrap();
                    assert!(runs.iter().any(|(id, _)| id == into), "{into}");
                    steered += 1;
                }
                state => panic!("{run_id} ended {state}"),
            }
        }
        spans.sort();
        for pair in spans.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "runs overlap: {spans:?}");
        }
        let users: Vec<String> = transcript(&store, &conversation)
            .await
            .into_iter()
            .filter(|(role, _)| *role == Role::User)
            .map(|(_, text)| text)
            .collect();
        let expected: Vec<String> = runs.into_iter().map(|(_, text)| text).collect();
        assert_eq!(users, expected, "each message once, in arrival order");
        assert!(store.queued_runs(&conversation).await.unwrap().is_empty());
    }
    assert!(steered > 0, "some messages joined a running run");
}

#[tokio::test(start_paused = true)]
async fn a_message_waiting_to_join_a_run_that_is_cancelled_runs_on_its_own() {
    let store = Arc::new(MemoryStore::new());
    // The first run is cancelled before its second model call: the script's answer is the
    // second run's.
    let steps = two_calls_then("the second, on its own");
    let (engine, _) = engine(&store, Script::new(steps)).await;
    let lane = conversation(&store, "lane").await;
    let first = engine.submit(&lane, "one".into(), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = engine.submit(&lane, "two".into(), None).await.unwrap();
    engine.cancel(&first.run_id).await.unwrap();

    assert_eq!(
        engine.wait(&first.run_id).await.unwrap().state,
        AgentState::Cancelled
    );
    let report = engine.wait(&second.run_id).await.unwrap();
    assert_eq!(report.state, AgentState::Completed);
    assert_eq!(report.final_text.as_deref(), Some("the second, on its own"));
    let users: Vec<String> = transcript(&store, "lane")
        .await
        .into_iter()
        .filter(|(role, _)| *role == Role::User)
        .map(|(_, text)| text)
        .collect();
    assert_eq!(users, ["one", "two"], "each message once");
}

#[tokio::test(start_paused = true)]
async fn a_schedules_fire_never_joins_a_running_run() {
    let store = Arc::new(MemoryStore::new());
    let mut steps = two_calls_then("painted");
    steps.push(Step::text("the digest"));
    let (engine, _) = engine(&store, Script::new(steps)).await;
    let lane = conversation(&store, "lane").await;
    let first = engine.submit(&lane, "paint it".into(), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The same (no) user and options as the running run: only being a fire keeps it apart.
    let slot = keel_platform::SlotKey {
        schedule_id: "daily".into(),
        slot: Utc::now(),
    };
    let fired = engine
        .submit_scheduled(
            &lane,
            "the daily digest".into(),
            None,
            Default::default(),
            slot,
        )
        .await
        .unwrap();

    let report = engine.wait(&first.run_id).await.unwrap();
    assert_eq!(report.final_text.as_deref(), Some("painted"));
    let report = engine.wait(&fired.run_id).await.unwrap();
    assert_eq!(report.state, AgentState::Completed, "it answered its slot");
    assert_eq!(report.final_text.as_deref(), Some("the digest"));
    let transcript = transcript(&store, "lane").await;
    assert!(
        !transcript
            .iter()
            .any(|(_, text)| text == keel_core::steering::SKIPPED_FOR_STEER),
        "the running run's batch ran whole: {transcript:?}"
    );
}
