//! `Memory` over a store: facts are recalled for the user they belong to only, a dead
//! embeddings endpoint degrades recall to full text with a note instead of failing, the
//! `remember` and `forget` tools reach only their caller's facts, and bad input is refused
//! with nothing stored.

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::store::OWNER;
use keel_core::{Tool, ToolContext, ToolErrorKind};
use keel_extensions::facts::Recall;
use keel_memory::tools::{ForgetTool, RememberTool};
use keel_memory::{Embedder, FactError, Memory, NewFact};
use keel_platform::DaemonStore;
use keel_store::MemoryStore;
use serde_json::json;

/// The mock's deterministic embeddings, computed in process.
fn mock_embedder() -> keel_memory::embedding::InProcess {
    keel_memory::embedding::InProcess::new("mock-embed", keel_mock::embeddings::embed)
}

/// An endpoint that is down.
struct DeadEmbedder;

#[async_trait]
impl Embedder for DeadEmbedder {
    fn model(&self) -> &str {
        "dead-embed"
    }

    async fn embed(&self, _: &[String]) -> Result<Vec<Vec<f32>>, String> {
        Err("cannot connect to http://127.0.0.1:9".into())
    }
}

fn fact(text: &str) -> NewFact {
    NewFact {
        text: text.into(),
        ..NewFact::default()
    }
}

fn context(user: Option<&str>) -> ToolContext {
    ToolContext {
        session_id: "s1".into(),
        run_id: "r1".into(),
        call_id: "c1".into(),
        user_id: user.map(str::to_string),
        untrusted_source: false,
        place: None,
        cancel: Default::default(),
    }
}

#[tokio::test]
async fn another_users_facts_are_never_recalled() {
    let store: Arc<dyn DaemonStore> = Arc::new(MemoryStore::new());
    let memory = Memory::new(store).with_embedder(Arc::new(mock_embedder()));
    memory
        .remember("ada", fact("Ada's deploy target is eu-west-3"))
        .await
        .unwrap();
    memory
        .remember("bob", fact("Bob's deploy target is ap-south-1"))
        .await
        .unwrap();
    let recalled = memory
        .recall("bob", "now", "what is my deploy target?")
        .await;
    assert!(recalled.prompt_section.contains("ap-south-1"));
    assert!(!recalled.prompt_section.contains("eu-west-3"));
    let nobody = memory
        .recall("eve", "now", "what is the deploy target of ada?")
        .await;
    assert_eq!(nobody.prompt_section, "");
    assert_eq!(nobody.detail["facts"], 0);
}

#[tokio::test]
async fn a_dead_embeddings_endpoint_degrades_to_full_text_with_a_note() {
    let store: Arc<dyn DaemonStore> = Arc::new(MemoryStore::new());
    let memory = Memory::new(store).with_embedder(Arc::new(DeadEmbedder));
    let remembered = memory
        .remember(OWNER, fact("my deploy target is eu-west-3"))
        .await
        .unwrap();
    assert_eq!(remembered.fact.embedding, None);
    assert!(
        remembered
            .embedding_error
            .unwrap()
            .contains("cannot connect")
    );
    assert_eq!(remembered.fact.key.as_deref(), Some("deploy target"));
    let recalled = memory
        .recall(OWNER, "now", "what is my deploy target?")
        .await;
    assert!(recalled.prompt_section.contains("eu-west-3"));
    let degraded = recalled.detail["degraded"].to_string();
    assert!(
        degraded.contains("embeddings unavailable (dead-embed)"),
        "{degraded}"
    );
    assert!(
        degraded.contains("full text and recency alone"),
        "{degraded}"
    );
}

