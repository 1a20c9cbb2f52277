//! End to end: `session_search` finds a fact said 50 sessions ago, in the user's own sessions
//! only — never another user's, never a session of no user. Through `keel chat` (one process,
//! `/new` between sessions) and the SQLite store, against `keel mock-provider`.

mod common;

use std::io::Write;
use std::process::Stdio;

use common::{Mock, keel, run, stderr};
use serde_json::{Value, json};

/// `keel chat` as `user` (or no user), typing `lines`.
fn chat(home: &std::path::Path, mock: &Mock, user: Option<&str>, lines: &[String]) {
    let (_w, workspace) = common::temp();
    let mut command = keel(home);
    command
        .args([
            "chat",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--workspace",
        ])
        .arg(&workspace);
    if let Some(user) = user {
        command.args(["--user", user]);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut typed = lines.join("\n");
    typed.push_str("\n/exit\n");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(typed.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn session_search_finds_a_fact_from_50_sessions_ago_and_never_another_users() {
    let sessions = 50;
    let mut steps: Vec<Value> = Vec::new();
    // Bob's and the no-user session, then Ann's 50, then her question.
    steps.push(json!({"text": "noted"}));
    steps.push(json!({"text": "noted"}));
    steps.extend((0..sessions).map(|_| json!({"text": "noted"})));
    steps.push(
        json!({"tool_calls": [{"name": "session_search", "arguments": {"query": "locker code"}}]}),
    );
    steps.push(json!({"text": "Your locker code is 4711.", "forever": true}));
    let mock = Mock::start(&json!({ "steps": steps }).to_string());
    let (_h, home) = common::temp();
    for user in ["ann", "bob"] {
        let made = run(keel(&home).args(["users", "set", user, "--unlimited"]));
        assert_eq!(made.status.code(), Some(0), "{}", stderr(&made));
    }
    chat(
        &home,
        &mock,
        Some("bob"),
        &["my locker code is 9999".into()],
    );
    chat(
        &home,
        &mock,
        None,
        &["the shared locker code is 0000".into()],
    );
    let mut lines = vec!["remember: my locker code is 4711".to_string()];
    for i in 1..sessions {
        lines.push("/new".into());
        lines.push(format!("small talk number {i} about the weather"));
    }
    lines.push("/new".into());
    lines.push("what is my locker code?".into());
    chat(&home, &mock, Some("ann"), &lines);

    let requests = mock.requests();
    let asked = requests.len();
    assert_eq!(asked, 2 + sessions + 2, "every turn called the model once");
    let result = requests[asked - 1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(result.contains("4711"), "{result}");
    assert!(!result.contains("9999"), "another user's session: {result}");
    assert!(!result.contains("0000"), "a session of no user: {result}");
    assert!(result.starts_with("1 past session match"), "{result}");
    // The session it asks from is not searched.
    assert!(!result.contains("what is my locker code"), "{result}");
}
