//! A tool that never returns (a read of a FIFO no one writes) cannot keep `keel run` alive
//! past its hard time limit.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Mock, keel_run, stderr, temp};

#[test]
fn the_hard_limit_ends_the_process_while_a_read_hangs_on_a_fifo() {
    let mock = Mock::start(
        r#"{"steps": [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "pipe"}}]},
            {"text": "never"}
        ]}"#,
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let made = std::process::Command::new("mkfifo")
        .arg(workspace.join("pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    let log = home.join("events.jsonl");
    let mut child = keel_run(&home, &mock, &log)
        .args(["--hard-timeout", "0.3", "--workspace"])
        .arg(&workspace)
        .arg("read the pipe")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Not a speed check: a generous bound so that a process that never exits fails the test
    // instead of hanging it.
    let give_up = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > give_up {
            let _ = child.kill();
            panic!("keel run did not exit after its hard time limit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["state"], "timed_out", "{report}");
}
