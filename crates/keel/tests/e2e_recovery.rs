//! End to end: failed model calls are retried, waited out or handed to a fallback model, flaky
//! tools are retried when that is safe, and a broken config file falls back to its last good
//! copy — each seen from outside, through the `keel` binary, its report, stderr and events.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{
    FAST_RETRIES, Mock, events, find, keel, keel_run, names, report, run, stderr, temp,
    write_config,
};
use serde_json::Value;

#[test]
fn a_rate_limit_waits_as_long_as_the_provider_asks_then_succeeds() {
    let mock = Mock::start(
        r#"{"steps": [
            {"error": {"status": 429, "headers": {"retry-after-ms": "7"}}},
            {"text": "Done after waiting."}
        ]}"#,
    );
    let (_h, home) = temp();
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log).arg("hi"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["state"], "completed");
    assert_eq!(report["final_text"], "Done after waiting.");
    assert_eq!(mock.requests().len(), 2);

    let events = events(&log);
    let retries = find(&events, "agent.provider.retry");
    assert_eq!(retries.len(), 1, "{:?}", names(&events));
    assert_eq!(retries[0]["wait_ms"], 7, "{}", retries[0]);
    assert_eq!(retries[0]["kind"], "rate_limit");
    assert_eq!(retries[0]["attempt"], 1);
    assert_eq!(retries[0]["model"], "mock:mock-model");
    assert!(find(&events, "agent.provider.fallback").is_empty());
}

#[test]
fn a_rejected_key_stops_at_once_and_says_to_check_it() {
    let mock = Mock::start(r#"{"steps": [{"error": {"status": 401}, "forever": true}]}"#);
    let (_h, home) = temp();
    let log = home.join("events.jsonl");

    // Without --json: the one line on stderr.
    let output = run(keel(&home)
        .args([
            "run",
            "--provider",
            "mock",
            "--base-url",
            &mock.url,
            "--events",
        ])
        .arg(&log)
        .arg("hi"));
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(mock.requests().len(), 1, "an auth failure is never retried");
    let err = stderr(&output);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("run ended as error"), "{lines:?}");
    assert!(lines[0].contains("Check the API key"), "{lines:?}");

    let events = events(&log);
    assert!(find(&events, "agent.provider.retry").is_empty());
    let failed = find(&events, "agent_run.failed");
    assert_eq!(failed.len(), 1, "{:?}", names(&events));
    assert_eq!(failed[0]["state"], "error");
    assert_eq!(failed[0]["reason"], "provider_fatal");

    // With --json: the report says the same.
    let output = run(keel_run(&home, &mock, &home.join("second.jsonl")).arg("hi"));
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(mock.requests().len(), 2);
    let report = report(&output);
    assert_eq!(report["state"], "error");
    assert_eq!(report["reason"], "provider_fatal");
    assert!(
        report["error"].as_str().unwrap().contains("API key"),
        "{report}"
    );
}

/// Checks a run whose primary model was missing and whose fallback `to` answered.
fn assert_fell_back(mock: &Mock, output: &std::process::Output, log: &std::path::Path, to: &str) {
    assert_eq!(output.status.code(), Some(0), "{}", stderr(output));
    let report = report(output);
    assert_eq!(report["state"], "completed");
    assert_eq!(report["model"], to);
    assert_eq!(report["final_text"], "The backup answers.");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["model"], "mock-model");
    assert_eq!(requests[1]["model"], to);

    let events = events(log);
    assert!(
        find(&events, "agent.provider.retry").is_empty(),
        "a missing model is not retried"
    );
    let fallbacks = find(&events, "agent.provider.fallback");
    assert_eq!(fallbacks.len(), 1, "{:?}", names(&events));
    assert_eq!(fallbacks[0]["from"], "mock:mock-model");
    assert_eq!(fallbacks[0]["to"], format!("mock:{to}"));
    assert_eq!(fallbacks[0]["kind"], "model_not_found");
}

const MISSING_THEN_BACKUP: &str = r#"{"steps": [
    {"error": {"status": 404}},
    {"text": "The backup answers."}
]}"#;

