//! `write_file` as the model sees it.

mod common;

use std::fs;

use common::{Fixture, call, text};
use keel_core::ToolErrorKind;
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
async fn creates_a_file_and_its_parent_directories() {
    let fx = Fixture::new();
    let out = call(&fx.write, json!({"path": "a/b/c.txt", "content": "hello"}))
        .await
        .unwrap();
    assert_eq!(out, "wrote 5 bytes to a/b/c.txt (created a new file)");
    assert_eq!(fs::read_to_string(fx.at("a/b/c.txt")).unwrap(), "hello");
}

#[tokio::test]
async fn replaces_a_file_atomically_leaving_no_temp_files() {
    let fx = Fixture::new();
    fs::create_dir(fx.at("docs")).unwrap();
    fs::write(fx.at("docs/readme.md"), "old text that is longer").unwrap();
    let out = call(
        &fx.write,
        json!({"path": "./docs/readme.md", "content": "new"}),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        "wrote 3 bytes to docs/readme.md (replaced the existing file)"
    );
    assert_eq!(fs::read_to_string(fx.at("docs/readme.md")).unwrap(), "new");
    assert_eq!(names(&fx.at("docs")), vec!["readme.md"]);
}

#[cfg(unix)]
#[tokio::test]
async fn replacing_keeps_the_file_permissions() {
    use std::os::unix::fs::PermissionsExt;

    let fx = Fixture::new();
    fs::write(fx.at("run.sh"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(fx.at("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    call(
        &fx.write,
        json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}),
    )
    .await
    .unwrap();
    let mode = fs::metadata(fx.at("run.sh")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
}

#[tokio::test]
async fn counts_bytes_not_characters() {
    let fx = Fixture::new();
    let out = call(&fx.write, json!({"path": "ü.txt", "content": "née"}))
        .await
        .unwrap();
    assert_eq!(out, "wrote 4 bytes to ü.txt (created a new file)");
}

#[tokio::test]
async fn a_directory_cannot_be_overwritten() {
    let fx = Fixture::new();
    fs::create_dir(fx.at("src")).unwrap();
    let err = call(&fx.write, json!({"path": "src", "content": "x"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    assert!(err.message.contains("is a directory"), "{}", err.message);

    let err = call(&fx.write, json!({"path": ".", "content": "x"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Denied);
}

#[tokio::test]
async fn paths_outside_the_root_are_denied_and_nothing_is_written() {
    let fx = Fixture::new();
    for path in [
        "../outside/x.txt".to_string(),
        "a/../../outside/x.txt".to_string(),
        text(&fx.outside.join("x.txt")).to_string(),
    ] {
        let err = call(&fx.write, json!({"path": path, "content": "x"}))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::Denied, "{}", err.message);
    }
    assert!(names(&fx.outside).is_empty());
    assert!(
        names(&fx.root).is_empty(),
        "no directories created on refusal"
    );
}

#[tokio::test]
async fn absolute_paths_inside_the_root_are_allowed() {
    let fx = Fixture::new();
    let out = call(
        &fx.write,
        json!({"path": text(&fx.at("abs.txt")), "content": "ok"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "wrote 2 bytes to abs.txt (created a new file)");
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
        "escape/new.txt",
        "escape/deep/new.txt",
    ] {
        let err = call(&fx.write, json!({"path": path, "content": "pwned"}))
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
async fn symlinks_inside_the_root_are_written_through() {
    use std::os::unix::fs::symlink;

    let fx = Fixture::new();
    fs::create_dir(fx.at("real")).unwrap();
    symlink("real", fx.at("alias")).unwrap();
    let out = call(
        &fx.write,
        json!({"path": "alias/new.txt", "content": "via alias"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "wrote 9 bytes to alias/new.txt (created a new file)");
    assert_eq!(
        fs::read_to_string(fx.at("real/new.txt")).unwrap(),
        "via alias"
    );

    // A file link keeps pointing at its target, which gets the new content.
    symlink("real/new.txt", fx.at("shortcut.txt")).unwrap();
    call(
        &fx.write,
        json!({"path": "shortcut.txt", "content": "again"}),
    )
    .await
    .unwrap();
    assert!(
        fs::symlink_metadata(fx.at("shortcut.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read_to_string(fx.at("real/new.txt")).unwrap(), "again");
}
