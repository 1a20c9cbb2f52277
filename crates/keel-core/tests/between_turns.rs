//! Compaction between turns (seed 004's gateway compression, issue 33): a stored conversation
//! above the share is compacted by `Agent::compact_between_turns` with the run's own summary,
//! so its next run makes its first model call with no summary call before it; below the share,
//! or while a run holds the lane, nothing happens.

use std::sync::Arc;

use keel_core::context::{self, ContextSettings};
use keel_core::{
    Agent, AgentState, BetweenTurns, InternalReason, LaneClaim, LaneOutcome, Message, RunRequest,
    Store,
};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;

const WINDOW: u32 = 4_000;

/// An agent with a 4,000-token window.
fn agent(provider: Arc<ScriptedProvider>, store: Arc<MemoryStore>) -> Agent {
    Agent::builder()
        .provider(provider)
        .model("m")
        .system_prompt("answer briefly")
        .store(store)
        .context(ContextSettings {
            window: Some(WINDOW),
            ..ContextSettings::default()
        })
        .build()
        .unwrap()
}

/// A stored conversation of `exchanges` questions and answers of about 150 tokens each.
async fn conversation(store: &MemoryStore, session: &str, exchanges: usize) {
    store.ensure_session(session).await.unwrap();
    let long = |what: &str, i: usize| format!("{what} {i}:{}", " word".repeat(150));
    let messages: Vec<Message> = (0..exchanges)
        .flat_map(|i| {
            [
                Message::user(long("question", i)),
                Message::assistant(long("answer", i)),
            ]
        })
        .collect();
    store
        .append_messages(session, None, &messages)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_conversation_above_the_share_is_compacted_and_its_next_run_calls_the_model_at_once() {
    let store = Arc::new(MemoryStore::new());
    conversation(&store, "s", 12).await;
    let before = store.messages("s").await.unwrap().len();
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::text("They asked 12 questions about words."),
        Step::text("the next answer"),
    ]));
    let agent = agent(provider.clone(), store.clone());

    let report = agent
        .compact_between_turns(BetweenTurns::new("s", 0.85))
        .await
        .unwrap()
        .expect("compacted");
    assert!(
        report.before_tokens * 100 > u64::from(WINDOW) * 85,
        "{report:?}"
    );
    assert!(report.after_tokens < report.before_tokens, "{report:?}");
    // One call: the summary's, made as a run's compaction makes it.
    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].messages[0].content,
        context::SUMMARY_INSTRUCTIONS
    );
    assert!(requests[0].tools.is_empty());
    // The summary is stored as a run's compaction stores it, by no stored run.
    let messages = store.messages("s").await.unwrap();
    assert_eq!(messages.len(), before + 1);
    let summary = messages.last().unwrap();
    assert_eq!(
        summary.message.meta.internal,
        Some(InternalReason::CompactionSummary)
    );
    assert_eq!(summary.message.meta.summary_of, Some(report.summary_of));
    assert_eq!(report.summary_of.first, 1);
    assert!(summary.message.content.contains("They asked 12 questions"));
    assert!(report.holder.starts_with("compaction-"));
    assert_eq!(store.run(&report.holder).await.unwrap(), None);
    // The lane is free again.
    let claim = LaneClaim {
        session_id: "s",
        run_id: "next",
        worker: "test",
        at: chrono::Utc::now(),
        stale_after: chrono::Duration::seconds(60),
    };
    assert_eq!(
        store.claim_session(&claim).await.unwrap(),
        LaneOutcome::Claimed
    );
    store.release_session("s", "next").await.unwrap();

    // The next run's first call is the model's answer: no summary call before it.
    let next = agent
        .run(RunRequest::new("one more question").session("s"))
        .await
        .unwrap();
    assert_eq!(next.state, AgentState::Completed, "{next:?}");
    assert_eq!(next.final_text.as_deref(), Some("the next answer"));
    let requests = provider.requests();
    assert_eq!(requests.len(), 2, "a summary call came before the answer");
    let sent = &requests[1].messages;
    assert!(
        sent.iter()
            .any(|m| m.content.contains("They asked 12 questions")),
        "the summary is sent"
    );
    assert!(!sent.iter().any(|m| m.content.starts_with("question 0:")));
}

#[tokio::test]
async fn a_conversation_below_the_share_is_left_as_it_is() {
    let store = Arc::new(MemoryStore::new());
    conversation(&store, "s", 6).await;
    let provider = Arc::new(ScriptedProvider::from_steps(Vec::new()));
    let agent = agent(provider.clone(), store.clone());
    let done = agent
        .compact_between_turns(BetweenTurns::new("s", 0.85))
        .await
        .unwrap();
    assert_eq!(done, None);
    assert!(provider.requests().is_empty());
    assert_eq!(store.messages("s").await.unwrap().len(), 12);
    // Off, and an unknown conversation: nothing either.
    let off = agent
        .compact_between_turns(BetweenTurns::new("s", 0.0))
        .await
        .unwrap();
    assert_eq!(off, None);
    let unknown = agent
        .compact_between_turns(BetweenTurns::new("nobody", 0.85))
        .await
        .unwrap();
    assert_eq!(unknown, None);
    assert!(store.session("nobody").await.unwrap().is_none());
}

#[tokio::test]
async fn a_conversation_whose_lane_a_run_holds_is_left_alone() {
    let store = Arc::new(MemoryStore::new());
    conversation(&store, "s", 12).await;
    let claim = LaneClaim {
        session_id: "s",
        run_id: "running",
        worker: "test",
        at: chrono::Utc::now(),
        stale_after: chrono::Duration::seconds(60),
    };
    assert_eq!(
        store.claim_session(&claim).await.unwrap(),
        LaneOutcome::Claimed
    );
    let provider = Arc::new(ScriptedProvider::from_steps(Vec::new()));
    let agent = agent(provider.clone(), store.clone());
    let done = agent
        .compact_between_turns(BetweenTurns::new("s", 0.85))
        .await
        .unwrap();
    assert_eq!(done, None);
    assert!(provider.requests().is_empty());
    assert_eq!(store.messages("s").await.unwrap().len(), 24);
    // The run still holds its lane.
    let mut again = claim;
    again.run_id = "other";
    assert!(matches!(
        store.claim_session(&again).await.unwrap(),
        LaneOutcome::Busy(holder) if holder.run_id == "running"
    ));
}
