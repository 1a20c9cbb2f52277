//! Tools per caller: a run offers only the tools the caller's permission reaches (no user: the
//! machine's owner; a stored user: their level; an unknown user: a guest), says which in
//! `agent.tools.offered`, and refuses — never runs — a call to a registered tool it did not
//! offer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use chrono::Utc;
use keel_core::{
    Agent, EventKind, EventLog, Permission, RunRequest, Store, Tool, ToolContext, ToolError,
    ToolOutput, ToolSpec, UserRecord,
};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::{Value, json};

/// A tool that needs `level` and counts its calls.
struct Counted {
    spec: ToolSpec,
    calls: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Counted {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutput::text("done"))
    }
}

fn counted(name: &str, level: Permission, calls: &Arc<AtomicUsize>) -> Arc<dyn Tool> {
    let mut spec = ToolSpec::new(name, "does a thing", json!({"type": "object"}));
    spec.required_permission = level;
    Arc::new(Counted {
        spec,
        calls: calls.clone(),
    })
}

async fn run_as(user: Option<(&str, Option<Permission>)>) -> (Vec<String>, usize, String) {
    let store = Arc::new(MemoryStore::new());
    if let Some((id, Some(permission))) = user {
        store
            .save_user(&UserRecord {
                id: id.into(),
                monthly_token_budget: None,
                created_at: Utc::now(),
                updated_at: Utc::now(),
                permission,
            })
            .await
            .unwrap();
    }
    let calls = Arc::new(AtomicUsize::new(0));
    let events = Arc::new(EventLog::default());
    // The model calls the admin tool whether or not it was offered (a crafted call).
    let script = Script::new(vec![
        Step::tool_call("admin_tool", json!({})),
        Step::text("finished"),
    ]);
    let provider = Arc::new(ScriptedProvider::new(script));
    let agent = Agent::builder()
        .provider(provider.clone())
        .model("m")
        .store(store.clone())
        .tool(counted("user_tool", Permission::User, &calls))
        .tool(counted("admin_tool", Permission::Admin, &calls))
        .event_sink(events.clone())
        .build()
        .unwrap();
    let mut request = RunRequest::new("go");
    request.user_id = user.map(|(id, _)| id.to_string());
    let report = agent.run(request).await.unwrap();
    let offered = events
        .events()
        .into_iter()
        .find_map(|event| match event.kind {
            EventKind::ToolsOffered { tools, .. } => Some(tools),
            _ => None,
        })
        .unwrap();
    let output = report.tool_calls[0].output.clone();
    (offered, calls.load(Ordering::SeqCst), output)
}

#[tokio::test]
async fn each_caller_gets_the_tools_its_permission_reaches_and_no_other() {
    let (offered, calls, _) = run_as(None).await;
    assert!(
        offered.contains(&"admin_tool".to_string()),
        "the owner: {offered:?}"
    );
    assert_eq!(calls, 1);

    let (offered, calls, _) = run_as(Some(("ada", Some(Permission::Admin)))).await;
    assert!(offered.contains(&"admin_tool".to_string()), "{offered:?}");
    assert_eq!(calls, 1);

    let (offered, calls, output) = run_as(Some(("bob", Some(Permission::User)))).await;
    assert!(offered.contains(&"user_tool".to_string()), "{offered:?}");
    assert!(!offered.contains(&"admin_tool".to_string()), "{offered:?}");
    assert_eq!(calls, 0, "a crafted call to a tool not offered is not run");
    assert!(output.contains("not one of your tools"), "{output}");

    let (offered, calls, _) = run_as(Some(("stranger", None))).await;
    assert!(
        !offered
            .iter()
            .any(|t| t == "user_tool" || t == "admin_tool"),
        "an unknown user is a guest: {offered:?}"
    );
    assert_eq!(calls, 0);
}
