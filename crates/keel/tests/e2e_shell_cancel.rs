//! End to end, Ctrl-C during a `shell` command: the run is cancelled at its next safe point,
//! and the command — a side effect in flight — finishes and its result is stored, as the
//! README's cancellation paragraph promises (it used to be killed).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Mock, bound, keel, temp};
use serde_json::{Value, json};

/// Waits until `check` holds, at most `deadline`; whether it did.
fn eventually(deadline: Duration, mut check: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + deadline;
    while Instant::now() < until {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    check()
}

#[test]
fn ctrl_c_lets_a_running_shell_command_finish() {
    // The command waits for the test's go, given once keel has been interrupted.
    let command =
        "touch started; while [ ! -e go ]; do sleep 0.01; done; echo finished >> f; echo done";
    let script = json!({"steps": [
        {"tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
        {"text": "Finished.", "forever": true}
    ]});
    let mock = Mock::start(&script.to_string());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let mut child = keel(&home)
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
        .arg("append finished")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    bound::started(child.id());
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let started = eventually(Duration::from_secs(60), || {
        workspace.join("started").exists()
    });
    let interrupted = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    // keel saw the interrupt before the command can end. stderr is read to its end, so that
    // keel never writes to a closed pipe.
    let (seen, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut line = String::new();
        while stderr.read_line(&mut line).is_ok_and(|n| n > 0) {
            if line.contains("cancelling") {
                let _ = seen.send(());
            }
            line.clear();
        }
    });
    let cancelling = said.recv_timeout(Duration::from_secs(60)).ok();
    std::fs::write(workspace.join("go"), "").unwrap();
    let status = bound::wait_until(&mut child, Duration::from_secs(60));
    bound::ended(child.id());
    assert!(started, "the command never ran");
    assert!(interrupted.success());
    let status = status.expect("keel did not exit after Ctrl-C");
    assert!(cancelling.is_some(), "keel did not say it was cancelling");

    assert_eq!(
        std::fs::read_to_string(workspace.join("f")).ok().as_deref(),
        Some("finished\n"),
        "the command was killed"
    );
    let mut out = String::new();
    use std::io::Read;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(status.code(), Some(3), "{report}");
    assert_eq!(report["state"], "cancelled", "{report}");
    let call = &report["tool_calls"][0];
    assert_eq!(call["ok"], true, "{call}");
    assert!(call["output"].as_str().unwrap().contains("done"), "{call}");
}
