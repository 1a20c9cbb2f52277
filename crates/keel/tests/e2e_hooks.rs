//! End to end: a `pre_tool` hook from keel.toml — the example script of the README — denies a
//! write to a path containing "secret" (no file, the reason in the model's next request) and
//! allows the next write; both decisions are `agent.tool.hook` events in the `--events` file.

mod common;

use std::path::PathBuf;

use common::{Mock, events, find, keel_run, report, run, stderr, temp, write_config};
use serde_json::json;

/// The README's example hook, as shipped in `examples/hooks/`.
fn example_hook() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/hooks/no_secrets.sh")
}

#[test]
fn a_pre_tool_hook_denies_a_secret_write_and_allows_the_next() {
    let mock = Mock::start(
        &json!({"steps": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "secret.txt", "content": "hunter2"}}]},
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "ok.txt", "content": "fine"}}]},
            {"text": "Wrote ok.txt instead."}
        ]})
        .to_string(),
    );
    let (_home_guard, home) = temp();
    let (_ws_guard, workspace) = temp();
    let hook = example_hook().canonicalize().unwrap();
    let command = format!("sh '{}'", hook.display());
    write_config(
        &home,
        "",
        &format!(
            "[[hooks]]\nevent = \"pre_tool\"\nmatcher = \"write_file\"\ncommand = \"{command}\"\ntimeout_secs = 10\n"
        ),
    );
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log)
        .arg("--workspace")
        .arg(&workspace)
        .arg("save my password"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["state"], "completed");

    // Denied: no file, and the model was told why in its next request.
    assert!(!workspace.join("secret.txt").exists());
    let calls = report["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["ok"], false);
    assert_eq!(calls[0]["arguments"]["path"], "secret.txt");
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    let second = requests[1].to_string();
    assert!(
        second.contains("a pre_tool hook denied it") && second.contains("are off limits"),
        "{second}"
    );

    // Allowed: written.
    assert_eq!(
        std::fs::read_to_string(workspace.join("ok.txt")).unwrap(),
        "fine"
    );
    assert_eq!(calls[1]["ok"], true);

    // Both decisions are events.
    let events = events(&log);
    let hooks = find(&events, "agent.tool.hook");
    assert_eq!(hooks.len(), 2, "{hooks:?}");
    for (event, outcome) in hooks.iter().zip(["deny", "allow"]) {
        assert_eq!(event["outcome"], outcome);
        assert_eq!(event["stage"], "pre_tool");
        assert_eq!(event["tool"], "write_file");
        assert_eq!(event["hook"], command);
        assert_eq!(event["index"], 0);
        assert!(event["duration_ms"].is_u64());
    }
    assert_eq!(hooks[0]["call_id"], calls[0]["id"]);
    assert_eq!(
        hooks[0]["reason"],
        "paths containing \"secret\" are off limits"
    );
}

#[test]
fn a_broken_hooks_table_is_refused_with_the_key_named() {
    let mock = Mock::start(&json!({"steps": [{"text": "hi"}]}).to_string());
    let (_home_guard, home) = temp();
    write_config(
        &home,
        "",
        "[[hooks]]\nevent = \"pre_tool\"\ncommand = \"true\"\ntimeout_secs = 0\n",
    );
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log).arg("hello"));
    assert_ne!(output.status.code(), Some(0));
    assert!(
        stderr(&output).contains("timeout_secs"),
        "{}",
        stderr(&output)
    );
}
