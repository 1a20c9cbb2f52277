//! Redaction end to end: keel's secrets never leave in a tool's result (not to the provider,
//! not in the `--json` report, not in keel.db or the events), and a secret in a base URL's
//! query is redacted like its password.

mod common;

use std::path::Path;
use std::process::Output;

use common::{Mock, keel, report, run, stderr, stdout, temp, write_config};
use serde_json::json;

const KEY: &str = "sk-live-TOOL-KEY-0123456789";
const ANTHROPIC: &str = "sk-ant-OTHER-KEY-9876543210";
const DB_URL: &str = "postgres://app:db-PASSWORD-42@db/prod";
const TOKEN: &str = "tok-QUERY-SECRET-555";

/// Asserts that none of `secrets` is in `outputs`, the events file, keel.db or its WAL.
fn assert_nowhere(home: &Path, outputs: &[&Output], secrets: &[&str]) {
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
        for secret in secrets {
            let found = bytes.windows(secret.len()).any(|w| w == secret.as_bytes());
            assert!(!found, "{secret} found in {place}");
        }
    }
}

#[test]
fn a_tool_result_that_prints_keels_secrets_is_redacted_before_it_is_stored_shown_or_sent() {
    let mock = Mock::start(
        &json!({"steps": [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "leak.txt"}}]},
            {"text": "done"}
        ]})
        .to_string(),
    );
    let (_home_guard, home) = temp();
    let (_ws_guard, workspace) = temp();
    // What a command printing keel's environment would show.
    std::fs::write(
        workspace.join("leak.txt"),
        format!("OPENAI_API_KEY={KEY}\nANTHROPIC_API_KEY={ANTHROPIC}\nWORK_DB_URL={DB_URL}\n"),
    )
    .unwrap();
    write_config(&home, "", "[tools.shell]\nsecret_env = [\"WORK_DB_URL\"]\n");
    let events = home.join("events.jsonl");
    let output = run(keel(&home)
        .env("OPENAI_API_KEY", KEY)
        .env("ANTHROPIC_API_KEY", ANTHROPIC)
        .env("WORK_DB_URL", DB_URL)
        .args(["run", "--json", "--hard-timeout", "30", "--events"])
        .arg(&events)
        .args(["--provider", "openai", "--base-url"])
        .arg(format!("{}/v1", mock.url))
        .arg("--workspace")
        .arg(&workspace)
        .arg("read leak.txt"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["final_text"], "done");
    let result = report["tool_calls"][0]["output"].as_str().unwrap();
    assert_eq!(
        result,
        "OPENAI_API_KEY=[redacted]\nANTHROPIC_API_KEY=[redacted]\nWORK_DB_URL=[redacted]\n"
    );

    // The provider got the redacted result, never a secret.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let sent = serde_json::to_string(&requests).unwrap();
    for secret in [KEY, ANTHROPIC, DB_URL, "db-PASSWORD-42"] {
        assert!(
            !sent.contains(secret),
            "{secret} sent to the provider: {sent}"
        );
    }
    assert!(
        common::last_message(&requests[1])["content"]
            .as_str()
            .unwrap()
            .contains("OPENAI_API_KEY=[redacted]"),
        "{sent}"
    );
    let session = report["session_id"].as_str().unwrap().to_string();
    let transcript = run(keel(&home).args(["sessions", "show", &session]));
    assert_nowhere(
        &home,
        &[&output, &transcript],
        &[KEY, ANTHROPIC, DB_URL, "db-PASSWORD-42"],
    );
}

#[test]
fn a_token_in_the_base_urls_query_is_never_shown_or_stored() {
    let (_guard, home) = temp();
    // In keel.toml, as an operator would configure a gateway that takes its key in the URL.
    write_config(
        &home,
        &format!(
            "provider = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1?api-version=1&token={TOKEN}\""
        ),
        "",
    );
    let events = home.join("events.jsonl");
    let json = run(keel(&home)
        .env("OPENAI_API_KEY", KEY)
        .args(["run", "--json", "--hard-timeout", "30", "--events"])
        .arg(&events)
        .arg("hello"));
    assert_eq!(json.status.code(), Some(3), "{}", stderr(&json));
    let error = report(&json)["error"].to_string();
    assert!(
        error.contains("127.0.0.1:1") && error.contains("[redacted]"),
        "the error still says where: {error}"
    );
    // The same as a flag, the error on stderr.
    let plain = run(keel(&home).env("OPENAI_API_KEY", KEY).args([
        "run",
        "--hard-timeout",
        "30",
        "--base-url",
        &format!("http://127.0.0.1:1/v1?key={TOKEN}"),
        "hello",
    ]));
    assert_eq!(plain.status.code(), Some(3), "{}", stderr(&plain));
    assert!(stderr(&plain).contains("[redacted]"), "{}", stderr(&plain));
    let run_id = report(&json)["run_id"].as_str().unwrap().to_string();
    let shown = run(keel(&home).args(["runs", "show", &run_id]));
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    assert!(stdout(&shown).contains("127.0.0.1:1"), "{}", stdout(&shown));
    assert_nowhere(&home, &[&json, &plain, &shown], &[TOKEN, KEY]);
}