#[tokio::test]
async fn the_tools_reach_only_their_callers_facts() {
    let store: Arc<dyn DaemonStore> = Arc::new(MemoryStore::new());
    let memory = Arc::new(Memory::new(store.clone()));
    let remember = RememberTool::new(memory.clone());
    let forget = ForgetTool::new(memory.clone());
    let answer = remember
        .call(
            json!({"text": "The user's editor is Helix", "importance": 3.0}),
            &context(Some("ada")),
        )
        .await
        .unwrap();
    let answer: serde_json::Value = serde_json::from_str(&answer.content).unwrap();
    let id = answer["remembered"].as_str().unwrap().to_string();
    assert_eq!(answer["key"], "editor");
    let stored = store.facts("ada", false).await.unwrap();
    assert_eq!(stored[0].importance, 1.0, "importance is clamped to [0, 1]");
    assert_eq!(stored[0].source_session.as_deref(), Some("s1"));
    // A newer fact on the same subject replaces it, and says so.
    let answer = remember
        .call(
            json!({"text": "The user's editor is now Zed", "key": "Editor"}),
            &context(Some("ada")),
        )
        .await
        .unwrap();
    assert!(answer.content.contains(&id), "{}", answer.content);
    let current = store.facts("ada", false).await.unwrap();
    assert_eq!(current.len(), 1);
    let zed = current[0].id.clone();
    // Bob (and a run without a user) cannot forget Ada's fact.
    for user in [Some("bob"), None] {
        let error = forget
            .call(json!({"fact_id": zed}), &context(user))
            .await
            .unwrap_err();
        assert_eq!(error.kind, ToolErrorKind::InvalidArguments);
    }
    forget
        .call(json!({"fact_id": zed}), &context(Some("ada")))
        .await
        .unwrap();
    assert!(store.facts("ada", true).await.unwrap().is_empty());
}

#[tokio::test]
async fn bad_facts_are_refused_and_nothing_is_stored() {
    let store: Arc<dyn DaemonStore> = Arc::new(MemoryStore::new());
    let memory = Memory::new(store.clone());
    for bad in [
        fact("   "),
        fact(&"x".repeat(keel_platform::known_facts::MAX_FACT_CHARS + 1)),
        NewFact {
            key: Some("!!".into()),
            ..fact("fine text")
        },
    ] {
        assert!(matches!(
            memory.remember(OWNER, bad).await,
            Err(FactError::Invalid(_))
        ));
    }
    assert!(store.facts(OWNER, true).await.unwrap().is_empty());
    // Hostile query text is plain words.
    memory
        .remember(OWNER, fact("the deploy key lives in ops/keys"))
        .await
        .unwrap();
    for hostile in [
        "\"",
        "deploy\" OR *",
        "NEAR(deploy key)",
        "'; DROP TABLE facts; --",
    ] {
        memory.recall(OWNER, "now", hostile).await;
    }
    let huge = "deploy ".repeat(200_000);
    let recalled = memory.recall(OWNER, "now", &huge).await;
    assert!(recalled.prompt_section.contains("ops/keys"));
}

#[tokio::test]
async fn a_remember_call_in_a_run_records_the_runs_message_as_its_source() {
    use keel_core::{Agent, RunRequest};
    use keel_mock::{ScriptedProvider, Step};
    let store: Arc<dyn DaemonStore> = Arc::new(MemoryStore::new());
    let memory = Arc::new(Memory::new(store.clone()));
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call(
            "remember",
            json!({"text": "The user's deploy target is eu-west-3"}),
        ),
        Step::text("Noted."),
    ]));
    let agent = Agent::builder()
        .provider(provider)
        .model("m")
        .store(store.clone())
        .tools(keel_memory::tools::memory_tools(memory))
        .build()
        .unwrap();
    let history = [
        keel_core::Message::user("hi"),
        keel_core::Message::assistant("hello"),
    ];
    store.append_messages("s9", None, &history).await.unwrap();
    let report = agent
        .run(RunRequest::new("we deploy to eu-west-3 now").session("s9"))
        .await
        .unwrap();
    assert_eq!(report.state, keel_core::AgentState::Completed, "{report:?}");
    let facts = store.facts(OWNER, false).await.unwrap();
    assert_eq!(facts[0].source_session.as_deref(), Some("s9"));
    assert_eq!(facts[0].source_seq, Some(3), "the run's own message");
}
