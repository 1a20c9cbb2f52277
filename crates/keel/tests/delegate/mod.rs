//! What the delegation tests share (`e2e_delegate.rs`): the configuration, the mock's requests
//! by model, the sub-agent tree `keel runs show` prints, events files and processes.

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Mock, keel, keel_run, run, stderr, stdout, temp, write_config};

/// How long a test waits for something it expects (never reached when all is well).
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

pub(crate) const CHILD_MODEL: &str = "child-model";

pub(crate) fn config(home: &Path) {
    write_config(
        home,
        "",
        &format!(
            "[delegation]\nenabled = true\nmodel = \"{CHILD_MODEL}\"\n\n[runs]\nheartbeat_secs = 0.1\n"
        ),
    );
}

pub(crate) fn delegate(id: &str, arguments: Value) -> Value {
    json!({"id": id, "name": "delegate_task", "arguments": arguments})
}

/// The mock's requests with their times, those of `model` only (`None`: the parent's).
pub(crate) fn requests_of(mock: &Mock, model: Option<&str>) -> Vec<(Value, Value)> {
    let requests = mock.requests();
    let timeline = mock.get("/v1/_mock/timeline");
    requests
        .into_iter()
        .zip(timeline.as_array().unwrap().iter().cloned())
        .filter(|(request, _)| match model {
            Some(model) => request["model"] == model,
            None => request["model"] != CHILD_MODEL,
        })
        .collect()
}

/// The text of a request's user messages.
pub(crate) fn user_texts(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

pub(crate) fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn tool_results(request: &Value) -> String {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

pub(crate) fn show(home: &Path, run_id: &str) -> String {
    let output = run(keel(home).args(["runs", "show", run_id]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    stdout(&output)
}

/// The `sub-agents:` lines of `keel runs show`.
pub(crate) fn tree(home: &Path, run_id: &str) -> Vec<String> {
    show(home, run_id)
        .split("\nsub-agents:\n")
        .nth(1)
        .unwrap_or("")
        .split("\n\n")
        .next()
        .unwrap_or("")
        .lines()
        .map(str::to_string)
        .collect()
}

pub(crate) fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

pub(crate) fn named<'a>(events: &'a [Value], name: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == name).collect()
}

/// Waits until `ready` holds, polling; fails after [`PATIENCE`].
pub(crate) fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn spawn_run(home: &Path, mock: &Mock, events: &Path, prompt: &str) -> Child {
    keel_run(home, mock, events)
        .arg(prompt)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub(crate) fn wait_with_patience(mut child: Child) -> Output {
    let deadline = Instant::now() + PATIENCE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("keel did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The parent's run id: the first run an events file saw start.
pub(crate) fn parent_id(events: &[Value]) -> String {
    named(events, "agent_run.started")[0]["run_id"]
        .as_str()
        .unwrap()
        .to_string()
}

pub(crate) fn setup(
    script: Value,
) -> (
    Mock,
    PathBuf,
    PathBuf,
    (tempfile::TempDir, tempfile::TempDir),
) {
    let mock = Mock::start(&script.to_string());
    let (home_guard, home) = temp();
    let (events_guard, events_dir) = temp();
    config(&home);
    (
        mock,
        home,
        events_dir.join("events.jsonl"),
        (home_guard, events_guard),
    )
}
