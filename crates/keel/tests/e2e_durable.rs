//! End to end: humans in the loop, cancellation from another process, the reconciler, and a
//! resume that meets a changed system prompt — through the `keel` binary and its SQLite store.
//! No test depends on how fast it runs: timeouts are either far away or already passed.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{Mock, keel, only_run_id, run, stderr, stdout, temp};
use serde_json::{Value, json};

/// A keel.toml with fast retries and quick heartbeats. No test waits for a heartbeat to go
/// stale: a killed worker is seen at once, by its process.
fn fast_config(home: &std::path::Path, extra: &str) {
    config_with_cancel_timeout(home, extra, 3600.0);
}

/// [`fast_config`] with this cancel timeout, in seconds.
fn config_with_cancel_timeout(home: &std::path::Path, extra: &str, cancel_timeout: f64) {
    std::fs::write(
        home.join("keel.toml"),
        format!(
            "{extra}\n{}\n[runs]\nheartbeat_secs = 0.05\ncancel_timeout_secs = {cancel_timeout}\n",
            common::FAST_RETRIES
        ),
    )
    .unwrap();
}

fn ask_script() -> String {
    json!({"steps": [
        {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Whose name goes in the greeting?"}}]},
        {"tool_calls": [{"name": "append_file", "arguments": {"path": "greeting.txt", "content": "hello Ada\n"}}]},
        {"text": "Done: greeting.txt greets Ada.", "forever": true}
    ]})
    .to_string()
}

/// Waits (a few seconds at most) for a line on the child's stderr that contains `needle`.
fn wait_for_stderr(child: &mut Child, needle: &str) {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let needle = needle.to_string();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains(&needle) {
                let _ = tx.send(());
                return;
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the expected stderr line never came");
}

#[test]
fn keel_run_waits_for_an_answer_and_keel_answer_goes_on() {
    let mock = Mock::start(&ask_script());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let base = [
        "--provider",
        "mock",
        "--base-url",
        mock.url.as_str(),
        "--workspace",
    ];
    let output = run(keel(&home)
        .args(["run"])
        .args(base)
        .arg(&workspace)
        .arg("write a greeting"));
    assert_eq!(output.status.code(), Some(3));
    let err = stderr(&output);
    assert!(
        err.contains("waits for your answer: Whose name goes in the greeting?"),
        "{err}"
    );
    assert!(err.contains("keel answer"), "{err}");
    let run_id = only_run_id(&home);
    let shown = stdout(&run(keel(&home).args(["runs", "show", &run_id])));
    assert!(
        shown.contains("waiting_on_human") && shown.contains("human_pause"),
        "{shown}"
    );

    let answered = run(keel(&home)
        .args(["answer", &run_id, "--json"])
        .args(base)
        .arg(&workspace)
        .arg("Ada"));
    assert_eq!(answered.status.code(), Some(0), "{}", stderr(&answered));
    let report: Value = serde_json::from_str(&stdout(&answered)).unwrap();
    assert_eq!(report["state"], "completed");
    assert_eq!(
        std::fs::read_to_string(workspace.join("greeting.txt")).unwrap(),
        "hello Ada\n"
    );
    let sent = mock.requests()[1]["messages"].to_string();
    assert!(sent.contains("The human answered: Ada"), "{sent}");
    // Nothing waits any more.
    let again = run(keel(&home)
        .args(["answer", &run_id])
        .args(base)
        .arg(&workspace)
        .arg("Bob"));
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("not waiting for an answer"));
}

#[test]
fn keel_chat_asks_the_question_at_the_prompt() {
    let mock = Mock::start(&ask_script());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let mut child = keel(&home)
        .args([
            "chat",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--workspace",
        ])
        .arg(&workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"write a greeting\nAda\n/exit\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // The question is asked on stderr, with the approval menu; the answer is on stdout.
    let asked = stderr(&output);
    assert!(
        asked.contains("? Whose name goes in the greeting?"),
        "{asked}"
    );
    let out = stdout(&output);
    assert!(out.contains("Done: greeting.txt greets Ada."), "{out}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("greeting.txt")).unwrap(),
        "hello Ada\n"
    );
}

#[test]
fn keel_runs_cancel_stops_a_run_in_another_process() {
    let mock = Mock::start(
        &json!({"steps": [
            {"tool_calls": [{"name": "list_dir", "arguments": {}}]},
            {"text": "this answer comes too late", "delay_ms": 20000}
        ]})
        .to_string(),
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    fast_config(&home, "");
    let child = keel(&home)
        .args([
            "run",
            "--json",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--workspace",
        ])
        .arg(&workspace)
        .arg("list, then think for a long time")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the slow second call is in flight.
    let started = Instant::now();
    while mock.requests().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the run never made its second call"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let run_id = only_run_id(&home);
    let cancel = run(keel(&home).args(["runs", "cancel", &run_id]));
    assert_eq!(cancel.status.code(), Some(0), "{}", stderr(&cancel));
    // Seen at the next heartbeat: the answer would come 20 s later, and the run complete.
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["state"], "cancelled");
    assert_eq!(report["final_text"], Value::Null);
    let missing = run(keel(&home).args(["runs", "cancel", "no-such-run"]));
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn the_reconciler_times_out_a_killed_run_that_then_resumes() {
    let mock = Mock::start(
        &json!({"steps": [
            {"tool_calls": [{"name": "append_file", "arguments": {"path": "log.txt", "content": "one\n"}}]},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "log.txt"}}]},
            {"text": "done", "forever": true}
        ]})
        .to_string(),
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    fast_config(&home, "");
    // Killed right after its third checkpoint (the append's result is stored).
    let mut child = keel(&home)
        .args([
            "run",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--workspace",
        ])
        .arg(&workspace)
        .arg("append and read")
        .env("KEEL_TEST_PAUSE_AT_CHECKPOINT", "3")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_stderr(&mut child, "paused after checkpoint 3");
    child.kill().unwrap();
    child.wait().unwrap();

    // The next start of keel sweeps it at once: its worker process is gone.
    let listed = run(keel(&home).arg("runs"));
    assert!(
        stderr(&listed).contains("lost their worker"),
        "{}",
        stderr(&listed)
    );
    assert!(stdout(&listed).contains("timed_out"), "{}", stdout(&listed));
    let run_id = only_run_id(&home);
    let shown = stdout(&run(keel(&home).args(["runs", "show", &run_id])));
    assert!(shown.contains("resume with: keel resume"), "{shown}");

    let resumed = run(keel(&home)
        .args([
            "resume",
            &run_id,
            "--json",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--workspace",
        ])
        .arg(&workspace));
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let report: Value = serde_json::from_str(&stdout(&resumed)).unwrap();
    assert_eq!(report["state"], "completed");
    assert_eq!(
        std::fs::read_to_string(workspace.join("log.txt")).unwrap(),
        "one\n"
    );
    let shown = stdout(&run(keel(&home).args(["runs", "show", &run_id])));
    assert!(shown.contains("agent_run.resumed"), "{shown}");
}

