//! End to end: the guardrails that stop a run going on too long — the loop guard, max-tokens
//! recovery, token budgets (per run and per user), time limits and cancellation — seen from
//! outside, through the `keel` binary, its report, its events and the stored transcript.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Mock, events, find, keel, keel_run, last_message, names, position, report, run, stderr, stdout,
    temp, transcript, write_config,
};
use serde_json::Value;

/// How many times `needle` occurs in `haystack`.
fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn a_model_repeating_one_call_is_nudged_then_directed_then_stopped_as_stuck() {
    let mock = Mock::start(
        r#"{"steps": [{"text": "Let me look again.",
            "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}], "forever": true}]}"#,
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    std::fs::write(workspace.join("a.txt"), "a").unwrap();
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log)
        .arg("--workspace")
        .arg(&workspace)
        .arg("what is here?"));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["state"], "error");
    assert_eq!(report["reason"], "stuck");
    let iterations = report["iterations"].as_u64().unwrap();
    assert!((3..=6).contains(&iterations), "{report}");
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .contains("going in circles")
    );

    let events = events(&log);
    let levels: Vec<&Value> = find(&events, "agent.loop.detected")
        .iter()
        .map(|e| &e["level"])
        .collect();
    assert_eq!(levels, [1, 2, 3], "{:?}", names(&events));
    let escalations = find(&events, "agent.guardrail.escalated");
    let actions: Vec<&Value> = escalations.iter().map(|e| &e["action"]).collect();
    assert_eq!(actions, ["nudge", "directive", "stuck"]);
    for detected in find(&events, "agent.loop.detected") {
        assert_eq!(detected["tool"], "list_dir");
    }
    assert_eq!(
        find(&events, "agent_run.failed")[0]["reason"],
        "stuck",
        "{:?}",
        names(&events)
    );

    // The call after the directive may not use tools; the ones before it may.
    let requests = mock.requests();
    assert_eq!(requests.len() as u64, iterations);
    let directive = events
        .iter()
        .position(|e| e["event"] == "agent.guardrail.escalated" && e["action"] == "directive")
        .unwrap();
    let next = events[directive..]
        .iter()
        .find(|e| e["event"] == "agent.model.request")
        .expect("a model call after the directive");
    let after = next["iteration"].as_u64().unwrap() as usize - 1;
    assert_eq!(
        requests[after]["tool_choice"], "none",
        "{}",
        requests[after]
    );
    for request in &requests[..after] {
        assert_ne!(request["tool_choice"], "none");
    }
    assert!(
        last_message(&requests[after])["content"]
            .as_str()
            .unwrap()
            .contains("Stop calling tools now")
    );

    let shown = transcript(&home, report["session_id"].as_str().unwrap());
    assert_eq!(count(&shown, "user (internal: loop_nudge)"), 2, "{shown}");
    assert!(shown.contains("Try a different approach"), "{shown}");
    assert!(shown.contains("Stop calling tools now"), "{shown}");
}

#[test]
fn an_answer_cut_at_max_tokens_is_continued_and_joined() {
    let mock = Mock::start(
        r#"{"steps": [
            {"text": "The first part, ", "finish_reason": "length"},
            {"text": "the second part, ", "finish_reason": "length"},
            {"text": "and the end."}
        ]}"#,
    );
    let (_h, home) = temp();
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log).arg("tell me everything"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["state"], "completed");
    assert_eq!(
        report["final_text"],
        "The first part, the second part, and the end."
    );
    assert_eq!(report["iterations"], 3);

    let events = events(&log);
    let recoveries = find(&events, "agent.max_tokens.recovery");
    assert_eq!(recoveries.len(), 2, "{:?}", names(&events));
    for (recovery, attempt) in recoveries.iter().zip([1, 2]) {
        assert_eq!(recovery["attempt"], attempt);
        assert_eq!(recovery["limit"], 2);
    }
    let requests = mock.requests();
    for request in &requests[1..] {
        let last = last_message(request);
        assert_eq!(last["role"], "user");
        assert!(
            last["content"].as_str().unwrap().contains("cut off"),
            "{last}"
        );
    }

    let shown = transcript(&home, report["session_id"].as_str().unwrap());
    assert_eq!(
        count(&shown, "user (internal: max_tokens_recovery)"),
        2,
        "{shown}"
    );
}

