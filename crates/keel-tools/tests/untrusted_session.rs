//! keel's own tools in an untrusted session (an email, an event), through an agent over the
//! in-memory store: the tools that read beyond the conversation (`session_search`) or reach
//! outside keel (`http_get`) wait for a person's approval although they are idempotent, so a
//! prompt-injected email can neither read the user's other conversations nor send anything
//! out; the tools that stay inside the conversation (`read_file`, `list_dir`,
//! `read_attachment`, the skill tools) run without asking. Every built-in tool declares
//! what it reaches.

use std::net::TcpListener;
use std::sync::Arc;

use keel_core::{Agent, AgentState, Reach, RunReport, RunRequest, Tool, ToolSpec};
use keel_mock::{ScriptedProvider, Step};
use keel_platform::DaemonStore;
use keel_store::MemoryStore;
use keel_tools::{
    HttpGet, HttpGetConfig, ReadAttachment, SessionSearchTool, SkillSet, Workspace, file_tools,
    skill_tools,
};
use serde_json::{Value, json};

struct Setup {
    workspace: tempfile::TempDir,
    store: Arc<MemoryStore>,
    /// Where `http_get` is pointed; nothing may connect to it.
    listener: TcpListener,
}

impl Setup {
    fn new() -> Setup {
        let workspace = tempfile::tempdir().unwrap();
        std::fs::write(workspace.path().join("notes.txt"), "in the workspace").unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        Setup {
            workspace,
            store: Arc::new(MemoryStore::new()),
            listener,
        }
    }

    fn url(&self) -> String {
        format!(
            "http://{}/?q=the-secret",
            self.listener.local_addr().unwrap()
        )
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let workspace = Arc::new(Workspace::new(self.workspace.path()).unwrap());
        let store: Arc<dyn DaemonStore> = self.store.clone();
        let mut tools = file_tools(workspace);
        tools.push(Arc::new(HttpGet::new(HttpGetConfig {
            allow_private: true,
            ..HttpGetConfig::default()
        })));
        tools.push(Arc::new(SessionSearchTool::new(store.clone())));
        tools.push(Arc::new(ReadAttachment::new(store)));
        tools.extend(skill_tools(Arc::new(SkillSet::from_skills(Vec::new()))));
        tools
    }

    /// One run in `session` whose model calls `tool` with `args`, then answers.
    async fn run(&self, session: &str, tool: &str, args: Value) -> RunReport {
        let provider = Arc::new(ScriptedProvider::from_steps(vec![
            Step::tool_call(tool, args),
            Step::text("done"),
        ]));
        let agent = Agent::builder()
            .provider(provider)
            .model("m")
            .store(self.store.clone())
            .tools(self.tools())
            .build()
            .unwrap();
        agent
            .run(RunRequest::new("read this email").session(session))
            .await
            .unwrap()
    }

    fn reached(&self) -> bool {
        self.listener.accept().is_ok()
    }
}

const UNTRUSTED: &str = "email_trigger:mallory";

#[tokio::test]
async fn searching_the_users_other_conversations_waits_for_approval() {
    let setup = Setup::new();
    let report = setup
        .run(UNTRUSTED, "session_search", json!({"query": "password"}))
        .await;
    assert_eq!(report.state, AgentState::WaitingOnHuman, "{report:?}");
    let pending = report.approval.clone().unwrap();
    assert_eq!(pending.tool, "session_search");
    assert!(
        pending.reason.contains("private data"),
        "{}",
        pending.reason
    );
    assert!(report.tool_calls.is_empty(), "it ran: {report:?}");
}

#[tokio::test]
async fn fetching_a_url_waits_for_approval_and_nothing_leaves() {
    let setup = Setup::new();
    let report = setup
        .run(UNTRUSTED, "http_get", json!({"url": setup.url()}))
        .await;
    assert_eq!(report.state, AgentState::WaitingOnHuman, "{report:?}");
    let pending = report.approval.unwrap();
    assert_eq!(pending.tool, "http_get");
    assert!(
        pending.reason.contains("outside keel"),
        "{}",
        pending.reason
    );
    assert!(!setup.reached(), "the request went out");
}

#[tokio::test]
async fn the_tools_that_stay_in_the_conversation_run_without_asking() {
    let setup = Setup::new();
    for (tool, args) in [
        ("read_file", json!({"path": "notes.txt"})),
        ("list_dir", json!({"path": "."})),
        ("read_attachment", json!({"name": "nothing.txt"})),
        ("skills_list", json!({})),
    ] {
        let report = setup.run(UNTRUSTED, tool, args).await;
        assert_eq!(report.state, AgentState::Completed, "{tool}: {report:?}");
        assert_eq!(report.tool_calls.len(), 1, "{tool}");
    }
    // A trusted session searches and fetches without asking.
    let report = setup
        .run("cli", "session_search", json!({"query": "password"}))
        .await;
    assert_eq!(report.state, AgentState::Completed, "{report:?}");
}

#[test]
fn the_idempotent_built_in_tools_declare_what_they_reach() {
    let setup = Setup::new();
    let mut declared: Vec<(String, Reach)> = setup
        .tools()
        .iter()
        .map(|tool| tool.spec())
        .filter(|spec: &&ToolSpec| spec.idempotent)
        .map(|spec| (spec.name.clone(), spec.reach))
        .collect();
    declared.sort_by(|a, b| a.0.cmp(&b.0));
    let expected = [
        ("http_get", Reach::Egress),
        ("list_dir", Reach::Conversation),
        ("read_attachment", Reach::Conversation),
        ("read_file", Reach::Conversation),
        ("session_search", Reach::Private),
        ("skill_view", Reach::Conversation),
        ("skills_list", Reach::Conversation),
    ]
    .map(|(name, reach)| (name.to_string(), reach));
    assert_eq!(declared, expected);
}
