//! End to end: the `keel` binary against `keel mock-provider` over real HTTP, with real files
//! and the real SQLite store.

mod common;

use common::{Mock, keel, run, stderr, stdout, temp};
use serde_json::{Value, json};

/// A task of four tool calls: list, read two files (in parallel), write a summary.
fn file_task_script() -> String {
    json!({"steps": [
        {"text": "Looking around.", "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"tool_calls": [
            {"name": "read_file", "arguments": {"path": "a.txt"}},
            {"name": "read_file", "arguments": {"path": "b.txt"}}
        ]},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "out/summary.txt", "content": "alpha+beta"}}]},
        {"text": "Wrote out/summary.txt."}
    ]})
    .to_string()
}

/// The file task through `keel mock-provider` speaking `api`, streamed or whole.
fn run_file_task(api: &str, stream: bool) {
    let mock = Mock::start(&file_task_script());
    let (_home_guard, home) = temp();
    let (_ws_guard, workspace) = temp();
    std::fs::write(workspace.join("a.txt"), "alpha").unwrap();
    std::fs::write(workspace.join("b.txt"), "beta").unwrap();

    let mut command = keel(&home);
    command
        .args([
            "run",
            "--json",
            "--provider",
            "mock",
            "--api",
            api,
            "--base-url",
            &mock.url,
            "--workspace",
        ])
        .arg(&workspace);
    if !stream {
        command.arg("--no-stream");
    }
    let output = run(command.arg("summarize a.txt and b.txt"));
    assert_eq!(output.status.code(), Some(0), "stderr: {}", stderr(&output));

    let report: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(report["state"], "completed");
    assert_eq!(report["final_text"], "Wrote out/summary.txt.");
    assert_eq!(report["iterations"], 4);
    assert_eq!(report["model"], "mock-model");
    let calls = report["tool_calls"].as_array().unwrap();
    let names: Vec<&str> = calls.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["list_dir", "read_file", "read_file", "write_file"]);
    assert!(calls.iter().all(|c| c["ok"] == true), "{calls:?}");
    assert_eq!(calls[1]["output"], "alpha");
    assert_eq!(calls[2]["output"], "beta");
    assert_eq!(calls[3]["arguments"]["path"], "out/summary.txt");
    assert!(report["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert!(report["usage"]["output_tokens"].as_u64().unwrap() > 0);
    for key in ["run_id", "session_id"] {
        assert!(report[key].as_str().is_some_and(|s| !s.is_empty()), "{key}");
    }

    // The file is really written, inside the workspace.
    assert_eq!(
        std::fs::read_to_string(workspace.join("out/summary.txt")).unwrap(),
        "alpha+beta"
    );

    // The mock saw each result before the next turn, streamed or not as asked.
    let requests = mock.requests();
    assert_eq!(requests.len(), 4);
    assert!(
        requests
            .iter()
            .all(|r| r["stream"].as_bool().unwrap_or(false) == stream)
    );
    let last = &requests[3];
    let sent_beta = match api {
        "openai-chat" => last["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool" && m["content"] == "beta"),
        "anthropic-messages" => last["messages"].as_array().unwrap().iter().any(|m| {
            m["content"].as_array().is_some_and(|blocks| {
                blocks
                    .iter()
                    .any(|b| b["type"] == "tool_result" && b["content"] == "beta")
            })
        }),
        _ => last["input"]
            .as_array()
            .unwrap()
            .iter()
            .any(|item| item["type"] == "function_call_output" && item["output"] == "beta"),
    };
    assert!(
        sent_beta,
        "the read result reached the model in {api}'s shape: {last}"
    );

    // The transcript is stored.
    let session = report["session_id"].as_str().unwrap();
    let shown = run(keel(&home).args(["sessions", "show", session]));
    assert_eq!(shown.status.code(), Some(0));
    let transcript = stdout(&shown);
    for needle in [
        "summarize a.txt and b.txt",
        "→ list_dir",
        "→ read_file {\"path\":\"a.txt\"}",
        "→ write_file",
        "wrote 10 bytes to out/summary.txt",
        "Wrote out/summary.txt.",
    ] {
        assert!(
            transcript.contains(needle),
            "missing {needle:?} in:\n{transcript}"
        );
    }
    assert!(transcript.contains("9 messages"), "{transcript}");
    // Each answer names the model that wrote it and its output tokens (seed 003).
    assert!(
        transcript.contains("assistant (mock-model, ") && transcript.contains(" output tokens)"),
        "{transcript}"
    );
}

#[test]
fn a_file_task_runs_end_to_end_on_chat_completions() {
    run_file_task("openai-chat", true);
    run_file_task("openai-chat", false);
}

#[test]
fn a_file_task_runs_end_to_end_on_anthropic_messages() {
    run_file_task("anthropic-messages", true);
    run_file_task("anthropic-messages", false);
}

#[test]
fn a_file_task_runs_end_to_end_on_openai_responses() {
    run_file_task("openai-responses", true);
    run_file_task("openai-responses", false);
}

#[test]
fn streamed_text_reaches_stdout_and_tool_activity_goes_to_stderr() {
    let mock = Mock::start(&file_task_script());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    std::fs::write(workspace.join("a.txt"), "alpha").unwrap();
    std::fs::write(workspace.join("b.txt"), "beta").unwrap();
    let output = run(keel(&home)
        .args([
            "run",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--workspace",
        ])
        .arg(&workspace)
        .arg("go"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let out = stdout(&output);
    assert!(
        out.contains("Looking around.") && out.contains("Wrote out/summary.txt."),
        "{out}"
    );
    assert!(
        !out.contains("read_file"),
        "tool activity stays off stdout: {out}"
    );
    let err = stderr(&output);
    assert!(
        err.contains("→ read_file") && err.contains("✓ write_file"),
        "{err}"
    );
}

#[test]
fn two_runs_on_one_session_share_history() {
    let mock = Mock::start(
        r#"{"steps": [{"text": "Nice to meet you, Ada."}, {"text": "Your name is Ada."}]}"#,
    );
    let (_h, home) = temp();
    let base = ["--provider", "mock", "--base-url", mock.url.as_str()];
    let first = run(keel(&home)
        .args(["run", "--json"])
        .args(base)
        .arg("my name is Ada"));
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let session = serde_json::from_str::<Value>(&stdout(&first)).unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();

    let second = run(keel(&home)
        .args(["run", "--json", "--session", &session])
        .args(base)
        .arg("what is my name?"));
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    let report: Value = serde_json::from_str(&stdout(&second)).unwrap();
    assert_eq!(report["session_id"], session.as_str());

    let sent: Vec<String> = mock.requests()[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        sent,
        [
            "my name is Ada",
            "Nice to meet you, Ada.",
            "what is my name?"
        ]
    );

    let shown = stdout(&run(keel(&home).args(["sessions", "show", &session])));
    for needle in [
        "my name is Ada",
        "Nice to meet you, Ada.",
        "what is my name?",
        "Your name is Ada.",
    ] {
        assert!(shown.contains(needle), "{shown}");
    }
    let listed = stdout(&run(keel(&home).arg("sessions")));
    assert!(
        listed.contains(&session) && listed.contains("my name is Ada"),
        "{listed}"
    );
}

#[test]
fn events_file_gets_one_json_line_per_event() {
    let mock = Mock::start(
        r#"{"steps": [{"tool_calls": [{"name": "list_dir", "arguments": {}}]}, {"text": "ok"}]}"#,
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let events = home.join("events.jsonl");
    let output = run(keel(&home)
        .args([
            "run",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--events",
        ])
        .arg(&events)
        .arg("--workspace")
        .arg(&workspace)
        .arg("list"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines: Vec<Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .all(|e| e["ts"].is_string() && e["run_id"].is_string() && e["event"].is_string())
    );
    let names: Vec<&str> = lines.iter().map(|e| e["event"].as_str().unwrap()).collect();
    for name in [
        "agent_run.started",
        "agent.model.request",
        "agent.stream.delta",
        "agent.tool.started",
        "agent.tool.completed",
        "agent_run.completed",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let completed = lines
        .iter()
        .find(|e| e["event"] == "agent.tool.completed")
        .unwrap();
    assert_eq!(completed["name"], "list_dir");
    assert_eq!(completed["ok"], true);
}

#[test]
fn the_demo_runs_without_a_key_or_network() {
    let (_h, home) = temp();
    let output = run(keel(&home).arg("demo"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let out = stdout(&output);
    assert!(out.contains("ended as `completed`"), "{out}");
    assert!(out.contains("call    ▸ write_file"), "{out}");
    assert!(out.contains("`..` is not allowed"), "{out}");
}

#[test]
fn chat_keeps_a_conversation_and_new_starts_another() {
    use std::io::Write;
    let mock = Mock::start(
        r#"{"steps": [{"text": "Hi Ada."}, {"text": "You are Ada."}, {"text": "Fresh start."}]}"#,
    );
    let (_h, home) = temp();
    let mut child = keel(&home)
        .args(["chat", "--provider", "mock", "--base-url", &mock.url])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"I am Ada\nwho am I?\n/new\nhello\n/exit\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let out = stdout(&output);
    for needle in ["Hi Ada.", "You are Ada.", "new session", "Fresh start."] {
        assert!(out.contains(needle), "{needle:?} missing from {out}");
    }
    let requests = mock.requests();
    let turns = |i: usize| {
        requests[i]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] != "system")
            .count()
    };
    assert_eq!(turns(1), 3, "the second line continues the conversation");
    assert_eq!(turns(2), 1, "/new starts from nothing");
    let listed = stdout(&run(keel(&home).arg("sessions")));
    assert_eq!(listed.lines().count(), 2, "{listed}");
}
