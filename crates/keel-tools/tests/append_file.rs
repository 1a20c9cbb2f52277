//! `append_file` as the model sees it.

mod common;

use std::fs;
use std::sync::Arc;

use common::{Fixture, call, text};
use keel_core::{Tool, ToolCall, ToolErrorKind, ToolRegistry};
use keel_tools::{AppendFile, FILES_MODULE, Workspace};
use serde_json::json;

/// Names in a directory, sorted.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn creates_the_file_then_appends_to_it() {
    let fx = Fixture::new();
    let out = call(
        &fx.append,
        json!({"path": "log/run.txt", "content": "one\n"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "appended 4 bytes to log/run.txt (it now has 4 bytes)");
    assert_eq!(fs::read_to_string(fx.at("log/run.txt")).unwrap(), "one\n");

    let out = call(&fx.append, json!({"path": "log/run.txt", "content": "two"}))
        .await
        .unwrap();
    assert_eq!(out, "appended 3 bytes to log/run.txt (it now has 7 bytes)");
    assert_eq!(
        fs::read_to_string(fx.at("log/run.txt")).unwrap(),
        "one\ntwo"
    );
}

#[tokio::test]
async fn appends_to_an_existing_file_without_adding_a_newline() {
    let fx = Fixture::new();
    fs::write(fx.at("notes.md"), "no newline at the end").unwrap();
    let out = call(
        &fx.append,
        json!({"path": "./notes.md", "content": "; more"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "appended 6 bytes to notes.md (it now has 27 bytes)");
    assert_eq!(
        fs::read_to_string(fx.at("notes.md")).unwrap(),
        "no newline at the end; more"
    );
}

#[tokio::test]
async fn two_appends_in_a_row_keep_both_contents_in_order() {
    let fx = Fixture::new();
    for content in ["first\n", "second\n"] {
        call(&fx.append, json!({"path": "a.txt", "content": content}))
            .await
            .unwrap();
    }
    assert_eq!(
        fs::read_to_string(fx.at("a.txt")).unwrap(),
        "first\nsecond\n"
    );
}

#[tokio::test]
async fn concurrent_appends_never_overwrite_each_other() {
    let fx = Arc::new(Fixture::new());
    let mut tasks = Vec::new();
    for i in 0..32 {
        let fx = fx.clone();
        tasks.push(tokio::spawn(async move {
            let line = format!("line {i:02} {}\n", "x".repeat(200));
            call(&fx.append, json!({"path": "shared.txt", "content": line}))
                .await
                .unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let content = fs::read_to_string(fx.at("shared.txt")).unwrap();
    let mut lines: Vec<&str> = content.lines().collect();
    lines.sort();
    let expected: Vec<String> = (0..32)
        .map(|i| format!("line {i:02} {}", "x".repeat(200)))
        .collect();
    assert_eq!(lines, expected);
}

#[tokio::test]
async fn counts_bytes_not_characters() {
    let fx = Fixture::new();
    let out = call(&fx.append, json!({"path": "ü.txt", "content": "née "}))
        .await
        .unwrap();
    assert_eq!(out, "appended 5 bytes to ü.txt (it now has 5 bytes)");
    let out = call(&fx.append, json!({"path": "ü.txt", "content": "日本 🦀"}))
        .await
        .unwrap();
    assert_eq!(out, "appended 11 bytes to ü.txt (it now has 16 bytes)");
    assert_eq!(fs::read_to_string(fx.at("ü.txt")).unwrap(), "née 日本 🦀");
}

#[tokio::test]
async fn empty_content_still_creates_the_file() {
    let fx = Fixture::new();
    let out = call(&fx.append, json!({"path": "empty.txt", "content": ""}))
        .await
        .unwrap();
    assert_eq!(out, "appended 0 bytes to empty.txt (it now has 0 bytes)");
    assert_eq!(fs::metadata(fx.at("empty.txt")).unwrap().len(), 0);
}

#[tokio::test]
async fn a_directory_cannot_be_appended_to() {
    let fx = Fixture::new();
    fs::create_dir(fx.at("src")).unwrap();
    let err = call(&fx.append, json!({"path": "src", "content": "x"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    assert!(
        err.message.contains("src is a directory"),
        "{}",
        err.message
    );
    assert!(names(&fx.at("src")).is_empty());

    let err = call(&fx.append, json!({"path": ".", "content": "x"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Denied);
}

#[tokio::test]
async fn paths_outside_the_root_are_denied_and_nothing_is_written() {
    let fx = Fixture::new();
    fs::write(fx.outside.join("x.txt"), "original").unwrap();
    for path in [
        "../outside/x.txt".to_string(),
        "a/../../outside/x.txt".to_string(),
        text(&fx.outside.join("x.txt")).to_string(),
        text(&fx.outside.join("new.txt")).to_string(),
    ] {
        let err = call(&fx.append, json!({"path": path, "content": "x"}))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::Denied, "{path}: {}", err.message);
        assert!(err.message.contains("cannot write"), "{}", err.message);
    }
    assert_eq!(
        fs::read_to_string(fx.outside.join("x.txt")).unwrap(),
        "original"
    );
    assert_eq!(names(&fx.outside), vec!["x.txt"]);
    assert!(
        names(&fx.root).is_empty(),
        "no directories created on refusal"
    );
}

#[tokio::test]
async fn absolute_paths_inside_the_root_are_allowed() {
    let fx = Fixture::new();
    let out = call(
        &fx.append,
        json!({"path": text(&fx.at("abs.txt")), "content": "ok"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "appended 2 bytes to abs.txt (it now has 2 bytes)");
}

#[cfg(unix)]
#[tokio::test]
async fn symlinks_out_of_the_root_are_denied() {
    use std::os::unix::fs::symlink;

    let fx = Fixture::new();
    fs::write(fx.outside.join("target.txt"), "original").unwrap();
    symlink(fx.outside.join("target.txt"), fx.at("link.txt")).unwrap();
    symlink(fx.outside.join("not-yet.txt"), fx.at("dangling.txt")).unwrap();
    symlink(&fx.outside, fx.at("escape")).unwrap();
    for path in [
        "link.txt",
        "dangling.txt",
        "escape/target.txt",
        "escape/new.txt",
        "escape/deep/new.txt",
    ] {
        let err = call(&fx.append, json!({"path": path, "content": "pwned"}))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::Denied, "{path}: {}", err.message);
        assert!(
            err.message.contains(&format!("`{path}`")),
            "{}",
            err.message
        );
    }
    assert_eq!(
        fs::read_to_string(fx.outside.join("target.txt")).unwrap(),
        "original"
    );
    assert_eq!(names(&fx.outside), vec!["target.txt"]);
}

#[cfg(unix)]
#[tokio::test]
async fn symlinks_inside_the_root_are_appended_through() {
    use std::os::unix::fs::symlink;

    let fx = Fixture::new();
    fs::create_dir(fx.at("real")).unwrap();
    fs::write(fx.at("real/log.txt"), "a").unwrap();
    symlink("real/log.txt", fx.at("shortcut.txt")).unwrap();
    let out = call(&fx.append, json!({"path": "shortcut.txt", "content": "b"}))
        .await
        .unwrap();
    assert_eq!(out, "appended 1 bytes to shortcut.txt (it now has 2 bytes)");
    assert!(
        fs::symlink_metadata(fx.at("shortcut.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read_to_string(fx.at("real/log.txt")).unwrap(), "ab");
}

#[cfg(unix)]
#[tokio::test]
async fn special_files_are_refused_instead_of_blocking() {
    let fx = Fixture::new();
    let made = std::process::Command::new("mkfifo")
        .arg(fx.at("pipe"))
        .status();
    if !made.is_ok_and(|status| status.success()) {
        eprintln!("mkfifo is not available; skipping");
        return;
    }
    let err = call(&fx.append, json!({"path": "pipe", "content": "x"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    assert!(
        err.message.contains("not a regular file"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn the_spec_is_a_side_effect_that_registers() {
    let fx = Fixture::new();
    let tool = Arc::new(AppendFile::new(Arc::new(Workspace::new(&fx.root).unwrap())));
    let spec = tool.spec().clone();
    assert_eq!(spec.name, "append_file");
    assert!(!spec.idempotent, "a retry would append twice");
    assert!(!spec.interactive);
    assert_eq!(spec.module.as_deref(), Some(FILES_MODULE));
    assert_eq!(spec.parameters["additionalProperties"], false);
    assert_eq!(spec.parameters["properties"]["content"]["type"], "string");

    let mut registry = ToolRegistry::new();
    registry.register(tool).unwrap();
    assert_eq!(registry.specs(), vec![spec]);
    let prepared = registry
        .prepare(&ToolCall {
            id: "c".into(),
            name: "append_file".into(),
            arguments: r#"{"path": "r.txt", "content": "via registry"}"#.into(),
        })
        .ok()
        .unwrap();
    let out = prepared
        .tool
        .call(prepared.args, &common::ctx())
        .await
        .unwrap();
    assert_eq!(
        out.content,
        "appended 12 bytes to r.txt (it now has 12 bytes)"
    );
}
