//! End to end: the model runs a command with `shell` — its file lands in the workspace and its
//! result reaches the next model request — and `rm -rf /` is refused with nothing run (`rm -rf
//! ~` needs approval: see e2e_approval.rs).

mod common;

use common::{Mock, keel, run, stderr, stdout, temp};
use serde_json::{Value, json};

#[test]
fn the_model_runs_a_command_and_a_dangerous_one_is_refused() {
    let script = json!({"steps": [
        {"tool_calls": [{"name": "shell", "arguments": {"command": "echo hi > out.txt && echo done"}}]},
        {"tool_calls": [{"name": "shell", "arguments": {"command": "touch ran-anyway; rm -rf /"}}]},
        {"text": "Wrote out.txt; the cleanup was refused."}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    // Were the policy to fail, `~` would be this directory, not the tester's home.
    let (_f, fake_home) = temp();
    std::fs::write(fake_home.join("canary"), "still here").unwrap();

    let output = run(keel(&home)
        .env("HOME", &fake_home)
        .args([
            "run",
            "--json",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
        ])
        .arg("--workspace")
        .arg(&workspace)
        .arg("write hi to out.txt, then clean up my home"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["state"], "completed", "{report}");

    assert_eq!(
        std::fs::read_to_string(workspace.join("out.txt")).unwrap(),
        "hi\n"
    );
    assert!(
        !workspace.join("ran-anyway").exists(),
        "part of a refused line ran"
    );
    assert!(
        fake_home.join("canary").exists(),
        "the home directory was touched"
    );

    let calls = report["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{report}");
    assert_eq!(calls[0]["ok"], true, "{}", calls[0]);
    assert_eq!(calls[1]["ok"], false, "{}", calls[1]);
    let refusal = calls[1]["output"].as_str().unwrap();
    assert!(
        refusal.contains("refused by keel's command policy"),
        "{refusal}"
    );
    assert!(refusal.contains("the root directory"), "{refusal}");

    // Each result reaches the model in the next request.
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    let second = requests[1].to_string();
    assert!(
        second.contains(r"exit code: 0\n--- stdout ---\ndone\n"),
        "{second}"
    );
    let third = requests[2].to_string();
    assert!(
        third.contains("refused by keel's command policy"),
        "{third}"
    );
    // The tool was offered with its schema.
    let first = requests[0].to_string();
    assert!(
        first.contains("\"shell\"") && first.contains("timeout_secs"),
        "{first}"
    );
}

#[test]
fn the_shell_can_be_turned_off() {
    let script = json!({"steps": [
        {"tool_calls": [{"name": "shell", "arguments": {"command": "echo hi > out.txt"}}]},
        {"text": "No shell here."}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    common::write_config(&home, "", "[tools.shell]\nenabled = false\n");
    let output = run(keel(&home)
        .args([
            "run",
            "--json",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
        ])
        .arg("--workspace")
        .arg(&workspace)
        .arg("try the shell"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(!workspace.join("out.txt").exists());
    assert!(!mock.requests()[0].to_string().contains("\"shell\""));
}
