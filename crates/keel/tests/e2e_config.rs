//! The configuration file end to end: a broken file never loosens what a run may do.

mod common;

use common::{FAST_RETRIES, Mock, keel, run, stderr, temp};

/// A home whose last good copy allows any host, and whose keel.toml tightened the host list
/// but has a typo; returns the mock, the home's guard and path.
fn tightened_with_a_typo() -> (Mock, tempfile::TempDir, std::path::PathBuf) {
    let mock = Mock::start(r#"{"steps": [{"text": "answered"}]}"#);
    let (guard, home) = temp();
    let good = format!(
        "provider = \"mock\"\nbase_url = \"{}\"\nmodel = \"m\"\n\n{FAST_RETRIES}",
        mock.url
    );
    std::fs::write(home.join("keel.toml.lastgood"), &good).unwrap();
    std::fs::write(
        home.join("keel.toml"),
        format!("{good}http_allowed_hosts = [\"docs.rs\"]\nmodle = \"typo\"\n"),
    )
    .unwrap();
    (mock, guard, home)
}

#[test]
fn a_fallback_that_would_loosen_the_host_list_is_refused() {
    let (mock, _guard, home) = tightened_with_a_typo();
    let output = run(keel(&home).args(["run", "hi"]));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("modle")
            && err.contains("not falling back to the last good configuration")
            && err.contains("`tools.http_allowed_hosts`"),
        "{err}"
    );
    assert!(mock.requests().is_empty(), "no model call was made");
}

#[test]
fn a_fallback_that_would_drop_a_deny_hook_is_refused() {
    let mock = Mock::start(
        r#"{"steps": [{"tool_calls": [{"name": "write_file", "arguments": {"path": "x.txt", "content": "x"}}]}, {"text": "done"}]}"#,
    );
    let (_guard, home) = temp();
    let (_ws_guard, workspace) = temp();
    let good = format!(
        "provider = \"mock\"\nbase_url = \"{}\"\nmodel = \"m\"\n\n{FAST_RETRIES}",
        mock.url
    );
    std::fs::write(home.join("keel.toml.lastgood"), &good).unwrap();
    // The user added a hook that denies every write, and left the model without a value.
    let hook = "[[hooks]]\nevent = \"pre_tool\"\nmatcher = \"write_file\"\n\
                command = \"echo no writes >&2; exit 2\"\n";
    std::fs::write(
        home.join("keel.toml"),
        format!("{}\n{hook}", good.replace("\"m\"", "")),
    )
    .unwrap();
    let output = run(keel(&home)
        .args(["run", "--hard-timeout", "30", "--workspace"])
        .arg(&workspace)
        .arg("write x.txt"));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("not falling back to the last good configuration")
            && err.contains("`hooks[0].command`"),
        "{err}"
    );
    assert!(mock.requests().is_empty(), "no model call was made");
    assert!(!workspace.join("x.txt").exists());
}

#[test]
fn strict_config_refuses_any_fallback() {
    let mock = Mock::start(r#"{"steps": [{"text": "answered"}]}"#);
    let (_guard, home) = temp();
    let good = format!(
        "provider = \"mock\"\nbase_url = \"{}\"\nmodel = \"m\"\n\n{FAST_RETRIES}",
        mock.url
    );
    std::fs::write(home.join("keel.toml.lastgood"), &good).unwrap();
    // Broken only in a setting that bounds nothing: the model has no value.
    std::fs::write(home.join("keel.toml"), good.replace("\"m\"", "")).unwrap();

    let output = run(keel(&home).args(["--strict-config", "run", "hi"]));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("line 3") && err.contains("--strict-config: no fallback"),
        "{err}"
    );
    assert!(mock.requests().is_empty(), "no model call was made");

    // Without the flag, this harmless breakage still falls back.
    let output = run(keel(&home).args(["run", "hi"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn an_events_file_that_cannot_be_opened_stops_the_run_before_it_starts_and_keeps_the_message() {
    let mock = Mock::start(r#"{"steps": [{"text": "answered"}]}"#);
    let (_guard, home) = temp();
    let events = home.join("no-such-dir").join("events.jsonl");
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
        .arg("remember this"));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains(&format!("cannot open events file {}", events.display()))
            && err.contains("No such file or directory"),
        "{err}"
    );
    assert!(mock.requests().is_empty(), "the run did not start");
    let session = err
        .split("continue with --session ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no session named: {err}"));
    let transcript = common::transcript(&home, session);
    assert!(transcript.contains("remember this"), "{transcript}");
}

#[test]
fn an_events_file_that_fails_mid_run_is_said_on_stderr() {
    let full = std::path::Path::new("/dev/full");
    if !full.exists() {
        return; // Only Linux has a device that fails every write.
    }
    let mock = Mock::start(r#"{"steps": [{"text": "answered"}]}"#);
    let (_guard, home) = temp();
    let output = run(keel(&home)
        .args([
            "run",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--events",
        ])
        .arg(full)
        .arg("hi"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let err = stderr(&output);
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("cannot write events file /dev/full"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
}
