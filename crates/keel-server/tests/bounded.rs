//! A long-lived daemon does not grow with the runs it finished: many runs through the engine
//! and the live-event hub, and what they hold in memory, counted (paused time, in-memory
//! store; the store keeps everything, as it must).

use keel_platform::ConversationStore;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use keel_core::{Agent, AgentState, LanePolicy, SessionInfo};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_platform::NewConversation;
use keel_server::engine::{Engine, EngineError, EngineOptions, EngineSizes};
use keel_server::hub::{Hub, HubSizes};
use keel_store::MemoryStore;

/// Stopped runs the hub may keep in this test.
const KEPT: usize = 16;

async fn conversation(store: &MemoryStore, id: &str) -> SessionInfo {
    store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: Some("ann".into()),
            lane_policy: LanePolicy::Queue,
            at: Utc::now(),
            place: None,
            trusted: true,
        })
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_thousand_finished_runs_leave_nothing_but_a_bounded_few_behind() {
    let store = Arc::new(MemoryStore::new());
    let hub = Arc::new(Hub::with_limits(
        store.clone(),
        Duration::from_secs(300),
        KEPT,
    ));
    let options = EngineOptions {
        queue_limit: 3,
        ..EngineOptions::default()
    };
    let engine = Engine::new(store.clone(), hub.clone(), options);
    let script = Script::new(vec![Step::text("ok").with_delay_ms(10)]).with_per_turn();
    let agent = Arc::new(
        Agent::builder()
            .provider(Arc::new(ScriptedProvider::new(script).without_recording()))
            .model("m")
            .store(store.clone())
            .event_sink(hub.clone())
            .event_sink(engine.sink())
            .build()
            .unwrap(),
    );
    engine.start(agent).await.unwrap();
    let mut conversations = Vec::new();
    for i in 0..20 {
        conversations.push(conversation(&store, &format!("c{i}")).await);
    }

    let mut finished = 0;
    for round in 0..50 {
        let mut runs = Vec::new();
        for conversation in &conversations {
            let submitted = engine
                .submit(conversation, format!("message {round}"), None)
                .await
                .unwrap();
            runs.push(submitted.run_id);
        }
        // A lane that refuses leaves nothing behind either.
        let spare = conversation(&store, &format!("full-{round}")).await;
        for _ in 0..4 {
            match engine.submit(&spare, "more".into(), None).await {
                Ok(submitted) => runs.push(submitted.run_id),
                Err(EngineError::LaneFull { .. }) => {}
                Err(other) => panic!("{other}"),
            }
        }
        for run_id in &runs {
            let report = engine.wait(run_id).await.unwrap();
            assert_eq!(report.state, AgentState::Completed, "{:?}", report.error);
            finished += 1;
        }
        // Every run ended: the engine holds nothing, the hub a bounded few.
        assert_eq!(engine.sizes(), EngineSizes::default(), "round {round}");
        let sizes = hub.sizes();
        assert!(sizes.kept_runs <= KEPT, "round {round}: {sizes:?}");
        assert!(sizes.stops <= KEPT, "round {round}: {sizes:?}");
        assert_eq!(sizes.followed_conversations, 0);
        assert_eq!(sizes.awaited_starts, 0);
    }
    assert!(finished >= 1_000, "{finished} runs");
    assert_eq!(hub.sizes().kept_runs, KEPT);

    // After the retention the hub holds nothing at all.
    tokio::time::sleep(Duration::from_secs(301)).await;
    assert_eq!(hub.sizes(), HubSizes::default());
}