#[test]
fn a_token_budget_warns_near_its_end_then_stops_the_run() {
    let usage = r#"{"input_tokens": 100, "output_tokens": 20}"#;
    let mock = Mock::start(&format!(
        r#"{{"steps": [
            {{"tool_calls": [{{"name": "list_dir", "arguments": {{"path": "."}}}}], "usage": {usage}}},
            {{"tool_calls": [{{"name": "list_dir", "arguments": {{"path": "sub"}}}}], "usage": {usage}}},
            {{"text": "never reached"}}
        ]}}"#
    ));
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    std::fs::create_dir(workspace.join("sub")).unwrap();
    write_config(&home, "", "[budgets]\nreserve_tokens = 100");
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log)
        .args(["--token-budget", "200", "--workspace"])
        .arg(&workspace)
        .arg("look around"));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["state"], "budget_exceeded");
    assert_eq!(report["usage"]["input_tokens"], 200);
    assert_eq!(report["usage"]["output_tokens"], 40);
    assert!(
        report["error"].as_str().unwrap().contains("200"),
        "{report}"
    );
    // The second step's calls were not run: the budget stopped the run first.
    assert_eq!(
        report["tool_calls"].as_array().unwrap().len(),
        1,
        "{report}"
    );

    let events = events(&log);
    let near = find(&events, "agent.budget.near");
    assert_eq!(near.len(), 1, "{:?}", names(&events));
    assert_eq!(near[0]["tokens"], 120);
    assert!(position(&events, "agent.budget.near") < position(&events, "agent_run.failed"));
    assert_eq!(
        find(&events, "agent_run.failed")[0]["state"],
        "budget_exceeded"
    );

    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let notice = near[0]["message"].as_str().unwrap();
    assert!(notice.starts_with("Budget notice"), "{notice}");
    assert_ne!(last_message(&requests[0])["content"], notice);
    let last = last_message(&requests[1]);
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"], notice);
    let shown = transcript(&home, report["session_id"].as_str().unwrap());
    assert!(!shown.contains("Budget notice"), "{shown}");
}

#[test]
fn cancelling_mid_answer_stores_no_partial_reply() {
    let mock = Mock::start(
        r#"{"steps": [{"text": "Streamed words that the user never sees stored because they cancel",
            "chunk_delay_ms": 300}]}"#,
    );
    let (_h, home) = temp();
    let log = home.join("events.jsonl");
    let child = keel_run(&home, &mock, &log)
        .arg("write a long answer")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until some of the answer has streamed.
    let deadline = Instant::now() + Duration::from_secs(20);
    while find(&events(&log), "agent.stream.delta")
        .iter()
        .all(|e| e["kind"] != "text")
    {
        assert!(Instant::now() < deadline, "nothing streamed");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(mock.requests().len(), 1);
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["state"], "cancelled");
    assert_eq!(report["final_text"], Value::Null);

    let events = events(&log);
    assert_eq!(
        find(&events, "agent_run.cancelled").len(),
        1,
        "{:?}",
        names(&events)
    );
    assert!(find(&events, "agent_run.completed").is_empty());

    let shown = transcript(&home, report["session_id"].as_str().unwrap());
    assert!(shown.contains("1 messages"), "{shown}");
    assert!(shown.contains("] user:\n  write a long answer"), "{shown}");
    assert!(!shown.contains("assistant"), "{shown}");
    assert!(!shown.contains("Streamed"), "{shown}");
}

#[test]
fn the_soft_time_limit_asks_for_a_summary_without_tools() {
    let mock = Mock::start(
        r#"{"steps": [
            {"tool_calls": [{"name": "list_dir", "arguments": {}}], "delay_ms": 300},
            {"text": "Summary: I listed the directory; nothing is left."},
            {"text": "never reached"}
        ]}"#,
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log)
        .args(["--soft-timeout", "0.2", "--workspace"])
        .arg(&workspace)
        .arg("look around"));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["state"], "timed_out");
    assert_eq!(
        report["final_text"],
        "Summary: I listed the directory; nothing is left."
    );
    assert_eq!(report["tool_calls"][0]["name"], "list_dir");

    let events = events(&log);
    assert_eq!(
        find(&events, "agent.exhaustion.soft_limit").len(),
        1,
        "{:?}",
        names(&events)
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_ne!(requests[0]["tool_choice"], "none");
    assert_eq!(requests[1]["tool_choice"], "none", "{}", requests[1]);
    let last = last_message(&requests[1]);
    assert_eq!(last["role"], "user");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .starts_with("Time is up for this task"),
        "{last}"
    );
    let shown = transcript(&home, report["session_id"].as_str().unwrap());
    assert!(shown.contains("(internal: time_limit_summary)"), "{shown}");
}

#[test]
fn the_hard_time_limit_abandons_a_slow_call() {
    // An answer that would take ten minutes: the run ends long before it, or not at all.
    let mock = Mock::start(r#"{"steps": [{"text": "too late", "delay_ms": 600000}]}"#);
    let (_h, home) = temp();
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log)
        .args(["--hard-timeout", "0.2"])
        .arg("hi"));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["state"], "timed_out");
    assert_eq!(report["final_text"], Value::Null);
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .contains("hard time limit")
    );
    let events = events(&log);
    let failed = find(&events, "agent_run.failed");
    assert_eq!(failed.len(), 1, "{:?}", names(&events));
    assert_eq!(failed[0]["state"], "timed_out");
}

