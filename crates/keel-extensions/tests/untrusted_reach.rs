//! What an untrusted session (an email, an event) may call without asking: only idempotent
//! tools declared to stay inside the conversation. Reading the user's private data beyond the
//! conversation, reaching outside keel, and any tool that does not say what it reaches wait for
//! a person's approval, idempotent or not; the user's private memory (notes, known facts) is
//! not put in such a session's prompt. And a persona's `allowed_modules` withholds every tool
//! of another module, `delegate_task` and `memory` included.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use keel_core::RunOptions;
use keel_core::{
    Agent, AgentState, Reach, RunRequest, Tool, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use keel_extensions::AgentBuilderExt;
use keel_extensions::delegation::{DELEGATE_TASK, DelegationPolicy};
use keel_extensions::facts::{Recall, Recalled};
use keel_extensions::memory_notes::{
    InMemoryNotes, MEMORY, MemoryBackend, MemoryLimits, MemoryTarget,
};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::{Value, json};

/// An idempotent tool of the given reach that counts its calls.
struct Reader {
    spec: ToolSpec,
    calls: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Reader {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutput::text("read"))
    }
}

fn reader(reach: Reach) -> (Arc<dyn Tool>, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let spec = ToolSpec::new("look", "reads something", json!({"type": "object"}))
        .idempotent()
        .reach(reach);
    (
        Arc::new(Reader {
            spec,
            calls: calls.clone(),
        }),
        calls,
    )
}

async fn run_once(tool: Arc<dyn Tool>, session: &str) -> keel_core::RunReport {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::tool_call("look", json!({})),
        Step::text("done"),
    ]));
    let agent = Agent::builder()
        .provider(provider)
        .model("m")
        .store(Arc::new(MemoryStore::new()))
        .tool(tool)
        .build()
        .unwrap();
    agent
        .run(RunRequest::new("go").session(session))
        .await
        .unwrap()
}

#[tokio::test]
async fn an_untrusted_session_asks_before_reading_private_data_reaching_out_or_the_undeclared() {
    for (reach, why) in [
        (Reach::Private, "private data"),
        (Reach::Egress, "outside keel"),
        (Reach::Undeclared, "does not declare"),
    ] {
        let (tool, calls) = reader(reach);
        let report = run_once(tool, "email_trigger:mallory").await;
        assert_eq!(report.state, AgentState::WaitingOnHuman, "{reach:?}");
        let pending = report.approval.expect("the call waits for approval");
        assert_eq!(pending.tool, "look");
        assert!(
            pending.reason.contains("untrusted") && pending.reason.contains(why),
            "{reach:?}: {}",
            pending.reason
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "{reach:?} ran before approval"
        );
    }
}

#[tokio::test]
async fn an_untrusted_session_runs_a_conversation_tool_and_a_trusted_one_runs_them_all() {
    let (tool, calls) = reader(Reach::Conversation);
    let report = run_once(tool, "email_trigger:mallory").await;
    assert_eq!(report.state, AgentState::Completed, "{report:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    for reach in [Reach::Private, Reach::Egress, Reach::Undeclared] {
        let (tool, calls) = reader(reach);
        let report = run_once(tool, "cli-session").await;
        assert_eq!(report.state, AgentState::Completed, "{reach:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}

/// Recalls one known fact for anyone.
struct OneFact;

#[async_trait]
impl Recall for OneFact {
    async fn recall(&self, _user: &str, _session: &str, _message: &str) -> Recalled {
        Recalled {
            prompt_section: "Known facts:\n- the vault code is 4711".into(),
            detail: json!({}),
        }
    }
}

#[tokio::test]
async fn an_untrusted_session_is_not_shown_the_users_notes_or_facts() {
    let notes = Arc::new(InMemoryNotes::new());
    let note =
        keel_extensions::memory_notes::MemoryEdit::Add("the backup key is under the mat".into());
    notes
        .update(
            None,
            MemoryTarget::User,
            Box::new(move |current| {
                keel_extensions::memory_notes::apply_edit(current, &note, 1000)
            }),
        )
        .await
        .unwrap();
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        Step::text("trusted"),
        Step::text("untrusted"),
    ]));
    let agent = Agent::builder()
        .provider(provider.clone())
        .model("m")
        .system_prompt("be brief")
        .store(Arc::new(MemoryStore::new()))
        .memory(notes, MemoryLimits::default())
        .recall(Arc::new(OneFact))
        .build()
        .unwrap();
    agent
        .run(RunRequest::new("hi").session("cli"))
        .await
        .unwrap();
    agent
        .run(RunRequest::new("hi").session("email_trigger:mallory"))
        .await
        .unwrap();
    let requests = provider.requests();
    // Wherever the request puts them (the system prompt, or sections after it).
    let prompt = |i: usize| format!("{:?}", requests[i].messages);
    assert!(prompt(0).contains("under the mat") && prompt(0).contains("4711"));
    assert!(
        !prompt(1).contains("under the mat") && !prompt(1).contains("4711"),
        "{}",
        prompt(1)
    );
}

fn offered(provider: &ScriptedProvider) -> Vec<String> {
    provider.requests()[0]
        .tools
        .iter()
        .map(|tool| tool.name.clone())
        .collect()
}

#[tokio::test]
async fn a_persona_withholds_delegation_and_memory_unless_it_names_their_modules() {
    for (modules, expected) in [(vec!["files"], false), (vec!["delegation", "memory"], true)] {
        let provider = Arc::new(ScriptedProvider::from_steps(vec![Step::text("ok")]));
        let agent = Agent::builder()
            .provider(provider.clone())
            .model("m")
            .store(Arc::new(MemoryStore::new()))
            .delegation(DelegationPolicy::default())
            .memory(Arc::new(InMemoryNotes::new()), MemoryLimits::default())
            .build()
            .unwrap();
        assert!(
            agent.tool_modules().contains(&"delegation".to_string())
                && agent.tool_modules().contains(&"memory".to_string()),
            "{:?}",
            agent.tool_modules()
        );
        let mut request = RunRequest::new("go");
        request.options = RunOptions {
            allowed_modules: Some(modules.iter().map(|m| m.to_string()).collect()),
            ..RunOptions::default()
        };
        agent.run(request).await.unwrap();
        let names = offered(&provider);
        assert_eq!(
            names.contains(&DELEGATE_TASK.to_string()),
            expected,
            "{names:?}"
        );
        assert_eq!(names.contains(&MEMORY.to_string()), expected, "{names:?}");
    }
}
