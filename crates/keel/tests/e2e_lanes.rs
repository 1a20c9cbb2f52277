//! End to end: one active run per session. Two `keel run --session S` processes at once against
//! a slow model take turns (the second waits, saying so) instead of interleaving their
//! messages; `--no-wait` gives up at once; and every process leaves the store closed, without a
//! write-ahead log.

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Mock, keel, run, stderr, stdout, temp};
use serde_json::{Value, json};

/// Each turn: a tool call, then the answer, each after `delay_ms` of the model's time.
fn slow_turns(delay_ms: u64) -> String {
    json!({"per_turn": true, "steps": [
        {"text": "Looking.", "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}],
         "delay_ms": delay_ms},
        {"text": "Done.", "delay_ms": delay_ms}
    ]})
    .to_string()
}

fn keel_run(home: &Path, mock: &Mock, workspace: &Path, events: &Path) -> Command {
    let mut command = keel(home);
    command
        .args([
            "run",
            "--json",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
        ])
        .arg("--workspace")
        .arg(workspace)
        .arg("--events")
        .arg(events);
    command
}

fn spawn(command: &mut Command) -> Child {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn report(output: &Output) -> Value {
    serde_json::from_str(&stdout(output)).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}): {}\n{}",
            stdout(output),
            stderr(output)
        )
    })
}

/// Waits (20 s at most, polling) until the events file shows the run started.
fn wait_until_started(events: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(events)
        .unwrap_or_default()
        .contains("agent_run.started")
    {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The stored transcript as one line per message: `user: TEXT`, `call`, `tool`, `answer`.
fn shape(home: &Path, session: &str) -> Vec<String> {
    let text = stdout(&run(keel(home).args(["sessions", "show", session])));
    let mut shape = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(label) = line.strip_prefix('[').and_then(|l| l.split_once("] ")) else {
            continue;
        };
        let first = lines
            .peek()
            .map(|l| l.trim().to_string())
            .unwrap_or_default();
        shape.push(match label.1 {
            "user:" => format!("user: {first}"),
            // `assistant:` or, since messages record their model, `assistant (model, N output
            // tokens):`.
            assistant
                if assistant.starts_with("assistant") && text_after(line, &text).contains('→') =>
            {
                "call".into()
            }
            assistant if assistant.starts_with("assistant") => "answer".into(),
            _ if label.1.starts_with("tool result") => "tool".into(),
            other => other.to_string(),
        });
    }
    shape
}

/// The block of `text` that starts at `header`, up to the next header.
fn text_after<'a>(header: &str, text: &'a str) -> &'a str {
    let start = text.find(header).map_or(0, |at| at + header.len());
    let rest = &text[start..];
    let end = rest.find("\n[").unwrap_or(rest.len());
    &rest[..end]
}

fn turn(message: &str) -> Vec<String> {
    vec![
        format!("user: {message}"),
        "call".into(),
        "tool".into(),
        "answer".into(),
    ]
}

#[test]
fn two_runs_of_one_session_take_turns_and_no_wait_fails_fast() {
    let mock = Mock::start(&slow_turns(700));
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let (_e, events) = temp();
    let first = run(keel_run(&home, &mock, &workspace, &events.join("0")).arg("start"));
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let session = report(&first)["session_id"].as_str().unwrap().to_string();

    let a = spawn(keel_run(&home, &mock, &workspace, &events.join("a")).args([
        "--session",
        &session,
        "A",
    ]));
    wait_until_started(&events.join("a"));
    let refused = run(keel_run(&home, &mock, &workspace, &events.join("c")).args([
        "--session",
        &session,
        "--no-wait",
        "C",
    ]));
    let b = spawn(keel_run(&home, &mock, &workspace, &events.join("b")).args([
        "--session",
        &session,
        "B",
    ]));
    let a_output = a.wait_with_output().unwrap();
    let b_output = b.wait_with_output().unwrap();

    assert_eq!(a_output.status.code(), Some(0), "{}", stderr(&a_output));
    assert_eq!(b_output.status.code(), Some(0), "{}", stderr(&b_output));
    let a_run = report(&a_output)["run_id"].as_str().unwrap().to_string();
    assert_eq!(
        refused.status.code(),
        Some(3),
        "--no-wait: {}",
        stderr(&refused)
    );
    assert!(
        stderr(&refused).contains(&format!("session {session} is busy with run {a_run}")),
        "{}",
        stderr(&refused)
    );
    assert!(
        !std::fs::read_to_string(events.join("c"))
            .unwrap_or_default()
            .contains("agent_run.started"),
        "the refused run never started"
    );
    let waited = stderr(&b_output);
    assert_eq!(
        waited
            .matches(&format!(
                "keel: session {session} is busy with run {a_run}; waiting (use --no-wait to fail fast)"
            ))
            .count(),
        1,
        "said once: {waited}"
    );

    let mut expected = turn("start");
    expected.extend(turn("A"));
    expected.extend(turn("B"));
    assert_eq!(shape(&home, &session), expected, "one turn after the other");

    assert!(
        !home.join("keel.db-wal").exists(),
        "every process closed the store, and the last one removed the log"
    );
}

