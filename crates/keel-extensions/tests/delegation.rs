//! Sub-agents in process: what they spend counts against the parent run's budget and the
//! user's month, a sub-agent's call that needs approval is denied at once, and the library's
//! own builder refuses an absurd delegation policy.

#[path = "../../keel-core/tests/support/mod.rs"]
mod support;

use std::sync::Arc;

use chrono::Utc;
use keel_core::budget::Budgets;
use keel_core::store::UserRecord;
use keel_core::{Agent, AgentState, Permission, RunRequest, Store};
use keel_extensions::AgentBuilderExt;
use keel_extensions::delegation::DelegationPolicy;
use keel_mock::{Script, ScriptedProvider, Step};
use keel_store::MemoryStore;
use serde_json::json;

const CHILD: &str = "child-model";

fn agent(provider: Arc<ScriptedProvider>, store: Arc<MemoryStore>) -> Agent {
    Agent::builder()
        .provider(provider)
        .model("m")
        .store(store)
        .system_prompt("test")
        .budgets(Budgets {
            token_budget: Some(500),
            ..Budgets::default()
        })
        .delegation(DelegationPolicy {
            model: Some(CHILD.into()),
            ..DelegationPolicy::default()
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn what_children_spend_counts_against_the_parent_run_and_the_user() {
    let script = Script::new(vec![
        Step::tool_call("delegate_task", json!({"goal": "spend a lot"})).with_usage(50, 5),
        Step::text("never reached").with_usage(1, 1),
    ])
    .with_model(CHILD, vec![Step::text("spent").with_usage(1000, 10)]);
    let provider = Arc::new(ScriptedProvider::new(script));
    let store = Arc::new(MemoryStore::new());
    let now = Utc::now();
    store
        .save_user(&UserRecord {
            id: "ada".into(),
            monthly_token_budget: None,
            created_at: now,
            updated_at: now,
            permission: Permission::User,
        })
        .await
        .unwrap();
    let agent = agent(provider.clone(), store.clone());
    let report = agent.run(RunRequest::new("go").user("ada")).await.unwrap();

    // The child answered; its 1010 tokens put the parent over its 500 before its next call.
    assert_eq!(report.tool_calls[0].output.lines().last(), Some("spent"));
    assert_eq!(report.state, AgentState::BudgetExceeded, "{report:?}");
    assert_eq!(report.usage.total(), 55 + 1010);
    assert_eq!(
        provider.requests().len(),
        2,
        "the parent made no second call"
    );
    // The user's month has both runs' tokens, each counted once.
    let month = keel_core::token_log::usage_month(now);
    assert_eq!(
        store.monthly_usage("ada", &month).await.unwrap().total(),
        55 + 1010
    );
    // The child ran as the same user, under a token budget of what the parent had left.
    let child = store
        .list_runs(None, 10)
        .await
        .unwrap()
        .into_iter()
        .find(|run| run.session_id.starts_with("sub-1-"))
        .unwrap();
    assert_eq!(child.state, AgentState::Completed);
}

#[test]
fn the_builder_refuses_an_absurd_policy() {
    let provider = Arc::new(ScriptedProvider::from_steps(vec![]));
    let built = Agent::builder()
        .store(std::sync::Arc::new(keel_store::MemoryStore::new()))
        .provider(provider)
        .model("m")
        .delegation(DelegationPolicy {
            max_parallel: 0,
            ..DelegationPolicy::default()
        })
        .build();
    let Err(error) = built else {
        panic!("built with max_parallel = 0")
    };
    assert!(error.to_string().contains("max_parallel"), "{error}");
}

#[tokio::test]
async fn a_run_continuing_a_stored_sub_agent_session_at_max_depth_cannot_delegate() {
    // A top-level run in a stored `sub-2-…` session is at depth 2: the tool filter of a child
    // never saw it, so `delegate_task` is offered, and the delegator's own depth check must
    // refuse the call.
    let script = Script::new(vec![
        Step::tool_call("delegate_task", json!({"goal": "go deeper"})),
        Step::text("did it myself"),
    ])
    .with_model(CHILD, vec![Step::text("a grandchild ran").repeat_forever()]);
    let provider = Arc::new(ScriptedProvider::new(script));
    let store = Arc::new(MemoryStore::new());
    let agent = Agent::builder()
        .provider(provider.clone())
        .model("m")
        .store(store.clone())
        .delegation(DelegationPolicy {
            model: Some(CHILD.into()),
            ..DelegationPolicy::default()
        })
        .build()
        .unwrap();
    let session = "sub-2-0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000";
    let report = agent
        .run(RunRequest::new("continue").session(session))
        .await
        .unwrap();

    assert_eq!(report.state, AgentState::Completed, "{report:?}");
    let call = &report.tool_calls[0];
    assert_eq!(call.name, "delegate_task");
    assert!(!call.ok);
    assert!(
        call.output.contains("sub-agent at depth 2")
            && call.output.contains("delegation stops at depth 2"),
        "{}",
        call.output
    );
    let runs = store.list_runs(None, 10).await.unwrap();
    assert_eq!(runs.len(), 1, "no sub-agent was started: {runs:?}");
    assert!(
        provider.requests().iter().all(|r| r.model != CHILD),
        "the child model was never called"
    );
}

#[tokio::test]
async fn parallel_children_share_what_the_parent_has_left() {
    // The parent spends 1000 of its 2500 on the call that delegates three tasks; each child
    // call reports 1000 more and asks for another tool call, for as long as it may go on.
    let tasks: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|goal| json!({"goal": format!("work on {goal}")}))
        .collect();
    let script = Script::new(vec![
        Step::tool_call("delegate_task", json!({ "tasks": tasks })).with_usage(500, 500),
        Step::text("never reached").with_usage(1, 1),
    ])
    .with_model(
        CHILD,
        vec![
            Step::tool_call("echo", json!({"text": "more"}))
                .with_usage(500, 500)
                .repeat_forever(),
        ],
    );
    let provider = Arc::new(ScriptedProvider::new(script));
    let store = Arc::new(MemoryStore::new());
    let agent = Agent::builder()
        .provider(provider.clone())
        .model("m")
        .store(store.clone())
        .tool(support::Echo::tool())
        .budgets(Budgets {
            token_budget: Some(2500),
            ..Budgets::default()
        })
        .delegation(DelegationPolicy {
            model: Some(CHILD.into()),
            ..DelegationPolicy::default()
        })
        .build()
        .unwrap();
    let report = agent.run(RunRequest::new("go")).await.unwrap();

    let runs = store.list_runs(None, 10).await.unwrap();
    let children: Vec<_> = runs
        .iter()
        .filter(|run| run.session_id.starts_with("sub-1-"))
        .collect();
    assert_eq!(children.len(), 3, "{runs:?}");
    let spent: u64 = runs
        .iter()
        .filter(|r| r.id != report.run_id)
        .map(|r| r.usage.total())
        .sum::<u64>()
        + 1000;
    // Never more than one call's worth over the parent's budget (each child used to get the
    // whole 1500 left: 7000 in all).
    assert!(spent <= 2500 + 1000, "the tree spent {spent}");
    assert_eq!(
        report.usage.total(),
        spent,
        "the parent counts what its children spent"
    );
    assert_eq!(report.state, AgentState::BudgetExceeded, "{report:?}");
    // The children that could not go on say why, and the parent is told.
    let stopped: Vec<_> = children
        .iter()
        .filter(|child| child.state == AgentState::BudgetExceeded)
        .collect();
    assert!(!stopped.is_empty(), "{children:?}");
    let errors: Vec<&str> = stopped
        .iter()
        .map(|child| child.error.as_deref().unwrap_or_default())
        .collect();
    assert!(errors.iter().all(|e| e.contains("budget")), "{errors:?}");
    // At least one was refused its call by the shared budget, not by its own: the others'
    // spending stopped it.
    assert!(
        errors
            .iter()
            .any(|e| e.contains("shares with its parent run and the other sub-agents")),
        "{errors:?}"
    );
    let result = &report.tool_calls[0].output;
    assert!(
        result.contains("budget_exceeded")
            && result.contains("the budget it shares with you and the other sub-agents ran out"),
        "{result}"
    );
}

#[tokio::test]
async fn a_child_whose_model_is_gone_falls_back_to_the_parents_model() {
    let script = Script::new(vec![
        Step::tool_call("delegate_task", json!({"goal": "look it up"})).with_usage(5, 5),
        // The child's call, on the parent's model once its own is gone.
        Step::text("found it on the parent's model").with_usage(5, 5),
        Step::text("the child found it").with_usage(5, 5),
    ])
    .with_model(CHILD, vec![Step::error(404).repeat_forever()]);
    let provider = Arc::new(ScriptedProvider::new(script));
    let store = Arc::new(MemoryStore::new());
    let report = agent(provider.clone(), store.clone())
        .run(RunRequest::new("go"))
        .await
        .unwrap();

    assert_eq!(report.state, AgentState::Completed, "{report:?}");
    let result = &report.tool_calls[0].output;
    assert!(report.tool_calls[0].ok, "{result}");
    assert!(
        result.ends_with("found it on the parent's model"),
        "{result}"
    );
    let models: Vec<String> = provider.requests().into_iter().map(|r| r.model).collect();
    assert_eq!(models, ["m", CHILD, "m", "m"]);
}

#[tokio::test(start_paused = true)]
async fn children_resumed_after_a_crash_share_what_the_parent_has_left() {
    // As above, but each child then waits in a long tool call when the process dies.
    let tasks: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|goal| json!({"goal": format!("work on {goal}")}))
        .collect();
    let script = Script::new(vec![
        Step::tool_call("delegate_task", json!({ "tasks": tasks })).with_usage(500, 500),
        Step::text("never reached").with_usage(1, 1),
    ])
    .with_model(
        CHILD,
        vec![
            Step::tool_call("slow", json!({"ms": 1_000_000, "tag": "x"}))
                .with_usage(500, 500)
                .repeat_forever(),
        ],
    );
    let provider = Arc::new(ScriptedProvider::new(script));
    let store = Arc::new(MemoryStore::new());
    let agent = Agent::builder()
        .provider(provider.clone())
        .model("m")
        .store(store.clone())
        .tool(support::Slow::tool(None))
        .budgets(Budgets {
            token_budget: Some(2500),
            ..Budgets::default()
        })
        .delegation(DelegationPolicy {
            model: Some(CHILD.into()),
            ..DelegationPolicy::default()
        })
        .build()
        .unwrap();
    let request = RunRequest {
        run_id: Some("parent-1".into()),
        ..RunRequest::new("go")
    };
    // The process dies while the children wait in their tools.
    let crashed =
        tokio::time::timeout(std::time::Duration::from_secs(10), agent.run(request)).await;
    assert!(crashed.is_err(), "the run was cut off");

    let options = keel_core::ResumeOptions {
        force: true,
        ..keel_core::ResumeOptions::default()
    };
    let report = agent.resume("parent-1", options).await.unwrap();
    let runs = store.list_runs(None, 10).await.unwrap();
    let children: u64 = runs
        .iter()
        .filter(|run| run.session_id.starts_with("sub-1-"))
        .map(|run| run.usage.total())
        .sum();
    // The resumed children found what they had spent before the crash already counted: no
    // more calls (each alone used to make one more with its own copy of the 1500 left).
    assert!(
        1000 + children <= 2500 + 1000,
        "the tree spent {}",
        1000 + children
    );
    assert_eq!(report.state, AgentState::BudgetExceeded, "{report:?}");
}

#[tokio::test]
async fn a_sub_agent_call_needing_approval_is_denied_and_the_child_ends() {
    // Nobody decides a sub-agent's calls: before, the child paused `waiting_on_human` for good
    // while its parent went on. Now the call is denied at once, the child finishes, and the
    // parent hears what needed approval.
    const CHILD: &str = "child-model";
    let script = keel_mock::Script::new(vec![
        Step::tool_call("delegate_task", json!({"goal": "clean up"})),
        Step::text("parent done"),
    ])
    .with_model(
        CHILD,
        vec![
            Step::tool_call("append", json!({"text": "danger zone"})),
            Step::text("could not clean up"),
        ],
    );
    let provider = Arc::new(ScriptedProvider::new(script));
    let store = Arc::new(MemoryStore::new());
    let appender = support::Appender::default();
    let agent = Agent::builder()
        .provider(provider.clone())
        .model("m")
        .store(store.clone())
        .tool(Arc::new(support::Guarded(appender.tool())))
        .delegation(DelegationPolicy {
            model: Some(CHILD.into()),
            ..Default::default()
        })
        .build()
        .unwrap();
    let report = agent.run(RunRequest::new("go")).await.unwrap();
    assert_eq!(report.state, AgentState::Completed, "{report:?}");
    assert!(
        appender.lines().is_empty(),
        "the child's call ran unapproved"
    );
    let child = store
        .list_runs(None, 10)
        .await
        .unwrap()
        .into_iter()
        .find(|run| run.session_id.starts_with("sub-1-"))
        .unwrap();
    assert_eq!(child.state, AgentState::Completed, "{child:?}");
    assert_eq!(child.final_text.as_deref(), Some("could not clean up"));
    let told = provider
        .requests()
        .iter()
        .map(|r| serde_json::to_string(&r.messages).unwrap())
        .find(|text| text.contains("a sub-agent does not get it"))
        .expect("the child was told its call was denied");
    assert!(told.contains("it is dangerous"), "{told}");
    assert_eq!(
        report.tool_calls[0].output.lines().last(),
        Some("could not clean up")
    );
}
