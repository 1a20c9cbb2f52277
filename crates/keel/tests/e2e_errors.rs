//! End to end: every bad input gives the user a clear message, the right exit code, and loses
//! nothing they typed.

mod common;

use common::{Mock, keel, run, stderr, stdout, temp};
use serde_json::Value;

/// The stored transcript of the only session in `home`.
fn only_session_transcript(home: &std::path::Path) -> String {
    let listed = stdout(&run(keel(home).arg("sessions")));
    let id = listed
        .split_whitespace()
        .next()
        .expect("a session was stored")
        .to_string();
    stdout(&run(keel(home).args(["sessions", "show", &id])))
}

/// The error lines of stderr: everything but the notices of retries, which come first.
fn error_lines(output: &std::process::Output) -> Vec<String> {
    let lines: Vec<String> = stderr(output)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    let (retries, errors): (Vec<String>, Vec<String>) =
        lines.into_iter().partition(|l| l.starts_with('↻'));
    assert!(retries.iter().all(|l| l.contains("retry")), "{retries:?}");
    errors
}

#[test]
fn a_missing_key_names_the_variable_and_keeps_the_message() {
    let (_h, home) = temp();
    let output = run(keel(&home).args(["run", "--provider", "openai", "hello there"]));
    assert_eq!(output.status.code(), Some(2));
    let lines = error_lines(&output);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("OPENAI_API_KEY is not set"), "{lines:?}");
    assert!(
        lines[0].contains("your message is saved in session"),
        "{lines:?}"
    );
    assert!(only_session_transcript(&home).contains("hello there"));
}

#[test]
fn an_unreachable_base_url_is_one_line_and_the_message_is_stored() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let (_h, home) = temp();
    let url = format!("http://127.0.0.1:{port}/v1");
    let output = run(keel(&home).args([
        "run",
        "--provider",
        "openai",
        "--base-url",
        &url,
        "are you there?",
    ]));
    assert_eq!(output.status.code(), Some(3));
    let lines = error_lines(&output);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("run ended as error"), "{lines:?}");
    assert!(
        lines[0].contains(&format!("cannot reach {url}")),
        "{lines:?}"
    );
    assert!(only_session_transcript(&home).contains("are you there?"));
}

#[test]
fn a_malformed_response_is_one_line_and_the_message_is_stored() {
    // The body is cut in half: a 200 whose JSON never ends.
    let mock = Mock::start(
        r#"{"steps": [{"text": "a perfectly fine answer", "cut_after_chunks": 1, "cut_mode": "eof", "forever": true}]}"#,
    );
    let (_h, home) = temp();
    let output = run(keel(&home).args([
        "run",
        "--no-stream",
        "--provider",
        "mock",
        "--base-url",
        &mock.url,
        "hi",
    ]));
    assert_eq!(output.status.code(), Some(3));
    let lines = error_lines(&output);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("malformed_response"), "{lines:?}");
    assert!(only_session_transcript(&home).contains("hi"));
}

#[test]
fn a_stream_that_breaks_is_an_error_not_a_truncated_answer() {
    let mock = Mock::start(
        r#"{"steps": [{"text": "one two three four five six", "cut_after_chunks": 3, "forever": true}]}"#,
    );
    let (_h, home) = temp();
    let output = run(keel(&home).args([
        "run",
        "--json",
        "--provider",
        "mock",
        "--base-url",
        &mock.url,
        "hi",
    ]));
    assert_eq!(output.status.code(), Some(3));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["state"], "error");
    assert!(
        report["error"].as_str().unwrap().contains("network"),
        "{report}"
    );
    assert_eq!(report["final_text"], Value::Null);
}

#[test]
fn an_http_error_from_the_provider_is_reported_with_its_class() {
    let mock = Mock::start(r#"{"steps": [{"error": {"status": 401}}]}"#);
    let (_h, home) = temp();
    let output =
        run(keel(&home).args(["run", "--provider", "mock", "--base-url", &mock.url, "hi"]));
    assert_eq!(output.status.code(), Some(3));
    let lines = error_lines(&output);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("auth (HTTP 401)"), "{lines:?}");
}

