//! A reader of keel's stderr that goes away (`keel run … 2>&1 | head -1`, a closed log pipe)
//! costs the narration, never the run: keel used to panic on the broken pipe, and the run
//! ended `error (internal)`.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{Mock, keel_run, temp};
use serde_json::{Value, json};

#[test]
fn a_run_whose_stderr_is_closed_completes() {
    let mock = Mock::start(
        &json!({"steps": [
            {"text": "Looking.", "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
            {"text": "Here it is."}
        ]})
        .to_string(),
    );
    let (_h, home) = temp();
    let (_e, events) = temp();
    let mut child = keel_run(&home, &mock, &events.join("events.jsonl"))
        .arg("what is here?")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Nobody reads keel's stderr: its pipe is closed before keel writes to it.
    drop(child.stderr.take());
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let status =
        common::bound::wait_until(&mut child, Duration::from_secs(120)).expect("keel finished");
    let report: Value = serde_json::from_str(&reader.join().unwrap()).unwrap();
    assert_eq!(report["state"], "completed", "{report}");
    assert_eq!(status.code(), Some(0));
}
