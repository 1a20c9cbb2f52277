//! End to end: sub-agents (`delegate_task`) through `keel mock-provider`. The parent runs on
//! the mock's top-level steps and the children on `child-model`'s (`[delegation] model`), whose
//! answers echo the goal they were given, so concurrent children are told apart. Covered: three
//! tasks in one call run concurrently (overlapping times in the mock's log), each sees only its
//! goal, the answers come back in call order and their usage counts for the parent; depth 3 is
//! refused; a child at its iteration cap or failing returns that to the parent; bad calls start
//! nothing; SIGKILL during the children, then resume, re-runs no finished child; cancelling the
//! parent cancels its children.

mod common;
mod delegate;

use std::time::{Duration, Instant};

use common::{Mock, keel, keel_run, report, run, stderr, stdout, temp};
use delegate::*;
use serde_json::{Value, json};

#[test]
fn three_tasks_run_concurrently_each_sees_only_its_goal_and_answers_come_back_in_order() {
    let usage = |i: u64, o: u64| json!({"input_tokens": i, "output_tokens": o});
    let (mock, home, events_file, _guards) = setup(json!({
        "steps": [
            {"tool_calls": [delegate("d1", json!({"tasks": [
                {"goal": "alpha", "context": "use the letter a"},
                {"goal": "beta"},
                {"goal": "gamma"}
            ]}))], "usage": usage(50, 5)},
            {"text": "all three done", "usage": usage(50, 5)}
        ],
        "models": {CHILD_MODEL: {"steps": [
            {"text": "done: ", "echo_user": true, "delay_ms": 800, "usage": usage(100, 10), "forever": true}
        ]}}
    }));
    let output =
        run(keel_run(&home, &mock, &events_file).arg("secret parent prompt: split the work"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["state"], "completed", "{report}");
    assert_eq!(report["final_text"], "all three done");

    // Concurrent: every child's request arrived before any was answered.
    let children = requests_of(&mock, Some(CHILD_MODEL));
    assert_eq!(children.len(), 3, "one request per child");
    let last_arrival = children
        .iter()
        .map(|(_, t)| t["received_ms"].as_u64().unwrap())
        .max();
    let first_answer = children
        .iter()
        .map(|(_, t)| t["answered_ms"].as_u64().unwrap())
        .min();
    assert!(last_arrival < first_answer, "not overlapping: {children:?}");

    // Each child sees only its goal (and its context): nothing of the parent's conversation.
    let mut seen: Vec<Vec<String>> = children.iter().map(|(r, _)| user_texts(r)).collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            vec!["alpha\n\nContext:\nuse the letter a".to_string()],
            vec!["beta".to_string()],
            vec!["gamma".to_string()]
        ]
    );
    for (request, _) in &children {
        let text = request.to_string();
        assert!(!text.contains("secret parent prompt"), "{text}");
        let not_system = request["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] != "system")
            .count();
        assert_eq!(not_system, 1, "{request}");
    }

    // The parent gets the three answers in call order.
    let parent = requests_of(&mock, None);
    assert_eq!(parent.len(), 2);
    let result = tool_results(&parent[1].0);
    let at = |needle: &str| {
        result
            .find(needle)
            .unwrap_or_else(|| panic!("{needle} missing from {result}"))
    };
    assert!(at("done: alpha") < at("done: beta") && at("done: beta") < at("done: gamma"));
    assert!(result.contains("## Task 1 of 3: alpha"), "{result}");

    // Children's usage counts for the parent: 2 × (50 + 5) of its own, 3 × (100 + 10) of theirs.
    assert_eq!(report["usage"]["input_tokens"], 400, "{report}");
    assert_eq!(report["usage"]["output_tokens"], 40, "{report}");

    // Each child is a run of its own, `sub-1-…`, started and finished as events say.
    let events = events(&events_file);
    let started = named(&events, "agent.delegate.started");
    assert_eq!(started.len(), 3);
    for event in &started {
        assert_eq!(event["how"], "start");
        assert_eq!(event["depth"], 1);
        let session = event["child_session_id"].as_str().unwrap();
        let child = event["child_run_id"].as_str().unwrap();
        assert_eq!(session, format!("sub-1-{child}"));
    }
    assert_eq!(named(&events, "agent.delegate.finished").len(), 3);
    let run_id = report["run_id"].as_str().unwrap();
    let lines = tree(&home, run_id);
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (line, goal) in lines.iter().zip(["alpha", "beta", "gamma"]) {
        assert!(
            line.starts_with("  ") && line.contains("completed") && line.ends_with(goal),
            "{line}"
        );
    }
}