#[test]
fn a_missing_model_falls_back_at_once_to_the_fallback_flag() {
    let mock = Mock::start(MISSING_THEN_BACKUP);
    let (_h, home) = temp();
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log)
        .args(["--fallback-model", "backup-model"])
        .arg("hi"));
    assert_fell_back(&mock, &output, &log, "backup-model");
}

#[test]
fn a_missing_model_falls_back_to_the_chain_in_keel_toml() {
    let mock = Mock::start(MISSING_THEN_BACKUP);
    let (_h, home) = temp();
    write_config(&home, "", "[models]\nfallback = [\"mock-backup\"]");
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log).arg("hi"));
    assert_fell_back(&mock, &output, &log, "mock-backup");
}

#[test]
fn repeated_server_errors_exhaust_the_retries_then_the_fallback_answers() {
    let mock = Mock::start(
        r#"{"steps": [
            {"error": {"status": 500}, "times": 3},
            {"text": "The backup answers."}
        ]}"#,
    );
    let (_h, home) = temp();
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log)
        .args(["--fallback-model", "backup-model"])
        .arg("hi"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["state"], "completed");
    assert_eq!(report["model"], "backup-model");
    assert_eq!(report["iterations"], 1, "retries are not iterations");
    let models: Vec<Value> = mock.requests().iter().map(|r| r["model"].clone()).collect();
    assert_eq!(
        models,
        ["mock-model", "mock-model", "mock-model", "backup-model"]
    );

    let events = events(&log);
    let retries = find(&events, "agent.provider.retry");
    assert_eq!(retries.len(), 2, "{:?}", names(&events));
    for (retry, attempt) in retries.iter().zip([1, 2]) {
        assert_eq!(retry["attempt"], attempt);
        assert_eq!(retry["kind"], "server");
        assert_eq!(retry["model"], "mock:mock-model");
        assert!(retry["wait_ms"].as_u64().unwrap() <= 5, "{retry}");
    }
    let fallbacks = find(&events, "agent.provider.fallback");
    assert_eq!(fallbacks.len(), 1);
    assert_eq!(fallbacks[0]["from"], "mock:mock-model");
    assert_eq!(fallbacks[0]["to"], "mock:backup-model");
    assert_eq!(fallbacks[0]["kind"], "server");
    assert_eq!(find(&events, "agent.model.error").len(), 3);
}

