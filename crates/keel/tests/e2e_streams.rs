//! End to end: an answer that arrives cut short is never used. A stream that closes cleanly
//! before its API's terminal marker, or a malformed whole answer, is retried; nothing of the cut
//! attempt runs or is stored, and text it already printed is marked as not the answer.

mod common;

use common::{Mock, events, find, keel, keel_run, report, run, stderr, stdout, temp, transcript};

const APIS: [&str; 3] = ["openai-chat", "anthropic-messages", "openai-responses"];

#[test]
fn a_batch_cut_by_a_clean_close_is_never_executed_and_the_retry_is_the_answer() {
    for api in APIS {
        // Two writes whose stream closes cleanly mid-way, then the real answer.
        let mock = Mock::start(
            r#"{"steps": [
                {"tool_calls": [
                    {"name": "write_file", "arguments": {"path": "first.txt", "content": "one"}},
                    {"name": "write_file", "arguments": {"path": "second.txt", "content": "two"}}
                 ], "cut_after_chunks": 4, "cut_mode": "eof"},
                {"text": "Nothing was written."}
            ]}"#,
        );
        let (_h, home) = temp();
        let workspace = tempfile::tempdir().unwrap();
        let log = home.join("events.jsonl");
        let output = run(keel_run(&home, &mock, &log)
            .args(["--api", api, "--workspace"])
            .arg(workspace.path())
            .arg("write two files"));
        assert_eq!(output.status.code(), Some(0), "{api}: {}", stderr(&output));
        let report = report(&output);
        assert_eq!(report["final_text"], "Nothing was written.", "{api}");
        assert_eq!(report["tool_calls"], serde_json::json!([]), "{api}");
        assert_eq!(mock.requests().len(), 2, "{api}");
        let entries: Vec<_> = std::fs::read_dir(workspace.path()).unwrap().collect();
        assert!(entries.is_empty(), "{api}: a cut call ran: {entries:?}");

        let events = events(&log);
        let retries = find(&events, "agent.provider.retry");
        assert_eq!(retries.len(), 1, "{api}");
        assert_eq!(retries[0]["kind"], "network", "{api}");
        assert!(find(&events, "agent.tool.started").is_empty(), "{api}");
        let session = report["session_id"].as_str().unwrap();
        let shown = transcript(&home, session);
        assert!(!shown.contains("first.txt"), "{api}: {shown}");
    }
}

#[test]
fn a_malformed_answer_is_retried_and_the_next_one_completes_the_run() {
    // A whole answer whose JSON never ends: malformed, retried once, then a good answer.
    let mock = Mock::start(
        r#"{"steps": [
            {"text": "a perfectly fine answer", "cut_after_chunks": 1, "cut_mode": "eof"},
            {"text": "Second time lucky."}
        ]}"#,
    );
    let (_h, home) = temp();
    let log = home.join("events.jsonl");
    let output = run(keel_run(&home, &mock, &log).args(["--no-stream", "hi"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(report(&output)["final_text"], "Second time lucky.");
    assert_eq!(mock.requests().len(), 2);
    let events = events(&log);
    let retries = find(&events, "agent.provider.retry");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0]["kind"], "malformed_response");
}

#[test]
fn text_printed_by_a_call_that_failed_is_marked_as_not_the_answer() {
    let mock = Mock::start(
        r#"{"steps": [
            {"text": "partial words that never end", "cut_after_chunks": 2},
            {"text": "The real answer."}
        ]}"#,
    );
    let (_h, home) = temp();
    let output =
        run(keel(&home).args(["run", "--provider", "mock", "--base-url", &mock.url, "hi"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let out = stdout(&output);
    let marker = out
        .find("[keel: the text above is from a model call that failed; it is not the answer]")
        .unwrap_or_else(|| panic!("no withdrawal marker in {out:?}"));
    let partial = out.find("partial").expect("the cut text was streamed");
    let answer = out.find("The real answer.").expect("the answer is printed");
    assert!(partial < marker && marker < answer, "{out:?}");
    assert_eq!(out.matches("partial").count(), 1, "{out:?}");
}
