//! The run journal's tools across turns: what a run kept in the journal survives its iteration
//! limit into the next turn, and the journal's updates are checkpointed.

use std::sync::Arc;

use keel_core::{Agent, AgentState, Boundary, RunRequest, Store};
use keel_extensions::AgentBuilderExt;
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::json;

#[tokio::test]
async fn the_journal_survives_an_iteration_limit_into_the_next_turn() {
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call(
            "update_run_journal",
            json!({"objective": "Count the files", "handoff_next_action": "count src/"}),
        ),
        Step::tool_call(
            "append_run_journal_entry",
            json!({"section": "verified_findings", "entry": "docs/ has 4 files"}),
        ),
        Step::text("Counted docs and src: 9 files."),
    ]));
    let agent = Agent::builder()
        .standard_extensions()
        .provider(provider.clone())
        .model("m")
        .store(store.clone())
        .max_iterations(2)
        .iteration_cap(2)
        .build()
        .unwrap();
    let first = agent.run(RunRequest::new("count the files")).await.unwrap();
    assert_eq!(first.state, AgentState::MaxSteps);
    let journal = store.journal(&first.session_id).await.unwrap().unwrap();
    assert_eq!(journal.objective, "Count the files");
    assert_eq!(journal.handoff().unwrap().lines().count(), 3);

    let second = agent
        .run(RunRequest::new("go on").session(first.session_id.clone()))
        .await
        .unwrap();
    assert_eq!(second.state, AgentState::Completed);
    let sent = &provider.requests()[2].messages;
    // The full journal goes with the new message; the system prompt is not touched by it.
    let last = &sent.last().unwrap().content;
    assert!(
        last.contains("## Objective\nCount the files")
            && last.contains("- docs/ has 4 files")
            && last.ends_with("</turn-context>\n\ngo on"),
        "the full journal with the message: {last}"
    );
    assert!(
        sent.iter()
            .all(|m| m.role != keel_core::Role::System || !m.content.contains("Count the files"))
    );
    let checkpoints = store.checkpoints(&first.run_id).await.unwrap();
    assert!(
        checkpoints
            .iter()
            .any(|c| c.boundary == Boundary::JournalUpdate)
    );
}
