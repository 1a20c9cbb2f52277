use serde_json::json;

use super::*;
use keel_core::tool::ToolSpec;

fn policy() -> DelegationPolicy {
    DelegationPolicy::default()
}

fn spec(name: &str) -> ToolSpec {
    ToolSpec::new(name, "", json!({"type": "object"}))
}

#[test]
fn one_goal_or_a_batch_in_call_order() {
    let one = parse_tasks(
        &json!({"goal": " find x ", "context": "in a.txt"}),
        &policy(),
    )
    .unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].goal, "find x");
    assert_eq!(one[0].message(), "find x\n\nContext:\nin a.txt");
    assert_eq!(one[0].max_iterations, DEFAULT_MAX_ITERATIONS);
    let batch = parse_tasks(
        &json!({"tasks": [{"goal": "a"}, {"goal": "b", "max_iterations": 5}, {"goal": "c", "max_iterations": 500}]}),
        &policy(),
    )
    .unwrap();
    let goals: Vec<&str> = batch.iter().map(|t| t.goal.as_str()).collect();
    assert_eq!(goals, ["a", "b", "c"]);
    assert_eq!(batch[1].max_iterations, 5);
    // Asking for more than the policy allows gets the policy's cap.
    assert_eq!(batch[2].max_iterations, DEFAULT_MAX_ITERATIONS);
}

#[test]
fn malformed_arguments_are_refused_with_a_reason() {
    let cases = [
        (json!("find x"), "must be an object"),
        (json!({}), "give the `goal`"),
        (json!({"goal": "  "}), "give its `goal`"),
        (json!({"goal": 7}), "`goal` must be text"),
        (json!({"goal": "a", "tasks": []}), "not both"),
        (json!({"tasks": []}), "empty"),
        (json!({"tasks": "a"}), "must be a list"),
        (json!({"tasks": ["a"]}), "task 1: a task must be an object"),
        (json!({"goal": "a", "max_iterations": 0}), "at least 1"),
        (json!({"goal": "a", "max_iterations": -3}), "at least 1"),
        (
            json!({"goal": "a", "tools": "read_file"}),
            "list of tool names",
        ),
        (json!({"goal": "a", "tools": [1]}), "list of tool names"),
        (json!({"goal": "a", "context": 5}), "`context` must be text"),
        (json!({"goal": "a", "depth": 3}), "unknown field `depth`"),
        (json!({"goal": "x".repeat(5000)}), "longer than"),
    ];
    for (args, expected) in cases {
        let error = parse_tasks(&args, &policy()).unwrap_err();
        assert!(error.starts_with("Error:"), "{error}");
        assert!(error.contains(expected), "{args}: {error}");
    }
}

#[test]
fn more_tasks_than_max_parallel_start_none() {
    let tasks: Vec<_> = (0..4).map(|i| json!({"goal": format!("g{i}")})).collect();
    let error = parse_tasks(&json!({"tasks": tasks}), &policy()).unwrap_err();
    assert!(error.contains("4 tasks is more than the 3"), "{error}");
    assert!(error.contains("nothing was started"), "{error}");
}

#[test]
fn depth_comes_from_the_session_name() {
    assert_eq!(depth_of("0190-abc"), 0);
    assert_eq!(depth_of("sub-1-0190-abc"), 1);
    assert_eq!(depth_of("sub-2-x"), 2);
    assert_eq!(depth_of("sub-x-1"), 0);
    assert_eq!(depth_of("submarine"), 0);
}

#[test]
fn child_ids_are_stable_and_distinct() {
    let (run, session) = child_ids("parent", "call_1", 0, 1);
    assert_eq!(
        (run.clone(), session.clone()),
        child_ids("parent", "call_1", 0, 1)
    );
    assert_eq!(session, format!("sub-1-{run}"));
    assert_eq!(depth_of(&session), 1);
    assert!(uuid::Uuid::parse_str(&run).is_ok());
    assert_ne!(run, child_ids("parent", "call_1", 1, 1).0);
    assert_ne!(run, child_ids("parent", "call_2", 0, 1).0);
    assert_ne!(run, child_ids("other", "call_1", 0, 1).0);
}

#[test]
fn a_child_gets_at_most_the_parents_tools() {
    let parent = vec![
        spec("read_file"),
        spec("write_file"),
        spec(DELEGATE_TASK),
        spec(keel_core::agent_tools::ASK_HUMAN),
        spec("get_run_journal"),
    ];
    let names = |tools: Vec<ToolSpec>| tools.into_iter().map(|t| t.name).collect::<Vec<_>>();
    // The loop answers `ask_human` and (with the journal's extension) `get_run_journal`.
    let by_loop =
        |name: &str| name == keel_core::agent_tools::ASK_HUMAN || name == "get_run_journal";
    // The loop's own tools are not passed on: every run gets its own.
    assert_eq!(
        names(child_tools(&parent, None, 1, 2, &by_loop).unwrap()),
        ["read_file", "write_file", DELEGATE_TASK]
    );
    // At the deepest level there is no delegate_task.
    assert_eq!(
        names(child_tools(&parent, None, 2, 2, &by_loop).unwrap()),
        ["read_file", "write_file"]
    );
    let only = vec!["read_file".to_string()];
    assert_eq!(
        names(child_tools(&parent, Some(&only), 1, 2, &by_loop).unwrap()),
        ["read_file"]
    );
    let missing = vec!["read_file".to_string(), "shell".to_string()];
    let error = child_tools(&parent, Some(&missing), 1, 2, &by_loop).unwrap_err();
    assert!(error.contains("`shell` is not among your tools"), "{error}");
}