#[test]
fn a_resume_under_a_changed_system_prompt_halts_until_accepted() {
    let mock = Mock::start(
        &json!({"steps": [
            {"tool_calls": [{"name": "list_dir", "arguments": {}}]},
            {"text": "done", "forever": true}
        ]})
        .to_string(),
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    fast_config(&home, "system_prompt = \"You are careful.\"");
    let mut child = keel(&home)
        .args([
            "run",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--workspace",
        ])
        .arg(&workspace)
        .arg("list")
        .env("KEEL_TEST_PAUSE_AT_CHECKPOINT", "2")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_stderr(&mut child, "paused after checkpoint 2");
    child.kill().unwrap();
    child.wait().unwrap();
    let run_id = only_run_id(&home);

    fast_config(&home, "system_prompt = \"You are bold.\"");
    let base = [
        "--provider",
        "mock",
        "--base-url",
        mock.url.as_str(),
        "--workspace",
    ];
    let halted = run(keel(&home)
        .args(["resume", &run_id, "--force", "--json"])
        .args(base)
        .arg(&workspace));
    assert_eq!(halted.status.code(), Some(3), "{}", stderr(&halted));
    let report: Value = serde_json::from_str(&stdout(&halted)).unwrap();
    assert_eq!(report["state"], "waiting_on_human");
    assert_eq!(report["reason"], "prompt_drift");

    let accepted = run(keel(&home)
        .args(["resume", &run_id, "--accept-prompt-change", "--json"])
        .args(base)
        .arg(&workspace));
    assert_eq!(accepted.status.code(), Some(0), "{}", stderr(&accepted));
    let report: Value = serde_json::from_str(&stdout(&accepted)).unwrap();
    assert_eq!(report["state"], "completed");
    let last = mock.requests().last().unwrap()["messages"][0]["content"].clone();
    assert_eq!(last, "You are bold.");
}

#[test]
fn a_paused_run_whose_cancel_times_out_is_cancelled_by_the_reconciler() {
    let mock = Mock::start(&ask_script());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    fast_config(&home, "");
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
        .arg("greet"));
    assert_eq!(output.status.code(), Some(3));
    let run_id = only_run_id(&home);
    assert_eq!(
        run(keel(&home).args(["runs", "cancel", &run_id]))
            .status
            .code(),
        Some(0)
    );
    // Not yet: the cancel timeout (an hour) has not passed.
    assert!(stdout(&run(keel(&home).arg("runs"))).contains("waiting_on_human"));
    // With a timeout of a millisecond, it has: the cancel was asked by another process.
    config_with_cancel_timeout(&home, "", 0.001);
    let listed = run(keel(&home).arg("runs"));
    assert!(stdout(&listed).contains("cancelled"), "{}", stdout(&listed));
    assert!(
        stderr(&listed).contains("were cancelled as asked"),
        "{}",
        stderr(&listed)
    );
}