/// A tiny HTTP server that answers its requests with `replies` (status, body) in order, each
/// on its own connection; returns its URL and how many requests it served.
fn flaky_server(replies: Vec<(u16, &'static str)>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/data", listener.local_addr().unwrap());
    let served = Arc::new(AtomicUsize::new(0));
    let counter = served.clone();
    std::thread::spawn(move || {
        for (status, body) in replies {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let mut request = Vec::new();
            let mut buffer = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
            counter.fetch_add(1, Ordering::SeqCst);
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, served)
}

#[test]
fn a_flaky_idempotent_tool_is_retried_until_it_succeeds() {
    let (url, served) = flaky_server(vec![
        (503, "busy"),
        (503, "still busy"),
        (200, "the weather is fine"),
    ]);
    let mock = Mock::start(
        &serde_json::json!({"steps": [
            {"tool_calls": [{"name": "http_get", "arguments": {"url": url}}]},
            {"text": "It is fine."}
        ]})
        .to_string(),
    );
    let (_h, home) = temp();
    // The flaky server is on 127.0.0.1, which http_get refuses unless told (FAST_RETRIES ends
    // in the [tools] table).
    write_config(&home, "", "http_allow_private = true");
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log).arg("how is the weather?"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(served.load(Ordering::SeqCst), 3);
    let report = report(&output);
    let call = &report["tool_calls"][0];
    assert_eq!(call["name"], "http_get");
    assert_eq!(call["ok"], true, "{call}");
    let out = call["output"].as_str().unwrap();
    assert!(
        out.starts_with("HTTP 200") && out.contains("the weather is fine"),
        "{out}"
    );

    let events = events(&log);
    let retries = find(&events, "agent.tool.retry");
    assert_eq!(retries.len(), 2, "{:?}", names(&events));
    for (retry, attempt) in retries.iter().zip([1, 2]) {
        assert_eq!(retry["name"], "http_get");
        assert_eq!(retry["attempt"], attempt);
        assert_eq!(retry["wait_ms"], 1);
        assert_eq!(retry["call_id"], call["id"]);
        assert!(retry["error"].as_str().unwrap().contains("503"), "{retry}");
    }
    assert_eq!(find(&events, "agent.tool.completed").len(), 1);
}

#[test]
fn a_failing_side_effecting_tool_is_not_retried_and_the_model_sees_the_error() {
    let mock = Mock::start(
        r#"{"steps": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "notes", "content": "x"}}]},
            {"text": "notes is a directory, so I stopped."}
        ]}"#,
    );
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    std::fs::create_dir(workspace.join("notes")).unwrap();
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log)
        .arg("--workspace")
        .arg(&workspace)
        .arg("write notes"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = report(&output);
    let call = &report["tool_calls"][0];
    assert_eq!(call["name"], "write_file");
    assert_eq!(call["ok"], false);
    let error = call["output"].as_str().unwrap();
    assert!(
        error.starts_with("Error:") && error.contains("is a directory"),
        "{error}"
    );
    assert!(workspace.join("notes").is_dir());

    let events = events(&log);
    assert!(
        find(&events, "agent.tool.retry").is_empty(),
        "{:?}",
        names(&events)
    );
    assert_eq!(find(&events, "agent.tool.started").len(), 1);
    // The model got the error as the tool's result.
    let requests = mock.requests();
    let result = common::last_message(&requests[1]);
    assert_eq!(result["role"], "tool");
    assert_eq!(result["content"], error);
}

#[test]
fn a_broken_config_file_falls_back_to_its_last_good_copy() {
    let mock = Mock::start(r#"{"steps": [{"text": "first"}, {"text": "second"}]}"#);
    let (_h, home) = temp();
    let good = format!(
        "provider = \"mock\"\nbase_url = \"{}\"\nmodel = \"from-config\"\n\n{FAST_RETRIES}",
        mock.url
    );
    let config = home.join("keel.toml");
    let lastgood = home.join("keel.toml.lastgood");
    std::fs::write(&config, &good).unwrap();

    let output = run(keel(&home).args(["run", "--json", "hi"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        std::fs::read_to_string(&lastgood).unwrap(),
        good,
        "a successful call saves the config as the last good copy"
    );

    // Broken only in a setting that bounds nothing: the model has no value.
    std::fs::write(&config, good.replace("\"from-config\"", "")).unwrap();
    let log = home.join("events.jsonl");
    let output = run(keel(&home)
        .args(["run", "--json", "--events"])
        .arg(&log)
        .arg("again"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let second = report(&output);
    assert_eq!(second["final_text"], "second");
    assert_eq!(mock.requests()[1]["model"], "from-config");
    let err = stderr(&output);
    let warning = err
        .lines()
        .find(|l| l.contains("warning"))
        .unwrap_or_else(|| panic!("no warning on stderr: {err}"));
    assert!(
        warning.contains(&config.display().to_string())
            && warning.contains("line 3")
            && warning.contains(&format!(
                "using the last good configuration {}",
                lastgood.display()
            )),
        "{warning}"
    );
    let events = events(&log);
    let fallback = find(&events, "agent.config.fallback");
    assert_eq!(fallback.len(), 1, "{:?}", names(&events));
    assert_eq!(fallback[0]["path"], config.display().to_string());
    assert_eq!(fallback[0]["used"], lastgood.display().to_string());
    assert!(fallback[0]["error"].as_str().unwrap().contains("line 3"));
    assert_eq!(fallback[0]["session_id"], second["session_id"]);
    assert_eq!(
        std::fs::read_to_string(&lastgood).unwrap(),
        good,
        "the broken file never replaces the last good copy"
    );
}