#[test]
fn an_invalid_config_file_is_one_line_with_its_place_and_the_message_is_stored() {
    let (_h, home) = temp();
    let config = home.join("bad.toml");
    std::fs::write(&config, "model = \"m\"\nmax_iteratons = 3\n").unwrap();
    let output = run(keel(&home)
        .arg("--config")
        .arg(&config)
        .args(["run", "hello"]));
    assert_eq!(output.status.code(), Some(2));
    let lines = error_lines(&output);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("invalid config file") && lines[0].contains("line 2"),
        "{lines:?}"
    );
    assert!(lines[0].contains("max_iteratons"), "{lines:?}");
    assert!(only_session_transcript(&home).contains("hello"));
}

#[test]
fn the_default_config_file_in_keel_home_is_read() {
    let mock = Mock::start(r#"{"steps": [{"text": "configured"}]}"#);
    let (_h, home) = temp();
    std::fs::write(
        home.join("keel.toml"),
        format!(
            "provider = \"mock\"\nbase_url = \"{}\"\nmodel = \"from-config\"\n",
            mock.url
        ),
    )
    .unwrap();
    let output = run(keel(&home).args(["run", "--json", "hi"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(mock.requests()[0]["model"], "from-config");
}

#[test]
fn an_unknown_session_is_refused() {
    let (_h, home) = temp();
    let output = run(keel(&home).args([
        "run",
        "--provider",
        "mock",
        "--base-url",
        "http://127.0.0.1:9",
        "--session",
        "nope",
        "hi",
    ]));
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("no session `nope`"));
    let shown = run(keel(&home).args(["sessions", "show", "nope"]));
    assert_eq!(shown.status.code(), Some(2));
}

#[test]
fn usage_errors_exit_2() {
    let (_h, home) = temp();
    assert_eq!(
        run(keel(&home).arg("run")).status.code(),
        Some(2),
        "no prompt"
    );
    let output = run(keel(&home).args(["run", "--provider", "gemini", "hi"]));
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("unknown provider `gemini`"));
    let output = run(keel(&home).args([
        "run",
        "--provider",
        "mock",
        "--base-url",
        "localhost:1",
        "hi",
    ]));
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("must start with http://"));
}

#[test]
fn the_iteration_limit_exits_3_with_max_steps() {
    let mock = Mock::start(
        r#"{"steps": [{"tool_calls": [{"name": "list_dir", "arguments": {}}], "forever": true}]}"#,
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let output = run(keel(&home)
        .args([
            "run",
            "--json",
            "--max-iterations",
            "2",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--workspace",
        ])
        .arg(&workspace)
        .arg("loop"));
    assert_eq!(output.status.code(), Some(3));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["state"], "max_steps");
    assert_eq!(report["iterations"], 2);
    assert!(
        report["final_text"]
            .as_str()
            .unwrap()
            .contains("limit of 2 iterations")
    );
}

#[test]
fn a_workspace_escape_is_refused_to_the_model_and_the_run_goes_on() {
    let mock = Mock::start(
        r#"{"steps": [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "../secret"}}]},
            {"tool_calls": [{"name": "read_file", "arguments": "{not json"}]},
            {"text": "I could not read it."}
        ]}"#,
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    let output = run(keel(&home)
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
        .arg("read the secret"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let calls = report["tool_calls"].as_array().unwrap();
    assert!(
        calls[0]["output"]
            .as_str()
            .unwrap()
            .contains("`..` is not allowed")
    );
    assert_eq!(calls[1]["arguments"], "{not json");
    assert!(
        calls[1]["output"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
}

#[test]
fn a_bad_mock_script_is_a_clear_error() {
    let (_h, home) = temp();
    let script = home.join("script.json");
    std::fs::write(&script, r#"{"steps": [{"txt": "typo"}]}"#).unwrap();
    let output = run(keel(&home).args(["mock-provider", "--script"]).arg(&script));
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(err.contains("script.json") && err.contains("txt"), "{err}");
}
