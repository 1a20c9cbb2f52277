//! End to end: the workspace's `AGENTS.md` goes into the system prompt as its owner's
//! instructions; one that is a symlink leading outside the workspace is never read; without
//! `AGENTS.md`, a `CLAUDE.md` is used instead. (An untrusted session's view of it is in
//! keel-tools' tests/project_context.rs.)

mod common;

use std::path::Path;

use common::{Mock, keel_run, run, stderr, temp};
use serde_json::{Value, json};

fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .filter(|_| request["messages"][0]["role"] == "system")
        .unwrap_or_default()
        .to_string()
}

/// One run in `workspace`; the system prompt it sent.
fn prompt_of(home: &Path, mock: &Mock, workspace: &Path) -> String {
    let mut command = keel_run(home, mock, &home.join("events.jsonl"));
    command.arg("--workspace").arg(workspace);
    let output = run(command.arg("What should I run before a commit?"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    system_prompt(mock.requests().last().unwrap())
}

#[test]
fn agents_md_is_the_owners_text_and_never_read_through_an_outside_link() {
    let mock =
        Mock::start(&json!({"per_turn": true, "steps": [{"text": "make check"}]}).to_string());
    let (_home_guard, home) = temp();
    let (_ws_guard, workspace) = temp();
    std::fs::write(
        workspace.join("AGENTS.md"),
        "# Conventions\nRun `make check` before you commit.\n",
    )
    .unwrap();

    let trusted = prompt_of(&home, &mock, &workspace);
    assert!(
        trusted.contains("## Project context")
            && trusted.contains("keeps these instructions for coding agents in `AGENTS.md`")
            && trusted.contains("Run `make check` before you commit."),
        "{trusted}"
    );

    // A link out of the workspace is not followed, and no other file stands in for it.
    let (_out_guard, outside) = temp();
    std::fs::write(outside.join("notes.md"), "SECRET-OUTSIDE-THE-WORKSPACE").unwrap();
    let (_linked_guard, linked) = temp();
    std::os::unix::fs::symlink(outside.join("notes.md"), linked.join("AGENTS.md")).unwrap();
    std::fs::write(linked.join("CLAUDE.md"), "CLAUDE-FALLBACK").unwrap();
    let prompt = prompt_of(&home, &mock, &linked);
    assert!(!prompt.contains("SECRET-OUTSIDE"), "{prompt}");
    assert!(!prompt.contains("Project context"), "{prompt}");

    // Without AGENTS.md, the file another tool reads for the same purpose.
    std::fs::remove_file(linked.join("AGENTS.md")).unwrap();
    let prompt = prompt_of(&home, &mock, &linked);
    assert!(
        prompt.contains("in `CLAUDE.md`") && prompt.contains("CLAUDE-FALLBACK"),
        "{prompt}"
    );
}