#[test]
fn a_sub_agent_may_delegate_once_more_and_depth_three_is_refused() {
    let (mock, home, events_file, _guards) = setup(json!({
        "steps": [
            {"tool_calls": [delegate("p1", json!({"goal": "level one"}))]},
            {"text": "parent done"}
        ],
        "models": {CHILD_MODEL: {"steps": [
            {"tool_calls": [delegate("c1", json!({"goal": "level two"}))]},
            {"tool_calls": [delegate("g1", json!({"goal": "level three"}))]},
            {"text": "grandchild: ", "echo_user": true},
            {"text": "child: ", "echo_user": true}
        ]}}
    }));
    let output = run(keel_run(&home, &mock, &events_file).arg("go deep"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["final_text"], "parent done", "{report}");
    let children = requests_of(&mock, Some(CHILD_MODEL));
    assert_eq!(children.len(), 4);
    // The child (depth 1) may delegate; the grandchild (depth 2) is not offered the tool...
    assert!(tool_names(&children[0].0).contains(&"delegate_task".to_string()));
    assert_eq!(user_texts(&children[1].0), ["level two"]);
    assert!(!tool_names(&children[1].0).contains(&"delegate_task".to_string()));
    // ...and its call anyway is refused with a clear error, starting nothing.
    let refusal = tool_results(&children[2].0);
    assert!(
        refusal.contains("`delegate_task` was refused") && refusal.contains("stops at depth 2"),
        "{refusal}"
    );
    assert!(tool_results(&children[3].0).contains("grandchild: level two"));
    let parent = requests_of(&mock, None);
    assert!(tool_results(&parent[1].0).contains("child: level one"));
    let lines = tree(&home, report["run_id"].as_str().unwrap());
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with("  ") && lines[0].ends_with("level one"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("    ") && lines[1].ends_with("level two"),
        "{lines:?}"
    );
    let depths: Vec<u64> = named(&events(&events_file), "agent.delegate.started")
        .iter()
        .map(|e| e["depth"].as_u64().unwrap())
        .collect();
    assert_eq!(depths, [1, 2]);
}

#[test]
fn bad_calls_start_nothing_and_say_why() {
    let too_many: Vec<Value> = (0..4).map(|i| json!({"goal": format!("g{i}")})).collect();
    let (mock, home, events_file, _guards) = setup(json!({
        "steps": [
            {"tool_calls": [
                delegate("m1", json!({"tasks": "not a list"})),
                delegate("m2", json!({"tasks": too_many})),
                delegate("m3", json!({"goal": "use the shell", "tools": ["read_file", "launch_rockets"]})),
                delegate("m4", json!({"goal": "both", "tasks": [{"goal": "x"}]}))
            ]},
            {"text": "gave up"}
        ],
        "models": {CHILD_MODEL: {"steps": [{"text": "never asked", "forever": true}]}}
    }));
    let output = run(keel_run(&home, &mock, &events_file).arg("try badly"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = report(&output);
    let calls = report["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 4);
    assert!(calls.iter().all(|c| c["ok"] == false), "{calls:?}");
    let output_of = |i: usize| calls[i]["output"].as_str().unwrap();
    assert!(
        output_of(0).contains("invalid arguments for `delegate_task`"),
        "{}",
        output_of(0)
    );
    assert!(
        output_of(1).contains("4 tasks is more than the 3"),
        "{}",
        output_of(1)
    );
    assert!(
        output_of(2).contains("`launch_rockets` is not among your tools"),
        "{}",
        output_of(2)
    );
    assert!(output_of(3).contains("not both"), "{}", output_of(3));
    assert!(
        requests_of(&mock, Some(CHILD_MODEL)).is_empty(),
        "no child ran"
    );
    assert!(named(&events(&events_file), "agent.delegate.started").is_empty());
}

#[test]
fn a_child_at_its_iteration_cap_or_failing_returns_that_and_its_handoff() {
    let (mock, home, events_file, _guards) = setup(json!({
        "steps": [
            {"tool_calls": [delegate("cap", json!({"goal": "keep reading", "max_iterations": 1}))]},
            {"tool_calls": [delegate("fail", json!({"goal": "call a broken model"}))]},
            {"text": "reported both"}
        ],
        "models": {CHILD_MODEL: {"steps": [
            {"tool_calls": [{"name": "get_run_journal", "arguments": {}}]},
            {"error": {"status": 401}}
        ]}}
    }));
    let output = run(keel_run(&home, &mock, &events_file).arg("delegate two"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["final_text"], "reported both", "{report}");
    let calls = report["tool_calls"].as_array().unwrap();
    let capped = calls[0]["output"].as_str().unwrap();
    assert_eq!(calls[0]["ok"], false);
    assert!(capped.contains("max_steps after 1 iteration"), "{capped}");
    assert!(
        capped.contains("reached the limit of 1 iterations"),
        "{capped}"
    );
    assert!(capped.contains("Handoff"), "{capped}");
    let failed = calls[1]["output"].as_str().unwrap();
    assert_eq!(calls[1]["ok"], false);
    assert!(failed.contains("error (provider_fatal)"), "{failed}");
    assert!(
        failed.contains("Failure:") && failed.contains("Handoff"),
        "{failed}"
    );
    // Exactly one model call each: the cap is the child's own, not the parent's 25.
    assert_eq!(requests_of(&mock, Some(CHILD_MODEL)).len(), 2);
}

#[test]
fn sigkill_during_the_children_then_resume_reruns_no_finished_child() {
    let (mock, home, events_file, _guards) = setup(json!({
        "steps": [
            {"tool_calls": [delegate("d1", json!({"tasks": [
                {"goal": "task one"}, {"goal": "task two"}, {"goal": "task three"}
            ]}))]},
            {"text": "parent done", "forever": true}
        ],
        "models": {CHILD_MODEL: {"steps": [
            {"text": "done: ", "echo_user": true, "times": 2},
            {"text": "slow: ", "echo_user": true, "delay_ms": 600000},
            {"text": "resumed: ", "echo_user": true, "forever": true}
        ]}}
    }));
    let mut child = spawn_run(&home, &mock, &events_file, "three tasks");
    // Two children finished (their terminal commit is behind them), the third is in its call.
    wait_until(
        "two finished children and a third in its model call",
        || {
            let events = events(&events_file);
            let finished = named(&events, "agent_run.completed")
                .iter()
                .filter(|e| e["session_id"].as_str().unwrap().starts_with("sub-1-"))
                .count();
            finished == 2 && requests_of(&mock, Some(CHILD_MODEL)).len() == 3
        },
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let before = events(&events_file);
    let parent_id = parent_id(&before);

    let (_g, resume_dir) = temp();
    let resume_events = resume_dir.join("resume.jsonl");
    let resumed = run(keel(&home)
        .args([
            "resume",
            "--force",
            &parent_id,
            "--json",
            "--provider",
            "mock",
            "--base-url",
        ])
        .arg(&mock.url)
        .arg("--events")
        .arg(&resume_events));
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let report: Value = serde_json::from_str(&stdout(&resumed)).unwrap();
    assert_eq!(report["state"], "completed", "{report}");
    assert_eq!(report["final_text"], "parent done");

    // Four child requests: three before the kill, one for the unfinished child only.
    let children = requests_of(&mock, Some(CHILD_MODEL));
    assert_eq!(children.len(), 4, "{children:?}");
    let killed: Vec<&(Value, Value)> = children[..3]
        .iter()
        .filter(|(_, t)| t["answered_ms"].is_null())
        .collect();
    assert_eq!(killed.len(), 1, "one child was in its call at the kill");
    let unfinished_goal = user_texts(&killed[0].0);
    assert_eq!(
        user_texts(&children[3].0),
        unfinished_goal,
        "only it was asked again"
    );
    // The parent's model was not asked again for the delegate step: one call before, one after.
    assert_eq!(requests_of(&mock, None).len(), 2);
    let result = tool_results(&requests_of(&mock, None)[1].0);
    let positions: Vec<usize> = ["task one", "task two", "task three"]
        .iter()
        .map(|goal| {
            result
                .find(&format!(": {goal}\n[sub-agent"))
                .unwrap_or(usize::MAX)
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{result}");
    assert!(
        result.contains(&format!("resumed: {}", unfinished_goal[0])),
        "{result}"
    );
    let hows: Vec<String> = named(&events(&resume_events), "agent.delegate.started")
        .iter()
        .map(|e| e["how"].as_str().unwrap().to_string())
        .collect();
    let mut sorted = hows.clone();
    sorted.sort();
    assert_eq!(sorted, ["resume", "reuse", "reuse"], "{hows:?}");
    let lines = tree(&home, &parent_id);
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|l| l.contains("completed")), "{lines:?}");
}

#[test]
fn cancelling_the_parent_cancels_its_children() {
    let (mock, home, events_file, _guards) = setup(json!({
        "steps": [
            {"tool_calls": [delegate("d1", json!({"tasks": [{"goal": "wait one"}, {"goal": "wait two"}]}))]},
            {"text": "too late", "forever": true}
        ],
        "models": {CHILD_MODEL: {"steps": [
            {"text": "never", "delay_ms": 600000, "forever": true}
        ]}}
    }));
    let child = spawn_run(&home, &mock, &events_file, "wait for two");
    wait_until("both children in their model calls", || {
        requests_of(&mock, Some(CHILD_MODEL)).len() == 2
    });
    let parent_id = parent_id(&events(&events_file));
    // From another process, through the store: the parent's heartbeat learns of it.
    let cancelled = run(keel(&home).args(["runs", "cancel", &parent_id]));
    assert_eq!(cancelled.status.code(), Some(0), "{}", stderr(&cancelled));
    let output = wait_with_patience(child);
    let report = report(&output);
    assert_eq!(report["state"], "cancelled", "{report}");
    let lines = tree(&home, &parent_id);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|l| l.contains("cancelled")), "{lines:?}");
    let events = events(&events_file);
    let children_cancelled = named(&events, "agent_run.cancelled")
        .iter()
        .filter(|e| e["session_id"].as_str().unwrap().starts_with("sub-1-"))
        .count();
    assert_eq!(children_cancelled, 2);
    assert_eq!(
        requests_of(&mock, None).len(),
        1,
        "the parent was not asked again"
    );
}

/// A daemon with delegation on and one worker slot: a sub-agent needing a slot of its own
/// would wait for its parent's forever.
fn delegating_daemon(script: Value) -> (common::daemon::Daemon, Mock, Vec<tempfile::TempDir>) {
    let mock = Mock::start(&script.to_string());
    let (home_guard, home) = temp();
    let (workspace_guard, workspace) = temp();
    common::daemon::daemon_config(
        &home,
        &mock,
        &workspace,
        &format!(
            "[delegation]\nenabled = true\nmodel = \"{CHILD_MODEL}\"\n\n[runs]\nheartbeat_secs = 0.1\n\n[serve]\nworkers = 1\n"
        ),
    );
    let daemon = common::daemon::Daemon::start(&home);
    (daemon, mock, vec![home_guard, workspace_guard])
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_runs_sub_agents_concurrently_inside_the_parents_worker_slot() {
    let (daemon, mock, _guards) = delegating_daemon(json!({
        "steps": [
            {"tool_calls": [delegate("d1", json!({"tasks": [{"goal": "one"}, {"goal": "two"}]}))]},
            {"text": "both done"}
        ],
        "models": {CHILD_MODEL: {"steps": [
            {"text": "done: ", "echo_user": true, "delay_ms": 800, "forever": true}
        ]}}
    }));
    let key = common::daemon::make_key(&daemon.home, &["--user", "ann"]);
    let api = daemon.client(&key);
    let conversation = api.conversation(None).await;
    let run_id = api.send(&conversation, "split it").await;
    let run = api
        .until_state(&run_id, &["completed", "failed", "cancelled"])
        .await;
    assert_eq!(run["state"], "completed", "{run}");
    let children = requests_of(&mock, Some(CHILD_MODEL));
    assert_eq!(children.len(), 2);
    let last_arrival = children
        .iter()
        .map(|(_, t)| t["received_ms"].as_u64().unwrap())
        .max();
    let first_answer = children
        .iter()
        .map(|(_, t)| t["answered_ms"].as_u64().unwrap())
        .min();
    assert!(last_arrival < first_answer, "not overlapping: {children:?}");
    let result = tool_results(&requests_of(&mock, None)[1].0);
    let (one, two) = (
        result.find("done: one").unwrap(),
        result.find("done: two").unwrap(),
    );
    assert!(one < two, "{result}");
    let lines = tree(&daemon.home, &run_id);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|l| l.contains("completed")), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_daemon_run_cancels_its_sub_agents() {
    let (daemon, mock, _guards) = delegating_daemon(json!({
        "steps": [
            {"tool_calls": [delegate("d1", json!({"tasks": [{"goal": "wait one"}, {"goal": "wait two"}]}))]},
            {"text": "too late", "forever": true}
        ],
        "models": {CHILD_MODEL: {"steps": [
            {"text": "never", "delay_ms": 600000, "forever": true}
        ]}}
    }));
    let key = common::daemon::make_key(&daemon.home, &["--user", "ann"]);
    let api = daemon.client(&key);
    let conversation = api.conversation(None).await;
    let run_id = api.send(&conversation, "wait for two").await;
    let deadline = Instant::now() + PATIENCE;
    while requests_of(&mock, Some(CHILD_MODEL)).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the children never called their model"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = api
        .post(&format!("/v1/runs/{run_id}/cancel"), json!({}))
        .await;
    assert!(status < 300, "{status} {body}");
    let run = api
        .until_state(&run_id, &["cancelled", "completed", "failed"])
        .await;
    assert_eq!(run["state"], "cancelled", "{run}");
    let lines = tree(&daemon.home, &run_id);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|l| l.contains("cancelled")), "{lines:?}");
}
