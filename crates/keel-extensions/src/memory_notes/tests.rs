use std::sync::Arc;

use serde_json::json;

use super::*;
use keel_core::tool::{Tool, ToolContext, ToolErrorKind};

fn ctx(user: Option<&str>) -> ToolContext {
    ToolContext {
        session_id: "s".into(),
        run_id: "r".into(),
        call_id: "c".into(),
        user_id: user.map(str::to_string),
        untrusted_source: false,
        place: None,
        cancel: Default::default(),
    }
}

#[test]
fn add_replace_and_remove_edit_entries() {
    let add =
        |text: &str, entry: &str| apply_edit(text, &MemoryEdit::Add(entry.into()), 1000).unwrap();
    let text = add(&add("", "uses cargo nextest"), "prefers tabs");
    assert_eq!(entries(&text), ["uses cargo nextest", "prefers tabs"]);
    let text = apply_edit(
        &text,
        &MemoryEdit::Replace("tabs".into(), "prefers spaces".into()),
        1000,
    )
    .unwrap();
    assert_eq!(entries(&text), ["uses cargo nextest", "prefers spaces"]);
    let text = apply_edit(&text, &MemoryEdit::Remove("nextest".into()), 1000).unwrap();
    assert_eq!(text, "prefers spaces");
}

#[test]
fn ambiguous_absent_duplicate_and_oversized_edits_are_refused() {
    let text = ["prefers tabs", "prefers short answers"].join(SEPARATOR);
    let error = apply_edit(&text, &MemoryEdit::Remove("prefers".into()), 1000).unwrap_err();
    assert!(error.contains("2 entries contain `prefers`"), "{error}");
    let error =
        apply_edit(&text, &MemoryEdit::Replace("vim".into(), "x".into()), 1000).unwrap_err();
    assert!(error.contains("no entry contains `vim`"), "{error}");
    let error = apply_edit(&text, &MemoryEdit::Add("prefers tabs".into()), 1000).unwrap_err();
    assert!(error.contains("already there"), "{error}");
    let error = apply_edit(&text, &MemoryEdit::Add("x".repeat(100)), 50).unwrap_err();
    assert!(
        error.contains("limit is 50 characters, it holds 36") && error.contains("Nothing"),
        "{error}"
    );
}

#[test]
fn calls_are_parsed_strictly() {
    for (args, needle) in [
        (
            json!({"action": "add", "target": "diary", "text": "x"}),
            "unknown target `diary`",
        ),
        (
            json!({"action": "nuke", "target": "memory"}),
            "unknown action `nuke`",
        ),
        (
            json!({"action": "add", "target": "memory"}),
            "non-empty `text`",
        ),
        (
            json!({"action": "add", "target": "memory", "text": "  "}),
            "non-empty `text`",
        ),
        (
            json!({"action": "replace", "target": "user", "text": "x"}),
            "`old_text`",
        ),
        (json!({"action": "remove", "target": "user"}), "`old_text`"),
        (
            json!({"action": "add", "target": "user", "text": "a\n§\nb"}),
            "may not contain `§`",
        ),
        (json!({"target": "user", "text": "a"}), "give an `action`"),
        (json!({"action": "add", "text": "a"}), "give a `target`"),
    ] {
        let error = parse_call(&args).unwrap_err();
        assert!(error.contains(needle), "{args}: {error}");
    }
}

#[test]
fn the_section_shows_what_there_is() {
    assert!(memory_section(&MemorySnapshot::default()).is_empty());
    assert_eq!(
        with_memory_section(Some("base".into()), &MemorySnapshot::default()).as_deref(),
        Some("base")
    );
    let snapshot = MemorySnapshot {
        memory: "the repo uses nextest".into(),
        user: String::new(),
    };
    let prompt = with_memory_section(Some("base".into()), &snapshot).unwrap();
    assert!(
        prompt.starts_with("base\n\n# Your durable memory"),
        "{prompt}"
    );
    assert!(prompt.contains("## MEMORY.md (what you learned)\nthe repo uses nextest"));
    assert!(!prompt.contains("USER.md"));
}

#[tokio::test]
async fn the_tool_keeps_users_apart_and_refuses_when_full() {
    let notes = Arc::new(InMemoryNotes::new());
    let limits = MemoryLimits {
        memory_chars: 40,
        user_chars: 30,
    };
    let memory = MemoryTool::new(notes.clone(), limits);
    assert_eq!(memory.spec().module.as_deref(), Some(MEMORY_MODULE));
    assert!(memory.spec().side_effecting());
    let out = memory
        .call(
            json!({"action": "add", "target": "memory", "text": "the build uses make"}),
            &ctx(Some("ann")),
        )
        .await
        .unwrap();
    assert!(
        out.content.contains("Saved MEMORY.md (1 entries, 19 of 40"),
        "{}",
        out.content
    );
    let error = memory
        .call(
            json!({"action": "add", "target": "memory", "text": "the tests need a database up"}),
            &ctx(Some("ann")),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind, ToolErrorKind::InvalidArguments);
    assert!(
        error
            .message
            .starts_with("MEMORY.md: the note is full: its limit is 40 characters, it holds 19"),
        "{}",
        error.message
    );
    let user = MemoryTool::new(notes.clone(), limits)
        .call(
            json!({"action": "add", "target": "user", "text": "x".repeat(31)}),
            &ctx(Some("ann")),
        )
        .await
        .unwrap_err();
    assert!(user.message.contains("limit is 30"), "{}", user.message);
    let snapshot = MemorySnapshot::take(notes.as_ref(), Some("ann"))
        .await
        .unwrap();
    assert_eq!(snapshot.memory, "the build uses make");
    assert_eq!(snapshot.user, "");
    let other = MemorySnapshot::take(notes.as_ref(), Some("bob"))
        .await
        .unwrap();
    assert_eq!(other, MemorySnapshot::default());
    assert_eq!(
        MemorySnapshot::take(notes.as_ref(), None).await.unwrap(),
        other
    );
}
