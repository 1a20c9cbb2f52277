//! End to end: `--show-reasoning` shows the model's reasoning on stderr, marked, for each wire
//! API, streamed and whole, in `keel run` and `keel chat`; without the flag it is not shown,
//! and it is never part of the answer on stdout.

mod common;

use common::{Mock, events, find, keel, run, stderr, stdout, temp};

const APIS: [&str; 3] = ["openai-chat", "anthropic-messages", "openai-responses"];

const SCRIPT: &str = r#"{"steps": [
    {"text": "Paris.", "reasoning": "The capital of France is Paris."}
]}"#;

#[test]
fn run_shows_reasoning_on_stderr_only_when_asked() {
    for api in APIS {
        for stream in [true, false] {
            let case = format!("{api} stream={stream}");
            let mock = Mock::start(SCRIPT);
            let (_h, home) = temp();
            let log = home.join("events.jsonl");
            let mut command = keel(&home);
            command
                .args([
                    "run",
                    "--show-reasoning",
                    "--provider",
                    "mock",
                    "--api",
                    api,
                ])
                .args(["--base-url", &mock.url, "--events"])
                .arg(&log);
            if !stream {
                command.arg("--no-stream");
            }
            let output = run(command.arg("capital of France?"));
            assert_eq!(output.status.code(), Some(0), "{case}: {}", stderr(&output));
            let (out, err) = (stdout(&output), stderr(&output));
            assert!(out.contains("Paris."), "{case}: {out}");
            assert!(!out.contains("capital of France is"), "{case}: {out}");
            assert!(
                err.contains("[reasoning] The capital of France is Paris.\n"),
                "{case}: {err}"
            );
            // Once, whether it streamed or came whole.
            assert_eq!(
                err.matches("capital of France is").count(),
                1,
                "{case}: {err}"
            );
            let events = events(&log);
            let reasoning = find(&events, "agent.model.reasoning");
            assert_eq!(reasoning.len(), 1, "{case}");
            assert_eq!(reasoning[0]["text"], "The capital of France is Paris.");
        }
    }

    let mock = Mock::start(SCRIPT);
    let (_h, home) = temp();
    let output = run(keel(&home)
        .args(["run", "--provider", "mock", "--base-url", &mock.url])
        .arg("capital of France?"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stdout(&output).contains("Paris."));
    let err = stderr(&output);
    assert!(!err.contains("capital of France is"), "{err}");
}

#[test]
fn chat_shows_reasoning_with_the_flag() {
    use std::io::Write;
    let mock = Mock::start(SCRIPT);
    let (_h, home) = temp();
    let mut child = keel(&home)
        .args(["chat", "--show-reasoning", "--provider", "mock"])
        .args(["--base-url", &mock.url])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"capital of France?\n/exit\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stdout(&output).contains("Paris."), "{}", stdout(&output));
    let err = stderr(&output);
    assert!(
        err.contains("[reasoning] The capital of France is Paris.\n"),
        "{err}"
    );
}
