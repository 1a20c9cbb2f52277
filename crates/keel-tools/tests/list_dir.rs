//! `list_dir` as the model sees it.

mod common;

use std::fs;

use common::{Fixture, call, text};
use keel_core::ToolErrorKind;
use keel_tools::files::MAX_LIST_ENTRIES;
use serde_json::json;

#[tokio::test]
async fn lists_sorted_entries_with_dirs_and_sizes() {
    let fx = Fixture::new();
    fs::create_dir(fx.at("src")).unwrap();
    fs::write(fx.at("b.txt"), "12345").unwrap();
    fs::write(fx.at("a.txt"), "").unwrap();
    fs::write(fx.at("src/lib.rs"), "//").unwrap();
    let out = call(&fx.list, json!({})).await.unwrap();
    assert_eq!(
        out,
        "./ (3 entries)\na.txt  (0 bytes)\nb.txt  (5 bytes)\nsrc/"
    );

    let out = call(&fx.list, json!({"path": "src"})).await.unwrap();
    assert_eq!(out, "src/ (1 entry)\nlib.rs  (2 bytes)");
}

#[tokio::test]
async fn an_empty_directory_says_so() {
    let fx = Fixture::new();
    fs::create_dir(fx.at("empty")).unwrap();
    let out = call(&fx.list, json!({"path": "empty"})).await.unwrap();
    assert_eq!(out, "empty/ is empty");
}

#[tokio::test]
async fn missing_directories_and_files_fail_clearly() {
    let fx = Fixture::new();
    let err = call(&fx.list, json!({"path": "nope"})).await.unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    assert_eq!(err.message, "no such directory: nope");

    fs::write(fx.at("a.txt"), "x").unwrap();
    let err = call(&fx.list, json!({"path": "a.txt"})).await.unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    assert!(err.message.contains("use read_file"), "{}", err.message);
}

#[tokio::test]
async fn large_listings_are_capped_with_a_count() {
    let fx = Fixture::new();
    fs::create_dir(fx.at("many")).unwrap();
    let extra = 7;
    for n in 0..MAX_LIST_ENTRIES + extra {
        fs::write(fx.at(&format!("many/f{n:05}.txt")), "").unwrap();
    }
    let out = call(&fx.list, json!({"path": "many"})).await.unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        format!("many/ ({} entries)", MAX_LIST_ENTRIES + extra)
    );
    assert_eq!(lines.len(), 1 + MAX_LIST_ENTRIES + 1);
    assert_eq!(lines[1], "f00000.txt  (0 bytes)");
    assert_eq!(lines[MAX_LIST_ENTRIES], "f00999.txt  (0 bytes)");
    assert_eq!(
        lines[MAX_LIST_ENTRIES + 1],
        format!("[{extra} more entries not shown: listings stop at {MAX_LIST_ENTRIES}]")
    );
}

#[tokio::test]
async fn paths_outside_the_root_are_denied() {
    let fx = Fixture::new();
    for path in ["..", "sub/../..", text(&fx.outside)] {
        let err = call(&fx.list, json!({"path": path})).await.unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::Denied, "{path}: {}", err.message);
    }
    let out = call(&fx.list, json!({"path": text(&fx.root)}))
        .await
        .unwrap();
    assert_eq!(out, "./ is empty");
}

#[cfg(unix)]
#[tokio::test]
async fn symlinks_are_marked_and_confined() {
    use std::os::unix::fs::symlink;

    let fx = Fixture::new();
    fs::create_dir(fx.at("real")).unwrap();
    fs::write(fx.at("real/x.txt"), "abc").unwrap();
    symlink("real", fx.at("alias")).unwrap();
    symlink("real/x.txt", fx.at("file-link")).unwrap();
    symlink("gone", fx.at("broken")).unwrap();
    symlink(&fx.outside, fx.at("escape")).unwrap();

    let out = call(&fx.list, json!({})).await.unwrap();
    let expected = format!(
        "./ (5 entries)\n\
         alias -> real  (symlink to a directory)\n\
         broken -> gone  (broken symlink)\n\
         escape -> {}  (symlink leading outside the workspace; not accessible)\n\
         file-link -> real/x.txt  (symlink to a file, 3 bytes)\n\
         real/",
        fx.outside.display()
    );
    assert_eq!(out, expected);

    let out = call(&fx.list, json!({"path": "alias"})).await.unwrap();
    assert_eq!(out, "alias/ (1 entry)\nx.txt  (3 bytes)");

    let err = call(&fx.list, json!({"path": "escape"})).await.unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Denied);
    assert!(err.message.contains("`escape`"), "{}", err.message);
}