#[test]
fn a_users_monthly_budget_once_spent_refuses_runs_but_keeps_the_message() {
    let mock = Mock::start(
        r#"{"steps": [{"text": "Spent.", "usage": {"input_tokens": 70, "output_tokens": 50}}]}"#,
    );
    let (_h, home) = temp();
    let set = run(keel(&home).args(["users", "set", "ada", "--monthly-tokens", "100"]));
    assert_eq!(set.status.code(), Some(0), "{}", stderr(&set));

    let output = run(keel_run(&home, &mock, &home.join("first.jsonl"))
        .args(["--user", "ada"])
        .arg("spend"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(report(&output)["usage"]["output_tokens"], 50);
    let listed = stdout(&run(keel(&home).arg("users")));
    assert!(listed.contains("ada  120 of 100 tokens"), "{listed}");

    let log = home.join("second.jsonl");
    let output = run(keel_run(&home, &mock, &log)
        .args(["--user", "ada"])
        .arg("one more please"));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert_eq!(mock.requests().len(), 1, "the model is not called");
    let report = report(&output);
    assert_eq!(report["state"], "budget_exceeded");
    assert_eq!(report["iterations"], 0);
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .contains("used 120 of their 100"),
        "{report}"
    );
    // The refusal says when the budget resets: the first of next month, UTC.
    let resets = common::budget_resets();
    assert!(
        report["error"].as_str().unwrap().contains(&resets),
        "{report}"
    );
    let events = events(&log);
    assert_eq!(
        find(&events, "agent_run.failed")[0]["state"],
        "budget_exceeded"
    );
    assert!(find(&events, "agent.model.request").is_empty());
    let shown = transcript(&home, report["session_id"].as_str().unwrap());
    assert!(shown.contains("one more please"), "{shown}");
    let listed = stdout(&run(keel(&home).arg("users")));
    assert!(listed.contains("ada  120 of 100 tokens"), "{listed}");
    // The token log holds the one model call, and sums to the run's usage.
    let usage = run(keel(&home).args(["usage", "--json"]));
    let lines: Vec<Value> = stdout(&usage)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["user_id"], "ada");
    assert_eq!(lines[0]["calls"], 1);
    assert_eq!(lines[0]["usage"]["input_tokens"], 70);
    assert_eq!(lines[0]["usage"]["output_tokens"], 50);
    let table = stdout(&run(keel(&home).args(["usage", "--user", "ada"])));
    assert!(table.contains("ada") && table.contains("total"), "{table}");
    let bad = run(keel(&home).args(["usage", "--month", "2026-13"]));
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("YYYY-MM"), "{}", stderr(&bad));
}

#[test]
fn users_have_permissions_and_platform_links_and_an_unknown_user_is_refused() {
    let mock = Mock::start(r#"{"steps": [{"text": "Hi.", "forever": true}]}"#);
    let (_h, home) = temp();
    let output = run(keel_run(&home, &mock, &home.join("e.jsonl"))
        .args(["--user", "nobody"])
        .arg("hi"));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no user `nobody`"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        mock.requests().len(),
        0,
        "no unlimited run for an unknown user"
    );

    let set = run(keel(&home).args(["users", "set", "ada", "--permission", "admin"]));
    assert_eq!(set.status.code(), Some(0), "{}", stderr(&set));
    for (platform, id) in [("telegram", "42"), ("slack", "U1")] {
        let linked = run(keel(&home).args([
            "users",
            "link",
            "ada",
            "--platform",
            platform,
            "--platform-user-id",
            id,
        ]));
        assert_eq!(linked.status.code(), Some(0), "{}", stderr(&linked));
    }
    let set = run(keel(&home).args(["users", "set", "bob", "--unlimited"]));
    assert_eq!(set.status.code(), Some(0), "{}", stderr(&set));
    let taken = run(keel(&home).args([
        "users",
        "link",
        "bob",
        "--platform",
        "telegram",
        "--platform-user-id",
        "42",
    ]));
    assert_eq!(taken.status.code(), Some(2), "{}", stderr(&taken));
    assert!(
        stderr(&taken).contains("linked to user `ada`"),
        "{}",
        stderr(&taken)
    );
    let missing = run(keel(&home).args([
        "users",
        "link",
        "carl",
        "--platform",
        "x",
        "--platform-user-id",
        "1",
    ]));
    assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
    let listed = stdout(&run(keel(&home).arg("users")));
    assert!(listed.contains("admin  slack:U1 telegram:42"), "{listed}");
    assert!(listed.contains("bob  0 of unlimited tokens"), "{listed}");
    let output = run(keel_run(&home, &mock, &home.join("f.jsonl"))
        .args(["--user", "ada"])
        .arg("hi"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}
