//! The `memory` tool through an agent: a session's system prompt shows the notes as they were
//! when it started (what a run saves shows from the next session on, and the session keeps its
//! snapshot for every later run and resume), users are kept apart, and a write in an untrusted
//! session waits for a person's approval.

use std::sync::Arc;

use chrono::Utc;
use keel_core::{
    Agent, AgentState, ApprovalDecision, ChatRequest, Permission, RunRequest, Store, UserRecord,
};
use keel_extensions::AgentBuilderExt;
use keel_extensions::memory_notes::{InMemoryNotes, MemoryBackend, MemoryLimits, MemoryTarget};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::json;

const NOTE: &str = "the deploy script is deploy.sh";

async fn agent(provider: &Arc<ScriptedProvider>, notes: &Arc<InMemoryNotes>) -> Agent {
    // Stored users: a guest is not offered `memory` (it needs the `user` level).
    let store = Arc::new(MemoryStore::new());
    for id in ["ann", "bob"] {
        store
            .save_user(&UserRecord {
                id: id.into(),
                monthly_token_budget: None,
                created_at: Utc::now(),
                updated_at: Utc::now(),
                permission: Permission::User,
            })
            .await
            .unwrap();
    }
    Agent::builder()
        .provider(provider.clone())
        .model("m")
        .system_prompt("be brief")
        .store(store)
        .standard_extensions()
        .memory(notes.clone(), MemoryLimits::default())
        .build()
        .unwrap()
}

fn system(request: &ChatRequest) -> &str {
    &request.messages[0].content
}

#[tokio::test]
async fn a_note_shows_from_the_next_session_on_and_only_to_its_user() {
    let notes = Arc::new(InMemoryNotes::new());
    let provider = Arc::new(ScriptedProvider::new(Script::new(vec![
        Step::tool_call(
            "memory",
            json!({"action": "add", "target": "memory", "text": NOTE}),
        ),
        Step::text("saved"),
        Step::text("same session"),
        Step::text("new session"),
        Step::text("other user"),
    ])));
    let agent = agent(&provider, &notes).await;
    let first = agent
        .run(RunRequest::new("remember").user("ann"))
        .await
        .unwrap();
    assert_eq!(first.state, AgentState::Completed);
    assert_eq!(
        notes.read(Some("ann"), MemoryTarget::Memory).await.unwrap(),
        NOTE
    );
    let same = agent
        .run(
            RunRequest::new("again")
                .user("ann")
                .session(&first.session_id),
        )
        .await
        .unwrap();
    assert_eq!(same.final_text.as_deref(), Some("same session"));
    agent.run(RunRequest::new("hi").user("ann")).await.unwrap();
    agent.run(RunRequest::new("hi").user("bob")).await.unwrap();
    let requests = provider.requests();
    assert_eq!(requests.len(), 5);
    for request in &requests[..3] {
        assert_eq!(
            system(request),
            "be brief",
            "the session started before the note"
        );
    }
    assert!(
        system(&requests[3]).starts_with("be brief\n\n# Your durable memory")
            && system(&requests[3]).contains(NOTE),
        "{}",
        system(&requests[3])
    );
    assert_eq!(system(&requests[4]), "be brief", "bob's notes are his own");
    let tools: Vec<&str> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert!(
        tools.contains(&"memory") && tools.contains(&"todo"),
        "{tools:?}"
    );
}

#[tokio::test]
async fn a_write_in_an_untrusted_session_waits_for_approval_and_the_prompt_stays_the_same() {
    let notes = Arc::new(InMemoryNotes::new());
    let seed = keel_extensions::memory_notes::MemoryEdit::Add("an older note".into());
    notes
        .update(
            None,
            MemoryTarget::Memory,
            Box::new(move |current| keel_extensions::memory_notes::apply_edit(current, &seed, 100)),
        )
        .await
        .unwrap();
    let provider = Arc::new(ScriptedProvider::new(Script::new(vec![
        Step::tool_call(
            "memory",
            json!({"action": "add", "target": "memory", "text": NOTE}),
        ),
        Step::text("saved"),
    ])));
    let agent = agent(&provider, &notes).await;
    let waiting = agent
        .run(RunRequest::new("remember").session("event_0001"))
        .await
        .unwrap();
    assert_eq!(waiting.state, AgentState::WaitingOnHuman, "{waiting:?}");
    assert_eq!(waiting.approval.as_ref().unwrap().tool, "memory");
    assert_eq!(
        notes.read(None, MemoryTarget::Memory).await.unwrap(),
        "an older note",
        "nothing written before the approval"
    );
    let call_id = waiting.approval.as_ref().unwrap().call_id.clone();
    let done = agent
        .approve(
            &waiting.run_id,
            &call_id,
            ApprovalDecision::ApproveOnce,
            false,
        )
        .await
        .unwrap();
    assert_eq!(done.state, AgentState::Completed, "{done:?}");
    assert!(
        notes
            .read(None, MemoryTarget::Memory)
            .await
            .unwrap()
            .ends_with(NOTE)
    );
    let requests = provider.requests();
    // An untrusted session is never shown the user's notes.
    assert!(!system(&requests[0]).contains("an older note"));
    assert_eq!(
        system(&requests[0]),
        system(&requests[1]),
        "the prompt stays the same"
    );
}
