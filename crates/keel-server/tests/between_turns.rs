//! Compaction between turns in the engine (seed 004's gateway compression, issue 33): a
//! channel conversation (one with a delivery route) whose context stands above 85 % of the
//! window after a run is compacted before its next message arrives, which is then answered with
//! no summary call first; a conversation with no route is not; the compaction writes no outbox
//! row.

mod common;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use keel_core::context::{self, ContextSettings};
use keel_core::{AgentState, InternalReason, LanePolicy, Message, SessionInfo, Store};
use keel_mock::{ScriptedProvider, Step};
use keel_platform::{ChannelStore, ConversationStore, DeliveryRoute, NewConversation};
use keel_server::engine::EngineOptions;
use keel_store::MemoryStore;

/// The conversation `id`, holding 28 stored exchanges of about 150 tokens each: about 8,900
/// tokens of a 10,000-token window, under the runs' own threshold (95 % here) and above 85 %.
async fn conversation(store: &MemoryStore, id: &str) -> SessionInfo {
    let info = store
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
        .unwrap();
    let long = |what: &str, i: usize| format!("{what} {i}:{}", " word".repeat(150));
    let messages: Vec<Message> = (0..28)
        .flat_map(|i| {
            [
                Message::user(long("question", i)),
                Message::assistant(long("answer", i)),
            ]
        })
        .collect();
    store.append_messages(id, None, &messages).await.unwrap();
    info
}

/// An engine whose model answers from `steps`, with a 10,000-token window.
async fn engine(
    steps: Vec<Step>,
) -> (
    keel_server::AppState,
    Arc<MemoryStore>,
    Arc<ScriptedProvider>,
) {
    let provider = Arc::new(ScriptedProvider::from_steps(steps));
    let model = provider.clone();
    let (state, store) = common::state_with(EngineOptions::default(), move |builder| {
        builder
            .provider(model)
            .model("m")
            .system_prompt("answer briefly")
            .context(ContextSettings {
                window: Some(10_000),
                compact_threshold: 0.95,
                ..ContextSettings::default()
            })
    })
    .await;
    (state, store, provider)
}

/// Waits (a bounded number of short yields) until `session` holds a compaction summary.
async fn summary_stored(store: &MemoryStore, session: &str) -> bool {
    for _ in 0..500 {
        let messages = store.messages(session).await.unwrap();
        if messages.iter().any(|m| m.message.meta.summary_of.is_some()) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test]
async fn a_routed_conversation_is_compacted_before_its_next_message_with_no_reply() {
    let (state, store, provider) = engine(vec![
        Step::text("first answer"),
        Step::text("SUMMARY: 28 questions about words."),
        Step::text("second answer"),
    ])
    .await;
    let session = conversation(&store, "tg").await;
    let route = DeliveryRoute {
        channel: "telegram".into(),
        target: r#"{"chat":1}"#.into(),
    };
    store.set_delivery("tg", &route).await.unwrap();

    let first = state
        .engine
        .submit(&session, "hello".into(), None)
        .await
        .unwrap();
    let report = state.engine.wait(&first.run_id).await.unwrap();
    assert_eq!(report.state, AgentState::Completed, "{report:?}");
    assert!(summary_stored(&store, "tg").await, "never compacted");
    let outbox = store.pending_outbox("telegram", 100).await.unwrap();
    assert_eq!(outbox.len(), 1, "the run's reply alone: {outbox:?}");
    assert_eq!(outbox[0].run_id.as_deref(), Some(first.run_id.as_str()));

    // The summary was the second call, made before the next message arrived.
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].messages[0].content,
        context::SUMMARY_INSTRUCTIONS
    );
    let stored = store.messages("tg").await.unwrap();
    let summary = stored.last().unwrap();
    assert_eq!(
        summary.message.meta.internal,
        Some(InternalReason::CompactionSummary)
    );
    let holder = summary.run_id.clone().unwrap();
    assert!(holder.starts_with("compaction-"), "{holder}");
    assert_eq!(store.run(&holder).await.unwrap(), None, "no run is stored");

    // The next message is answered by the model's first call, the summary sent with it.
    let second = state
        .engine
        .submit(&session, "and then?".into(), None)
        .await
        .unwrap();
    let report = state.engine.wait(&second.run_id).await.unwrap();
    assert_eq!(report.final_text.as_deref(), Some("second answer"));
    let requests = provider.requests();
    assert_eq!(requests.len(), 3, "a summary call came before the answer");
    assert!(
        requests[2]
            .messages
            .iter()
            .any(|m| m.content.contains("28 questions about words"))
    );
    // Its reply is the only other row: nothing for the compaction.
    let outbox = store.pending_outbox("telegram", 100).await.unwrap();
    assert_eq!(outbox.len(), 2, "{outbox:?}");
    assert_eq!(outbox[1].run_id.as_deref(), Some(second.run_id.as_str()));
    state.engine.shutdown().await;
}

#[tokio::test]
async fn a_conversation_with_no_route_is_not_compacted_between_turns() {
    let (state, store, provider) = engine(vec![
        Step::text("first answer"),
        Step::text("second answer"),
    ])
    .await;
    let session = conversation(&store, "api").await;
    let first = state
        .engine
        .submit(&session, "hello".into(), None)
        .await
        .unwrap();
    state.engine.wait(&first.run_id).await.unwrap();
    let second = state
        .engine
        .submit(&session, "and then?".into(), None)
        .await
        .unwrap();
    let report = state.engine.wait(&second.run_id).await.unwrap();
    assert_eq!(report.final_text.as_deref(), Some("second answer"));
    assert_eq!(provider.requests().len(), 2);
    let stored = store.messages("api").await.unwrap();
    assert!(stored.iter().all(|m| m.message.meta.summary_of.is_none()));
    state.engine.shutdown().await;
}
