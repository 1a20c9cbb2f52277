//! A tool that never returns cannot keep `keel run` alive past its hard time limit. (The
//! reported case, a read of a FIFO no one writes, is refused at once now: keel-tools'
//! `special_files` tests pin that; here a page that never answers stands in for it.)

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{FAST_RETRIES, Mock, keel_run, stderr, temp};

#[test]
fn the_hard_limit_ends_the_process_while_a_tool_hangs() {
    // Accepts the connection (the backlog does) and never answers.
    let page = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/page", page.local_addr().unwrap());
    let mock = Mock::start(
        &serde_json::json!({"steps": [
            {"tool_calls": [{"name": "http_get", "arguments": {"url": url}}]},
            {"text": "never"}
        ]})
        .to_string(),
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    std::fs::write(
        home.join("keel.toml"),
        format!("{FAST_RETRIES}\nhttp_allow_private = true\n"),
    )
    .unwrap();
    let log = home.join("events.jsonl");
    let mut child = keel_run(&home, &mock, &log)
        .args(["--hard-timeout", "0.3", "--workspace"])
        .arg(&workspace)
        .arg("fetch the page")
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
