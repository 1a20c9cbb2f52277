//! What the agent decides per message before a run: routing picks the model by the message's
//! tier unless one is named (a persona's model), prompt parts add sections to the system
//! prompt with their events, and a run whose prompt got a persona's text and sections resumes
//! after a crash without being taken for a changed configuration.

#[path = "../../keel-core/tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use keel_core::RunOptions;
use keel_core::event::MatchedSkill;
use keel_core::prompt_parts::{Placement, PromptPart, PromptRequest, PromptSection};
use keel_core::{Agent, AgentState, EventKind, EventLog, ResumeOptions, RunRequest, Store};
use keel_extensions::AgentBuilderExt;
use keel_extensions::routing::RoutingPolicy;
use keel_mock::{Script, ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::json;
use support::{ManualClock, waiter};

/// A part that adds the message's length, to show it saw the message.
struct Sizes;

#[async_trait]
impl PromptPart for Sizes {
    async fn section(&self, request: &PromptRequest<'_>) -> Option<PromptSection> {
        (!request.message.is_empty()).then(|| PromptSection {
            title: "Sizes".into(),
            text: format!("The message has {} characters.", request.message.len()),
            event: Some(EventKind::SkillsMatched {
                skills: vec![MatchedSkill {
                    name: "sizes".into(),
                    why: "always".into(),
                }],
                left_out: vec![],
            }),
        })
    }
}

/// A part that says the same for every message, in the system prompt.
struct Stable;

#[async_trait]
impl PromptPart for Stable {
    async fn section(&self, _: &PromptRequest<'_>) -> Option<PromptSection> {
        Some(PromptSection {
            title: "Project".into(),
            text: "The project builds with make.".into(),
            event: None,
        })
    }

    fn placement(&self) -> Placement {
        Placement::System
    }
}

fn policy() -> RoutingPolicy {
    RoutingPolicy {
        fast: Some("tiny".into()),
        primary: None,
        smart: Some("big".into()),
    }
}

#[tokio::test]
async fn routing_picks_the_tier_model_unless_one_is_named_and_parts_add_sections() {
    let provider = Arc::new(ScriptedProvider::new(
        Script::new(vec![Step::text("ok")]).with_per_turn(),
    ));
    let log = Arc::new(EventLog::new());
    let agent = Agent::builder()
        .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
        .provider(provider.clone())
        .model("m")
        .system_prompt("Base.")
        .routing(policy())
        .prompt_part(Arc::new(Sizes))
        .prompt_part(Arc::new(Stable))
        .event_sink(log.clone())
        .build()
        .unwrap();
    let fast = agent.run(RunRequest::new("hello")).await.unwrap();
    assert_eq!(fast.model, "tiny");
    let mut named = RunRequest::new("hello");
    named.options = RunOptions {
        model: Some("persona-model".into()),
        ..RunOptions::default()
    };
    assert_eq!(agent.run(named).await.unwrap().model, "persona-model");
    let ordinary = agent
        .run(RunRequest::new(
            "Tell me about the history of the printing press in Europe, briefly please.",
        ))
        .await
        .unwrap();
    assert_eq!(ordinary.model, "m", "no primary model: the agent's");

    let requests = provider.requests();
    assert_eq!(requests[0].model, "tiny");
    // A part placed in the system prompt is there; one chosen per message goes with the
    // message, so the system prompt is the same for every message.
    assert_eq!(
        requests[0].messages[0].content,
        "Base.\n\n## Project\nThe project builds with make."
    );
    assert!(
        requests
            .iter()
            .all(|r| r.messages[0].content == requests[0].messages[0].content)
    );
    assert_eq!(
        requests[0].messages[1].content,
        "<turn-context>\n## Sizes\nThe message has 5 characters.\n</turn-context>\n\nhello"
    );
    let routed: Vec<_> = log
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::RouteDecided { tier, model, .. } => Some((tier.to_string(), model)),
            _ => None,
        })
        .collect();
    assert_eq!(
        routed,
        [
            ("fast".into(), "tiny".into()),
            ("primary".into(), "m".into())
        ],
        "a named model is not routed"
    );
    assert_eq!(
        log.names()
            .iter()
            .filter(|n| **n == "agent.skills.matched")
            .count(),
        3
    );
}

#[tokio::test]
async fn a_persona_prompt_with_sections_resumes_without_a_drift_halt() {
    let clock = ManualClock::new();
    let store = Arc::new(MemoryStore::new());
    let entered = Arc::new(tokio::sync::Notify::new());
    let hang = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("wait", json!({})),
        Step::text("done"),
    ]));
    let agent = Arc::new(
        Agent::builder()
            .provider(provider.clone())
            .model("m")
            .system_prompt("be careful")
            .prompt_part(Arc::new(Sizes))
            .store(store.clone())
            .clock(clock.clone())
            .tool(waiter(hang.clone(), entered.clone()))
            .build()
            .unwrap(),
    );
    let mut request = RunRequest::new("go");
    request.options = RunOptions {
        system_prompt: Some("You are the billing persona.".into()),
        ..RunOptions::default()
    };
    let task = {
        let agent = agent.clone();
        tokio::spawn(async move { agent.run(request).await })
    };
    entered.notified().await;
    task.abort();
    let _ = task.await;
    hang.store(false, Ordering::SeqCst);
    clock.advance(Duration::from_secs(120));
    let run_id = store.list_runs(None, 1).await.unwrap()[0].id.clone();
    let done = agent
        .resume(&run_id, ResumeOptions::default())
        .await
        .unwrap();
    assert_eq!(done.state, AgentState::Completed, "{done:?}");
    // The resumed call still carries the persona's prompt, and the section with the message.
    let last = provider.requests().pop().unwrap();
    assert_eq!(last.messages[0].content, "You are the billing persona.");
    assert_eq!(
        last.messages[1].content,
        "<turn-context>\n## Sizes\nThe message has 2 characters.\n</turn-context>\n\ngo"
    );
}
