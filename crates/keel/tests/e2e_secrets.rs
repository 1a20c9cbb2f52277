//! Secrets and hostile text end to end: a key or a base-URL password never reaches the
//! terminal, the events file or the store, and control sequences from a provider never reach
//! the terminal.

mod common;

use std::path::Path;
use std::process::Output;

use common::{Mock, keel, run, stderr, stdout, temp};

const KEY: &str = "sk-live-KEY-0123456789";
const PASSWORD: &str = "hunter2-PASSWORD";

/// 400s whose body echoes the key and tries to recolour, retitle and overwrite the terminal.
fn hostile_400s() -> String {
    let message = format!(
        "bad key {KEY} \u{1b}[31mRED\u{1b}[0m\u{1b}]0;owned title\u{7} safe\rOVERWRITE\u{8}\u{8}X"
    );
    let step = serde_json::json!({"error": {
        "status": 400,
        "body": serde_json::json!({"error": {"message": message}}).to_string()
    }});
    // One answer per run: the tests run keel against the same mock more than once.
    serde_json::json!({ "steps": vec![step; 4] }).to_string()
}

/// `keel run` against `base_url` with the key set, an events file, and `extra` flags.
fn run_with_secrets(home: &Path, base_url: &str, extra: &[&str]) -> Output {
    let events = home.join("events.jsonl");
    run(keel(home)
        .env("OPENAI_API_KEY", KEY)
        .args([
            "run",
            "--provider",
            "openai",
            "--base-url",
            base_url,
            "--events",
        ])
        .arg(&events)
        .args(extra)
        .arg("hello"))
}

/// Every place a secret could end up: the outputs, the events file, keel.db and its WAL.
fn assert_no_secret(home: &Path, outputs: &[&Output]) {
    let mut places: Vec<(String, Vec<u8>)> = Vec::new();
    for (i, output) in outputs.iter().enumerate() {
        places.push((format!("stdout {i}"), output.stdout.clone()));
        places.push((format!("stderr {i}"), output.stderr.clone()));
    }
    for name in ["events.jsonl", "keel.db", "keel.db-wal"] {
        if let Ok(bytes) = std::fs::read(home.join(name)) {
            places.push((name.to_string(), bytes));
        }
    }
    for (place, bytes) in &places {
        for secret in [KEY, PASSWORD] {
            let hits = bytes
                .windows(secret.len())
                .filter(|w| *w == secret.as_bytes())
                .count();
            assert_eq!(hits, 0, "{secret} found in {place}");
        }
    }
}

fn base_url(mock: &Mock) -> String {
    mock.url
        .replacen("http://", &format!("http://user:{PASSWORD}@"), 1)
        + "/v1"
}

#[test]
fn a_key_echoed_in_an_error_body_and_a_url_password_are_never_shown_or_stored() {
    let mock = Mock::start(&hostile_400s());
    let (_guard, home) = temp();
    let url = base_url(&mock);
    let plain = run_with_secrets(&home, &url, &[]);
    assert_eq!(plain.status.code(), Some(3), "{}", stderr(&plain));
    assert!(
        stderr(&plain).contains("bad key [redacted]"),
        "{}",
        stderr(&plain)
    );
    let json = run_with_secrets(&home, &url, &["--json"]);
    assert!(stdout(&json).contains("[redacted]"), "{}", stdout(&json));
    // A connection failure quotes the URL.
    let unreachable = run_with_secrets(
        &home,
        &format!("http://user:{PASSWORD}@127.0.0.1:1/v1"),
        &[],
    );
    assert!(
        stderr(&unreachable).contains("http://[redacted]@127.0.0.1:1/v1"),
        "{}",
        stderr(&unreachable)
    );
    let runs = run(keel(&home).args(["runs", "--limit", "10"]));
    let session = common::report(&json)["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let run_id = common::report(&json)["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = run(keel(&home).args(["runs", "show", &run_id]));
    let transcript = run(keel(&home).args(["sessions", "show", &session]));
    assert_no_secret(
        &home,
        &[&plain, &json, &unreachable, &runs, &shown, &transcript],
    );
}

#[test]
fn control_sequences_from_a_provider_never_reach_the_terminal() {
    let mock = Mock::start(&hostile_400s());
    let (_guard, home) = temp();
    let output = run_with_secrets(&home, &format!("{}/v1", mock.url), &[]);
    let json = run_with_secrets(&home, &format!("{}/v1", mock.url), &["--json"]);
    let run_id = common::report(&json)["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = run(keel(&home).args(["runs", "show", &run_id]));
    for (name, bytes) in [
        ("run stderr", &output.stderr),
        ("run stdout", &output.stdout),
        ("runs show", &shown.stdout),
    ] {
        let text = String::from_utf8_lossy(bytes);
        for control in ['\u{1b}', '\u{7}', '\r', '\u{8}'] {
            assert!(!text.contains(control), "{name} has {control:?}: {text:?}");
        }
    }
    let err = stderr(&output);
    assert!(err.contains("RED") && err.contains("OVERWRITEX"), "{err}");
    assert!(
        !err.contains("owned title"),
        "the OSC string goes with its sequence: {err}"
    );
}