#[test]
fn a_childs_budget_is_its_own_and_what_the_parent_has_left() {
    let mut parent = RunSettings::new("p", "m");
    parent.budgets.token_budget = Some(1000);
    parent.budgets.cost_limit = Some(1.0);
    parent.human_reachable = true;
    parent.untrusted = true;
    let policy = DelegationPolicy {
        model: Some("cheap".into()),
        ..policy()
    };
    let child = child_settings(&parent, (400, 0.25), &policy, 7);
    assert_eq!((child.max_iterations, child.iteration_cap), (7, 7));
    assert_eq!(child.budgets.token_budget, Some(600));
    assert_eq!(child.budgets.cost_limit, Some(0.75));
    assert!(child.untrusted, "trust is inherited");
    assert!(!child.human_reachable);
    assert_eq!(child.model, "cheap");
    assert_eq!(child.provider, "p");
    let spent = child_settings(&parent, (5000, 3.0), &policy, 7);
    assert_eq!(spent.budgets.token_budget, Some(0));
    assert_eq!(spent.budgets.cost_limit, Some(0.0));
}

#[test]
fn absurd_policies_are_refused() {
    assert!(policy().validate().is_ok());
    for (policy, name) in [
        (
            DelegationPolicy {
                max_parallel: 0,
                ..policy()
            },
            "max_parallel",
        ),
        (
            DelegationPolicy {
                max_parallel: 1000,
                ..policy()
            },
            "max_parallel",
        ),
        (
            DelegationPolicy {
                max_depth: 0,
                ..policy()
            },
            "max_depth",
        ),
        (
            DelegationPolicy {
                max_iterations: 0,
                ..policy()
            },
            "max_iterations",
        ),
        (
            DelegationPolicy {
                max_iterations: 1_000_000,
                ..policy()
            },
            "max_iterations",
        ),
        (
            DelegationPolicy {
                model: Some(" ".into()),
                ..policy()
            },
            "model",
        ),
    ] {
        let error = policy.validate().unwrap_err();
        assert!(error.contains(name), "{error}");
    }
}

#[test]
fn results_keep_call_order_and_say_how_each_ended() {
    let done = |goal: &str, text: &str| ChildOutcome {
        goal: goal.into(),
        run_id: format!("run-{goal}"),
        state: keel_core::state::AgentState::Completed,
        reason: None,
        final_text: Some(text.into()),
        error: None,
        iterations: 2,
        handoff: None,
    };
    let mut capped = done("c", "Stopped: reached the limit of 1 iterations");
    capped.state = keel_core::state::AgentState::MaxSteps;
    capped.error = capped.final_text.clone();
    let (ok, text) = batch_result(&[done("a", "A!"), done("b", "B!"), capped]);
    assert!(!ok);
    let (a, b, c) = (
        text.find("A!").unwrap(),
        text.find("B!").unwrap(),
        text.find("reached the limit").unwrap(),
    );
    assert!(a < b && b < c, "{text}");
    assert!(text.contains("## Task 3 of 3: c"), "{text}");
    assert!(text.contains("hit its iteration limit"), "{text}");
    let (ok, text) = batch_result(&[done("a", "A!")]);
    assert!(ok && text.ends_with("\nA!"), "{text}");
}

#[test]
fn a_childs_own_model_falls_back_to_the_parents_chain() {
    let mut parent = RunSettings::new("p", "m");
    parent.fallbacks = vec![
        keel_core::run_settings::ModelTarget::new("q", "backup"),
        keel_core::run_settings::ModelTarget::new("p", "m"),
    ];
    let policy = DelegationPolicy {
        model: Some("cheap".into()),
        ..policy()
    };
    let child = child_settings(&parent, (0, 0.0), &policy, 7);
    let chain: Vec<String> = child.chain().iter().map(ToString::to_string).collect();
    assert_eq!(chain, ["p:cheap", "p:m", "q:backup"]);
    assert_eq!(child.retry, parent.retry, "the same classified retries");
    // Without a model of its own, the child's chain is the parent's.
    let same = child_settings(&parent, (0, 0.0), &DelegationPolicy::default(), 7);
    assert_eq!(same.chain(), parent.chain());
}

#[test]
fn the_policy_a_run_keeps_reads_back_from_its_settings_as_before() {
    let mut settings = RunSettings::new("p", "m");
    assert_eq!(policy_of(&settings), None);
    let policy = DelegationPolicy {
        model: Some("cheap".into()),
        ..policy()
    };
    keep_policy(&mut settings, &policy);
    // Where the kernel's `delegation` setting was: checkpoints keep their format.
    let json = serde_json::to_value(&settings).unwrap();
    assert_eq!(
        json["delegation"],
        json!({"max_parallel": 3, "max_depth": 2, "max_iterations": 50, "model": "cheap"})
    );
    let restored: RunSettings = serde_json::from_value(json).unwrap();
    assert_eq!(policy_of(&restored), Some(policy));
    assert_eq!(restored, settings);
}