#[test]
fn a_session_waiting_for_an_answer_refuses_a_new_run_at_once() {
    let mock = Mock::start(
        &json!({"steps": [
            {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Which one?"}}]},
            {"text": "Fine.", "forever": true}
        ]})
        .to_string(),
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let (_e, events) = temp();
    let paused = run(keel_run(&home, &mock, &workspace, &events.join("a")).arg("pick one"));
    assert_eq!(paused.status.code(), Some(3), "{}", stderr(&paused));
    let paused = report(&paused);
    let (session, run_id) = (
        paused["session_id"].as_str().unwrap(),
        paused["run_id"].as_str().unwrap(),
    );

    let refused = run(keel_run(&home, &mock, &workspace, &events.join("b")).args([
        "--session",
        session,
        "something else",
    ]));
    assert_eq!(refused.status.code(), Some(3));
    let err = stderr(&refused);
    assert!(
        err.contains(&format!(
            "session {session} waits for an answer in run {run_id}"
        )) && err.contains(&format!("keel answer {run_id}")),
        "{err}"
    );

    let cancelled = run(keel(&home).args(["runs", "cancel", run_id]));
    assert_eq!(cancelled.status.code(), Some(0), "{}", stderr(&cancelled));
    let next = run(keel_run(&home, &mock, &workspace, &events.join("c")).args([
        "--session",
        session,
        "something else",
    ]));
    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
}

/// Sends `signal` (e.g. `-STOP`) to a child process.
fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .arg(signal)
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_stalled_worker_whose_run_was_resumed_elsewhere_stops_with_a_clear_message() {
    let mock = Mock::start(
        &json!({"steps": [
            {"text": "Looking.", "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}],
             "delay_ms": 1000},
            {"text": "Done.", "forever": true}
        ]})
        .to_string(),
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let (_e, events) = temp();
    let stalled = spawn(keel_run(&home, &mock, &workspace, &events.join("a")).arg("look"));
    wait_until_started(&events.join("a"));
    signal(&stalled, "-STOP");
    let run_id = common::events(&events.join("a"))
        .iter()
        .find_map(|e| {
            e["run_id"]
                .as_str()
                .filter(|id| !id.is_empty())
                .map(str::to_string)
        })
        .unwrap();

    let resumed = run(keel(&home)
        .args(["resume", "--force", &run_id, "--json"])
        .args(["--provider", "mock", "--base-url", &mock.url, "--workspace"])
        .arg(&workspace));
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    signal(&stalled, "-CONT");
    let output = stalled.wait_with_output().unwrap();

    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let err = stderr(&output);
    assert!(
        err.contains(&format!("run {run_id} was taken over by another worker")),
        "{err}"
    );
    assert!(!err.contains("UNIQUE"), "{err}");
}

#[test]
fn a_stalled_worker_that_lost_its_session_to_another_run_stops_writing() {
    let mock = Mock::start(&slow_turns(1000));
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let (_e, events) = temp();
    std::fs::write(
        home.join("keel.toml"),
        format!(
            "{}\n[runs]\nheartbeat_secs = 0.05\nstale_after_secs = 0.3\n",
            common::FAST_RETRIES
        ),
    )
    .unwrap();
    let first = run(keel_run(&home, &mock, &workspace, &events.join("0")).arg("start"));
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let session = report(&first)["session_id"].as_str().unwrap().to_string();

    let stalled = spawn(keel_run(&home, &mock, &workspace, &events.join("a")).args([
        "--session",
        &session,
        "A",
    ]));
    wait_until_started(&events.join("a"));
    signal(&stalled, "-STOP");
    // B waits until A's heartbeat is stale, takes the session over, and runs.
    let b = spawn(keel_run(&home, &mock, &workspace, &events.join("b")).args([
        "--session",
        &session,
        "B",
    ]));
    wait_until_started(&events.join("b"));
    signal(&stalled, "-CONT");
    let a_output = stalled.wait_with_output().unwrap();
    let b_output = b.wait_with_output().unwrap();

    assert_eq!(b_output.status.code(), Some(0), "{}", stderr(&b_output));
    let b_run = report(&b_output)["run_id"].as_str().unwrap().to_string();
    assert_eq!(a_output.status.code(), Some(1), "{}", stdout(&a_output));
    let err = stderr(&a_output);
    assert!(
        err.contains(&format!("lost session {session} to run {b_run}")),
        "{err}"
    );
    let shape = shape(&home, &session);
    let b_turn = shape.iter().position(|m| m == "user: B").unwrap();
    assert_eq!(
        shape[b_turn..],
        turn("B")[..],
        "nothing of A after B: {shape:?}"
    );
    assert_eq!(
        shape.iter().filter(|m| *m == "call").count(),
        2,
        "A stored no model reply: {shape:?}"
    );
}
