//! `read_file` as the model sees it.

mod common;

use std::fs;

use common::{Fixture, call, text};
use keel_core::ToolErrorKind;
use keel_tools::files::MAX_READ_BYTES;
use serde_json::json;

fn ten_lines(fx: &Fixture) {
    let body: String = (1..=10).map(|n| format!("line {n}\n")).collect();
    fs::write(fx.at("notes.txt"), body).unwrap();
}

#[tokio::test]
async fn reads_a_whole_file() {
    let fx = Fixture::new();
    fs::create_dir(fx.at("src")).unwrap();
    fs::write(fx.at("src/main.rs"), "fn main() {}\n").unwrap();
    let out = call(&fx.read, json!({"path": "src/main.rs"}))
        .await
        .unwrap();
    assert_eq!(out, "fn main() {}\n");
}

#[tokio::test]
async fn an_empty_file_says_so() {
    let fx = Fixture::new();
    fs::write(fx.at("empty.txt"), "").unwrap();
    let out = call(&fx.read, json!({"path": "empty.txt"})).await.unwrap();
    assert_eq!(out, "empty.txt is empty (0 bytes)");
}

#[tokio::test]
async fn offset_and_limit_show_a_labelled_range() {
    let fx = Fixture::new();
    ten_lines(&fx);
    let out = call(
        &fx.read,
        json!({"path": "notes.txt", "offset": 3, "limit": 2}),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        "[notes.txt: lines 3-4 of 10]\nline 3\nline 4\n[6 more lines; continue with offset=5]"
    );

    let out = call(&fx.read, json!({"path": "notes.txt", "offset": 9}))
        .await
        .unwrap();
    assert_eq!(out, "[notes.txt: lines 9-10 of 10]\nline 9\nline 10\n");

    let out = call(&fx.read, json!({"path": "notes.txt", "limit": 1}))
        .await
        .unwrap();
    assert!(
        out.starts_with("[notes.txt: lines 1-1 of 10]\nline 1\n"),
        "{out}"
    );

    let out = call(
        &fx.read,
        json!({"path": "notes.txt", "offset": 8, "limit": 50}),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        "[notes.txt: lines 8-10 of 10]\nline 8\nline 9\nline 10\n"
    );
}

#[tokio::test]
async fn a_range_of_a_file_without_final_newline_still_ends_cleanly() {
    let fx = Fixture::new();
    fs::write(fx.at("a.txt"), "one\ntwo").unwrap();
    let out = call(&fx.read, json!({"path": "a.txt", "offset": 2}))
        .await
        .unwrap();
    assert_eq!(out, "[a.txt: lines 2-2 of 2]\ntwo");
}

#[tokio::test]
async fn an_offset_past_the_end_is_an_argument_error() {
    let fx = Fixture::new();
    ten_lines(&fx);
    let err = call(&fx.read, json!({"path": "notes.txt", "offset": 11}))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::InvalidArguments);
    assert!(err.message.contains("has 10 lines"), "{}", err.message);
}

#[tokio::test]
async fn a_missing_file_fails_with_its_name() {
    let fx = Fixture::new();
    let err = call(&fx.read, json!({"path": "docs/nope.md"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    assert_eq!(err.message, "no such file: docs/nope.md");
}

#[tokio::test]
async fn a_directory_points_to_list_dir() {
    let fx = Fixture::new();
    fs::create_dir(fx.at("src")).unwrap();
    let err = call(&fx.read, json!({"path": "src"})).await.unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    assert!(err.message.contains("use list_dir"), "{}", err.message);
}

#[tokio::test]
async fn binary_content_is_refused() {
    let fx = Fixture::new();
    fs::write(fx.at("image.png"), [0x89, b'P', b'N', b'G', 0xff, 0xfe]).unwrap();
    fs::write(fx.at("nul.bin"), b"abc\0def").unwrap();
    for path in ["image.png", "nul.bin"] {
        let err = call(&fx.read, json!({"path": path})).await.unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::Failed);
        assert!(err.message.contains("binary"), "{}", err.message);
    }
}

#[tokio::test]
async fn files_over_the_limit_are_refused_with_their_size() {
    let fx = Fixture::new();
    let file = fs::File::create(fx.at("huge.log")).unwrap();
    file.set_len(MAX_READ_BYTES + 1).unwrap();
    let err = call(&fx.read, json!({"path": "huge.log"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    assert!(err.message.contains("10485761 bytes"), "{}", err.message);
    assert!(err.message.contains("10 MiB"), "{}", err.message);
}

#[tokio::test]
async fn parent_components_are_denied() {
    let fx = Fixture::new();
    fs::write(fx.outside.join("secret.txt"), "s").unwrap();
    for path in ["../outside/secret.txt", "a/../../outside/secret.txt"] {
        let err = call(&fx.read, json!({"path": path})).await.unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::Denied);
        assert!(
            err.message
                .contains("`..` is not allowed: paths must stay inside the workspace"),
            "{}",
            err.message
        );
    }
}

#[tokio::test]
async fn absolute_paths_work_only_inside_the_root() {
    let fx = Fixture::new();
    fs::write(fx.at("in.txt"), "inside").unwrap();
    fs::write(fx.outside.join("secret.txt"), "s").unwrap();
    let out = call(&fx.read, json!({"path": text(&fx.at("in.txt"))}))
        .await
        .unwrap();
    assert_eq!(out, "inside");

    let err = call(
        &fx.read,
        json!({"path": text(&fx.outside.join("secret.txt"))}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Denied);
    assert!(
        err.message.contains("outside the workspace"),
        "{}",
        err.message
    );

    let err = call(&fx.read, json!({"path": "/etc/passwd"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Denied);
}

#[cfg(unix)]
#[tokio::test]
async fn symlinks_are_followed_only_inside_the_root() {
    use std::os::unix::fs::symlink;

    let fx = Fixture::new();
    fs::write(fx.outside.join("secret.txt"), "s").unwrap();
    symlink(fx.outside.join("secret.txt"), fx.at("leak.txt")).unwrap();
    symlink(&fx.outside, fx.at("escape")).unwrap();
    for path in ["leak.txt", "escape/secret.txt"] {
        let err = call(&fx.read, json!({"path": path})).await.unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::Denied);
        assert!(
            err.message.contains(&format!("`{path}`")),
            "{}",
            err.message
        );
        assert!(err.message.contains("symlink"), "{}", err.message);
    }

    fs::create_dir(fx.at("real")).unwrap();
    fs::write(fx.at("real/doc.md"), "# doc").unwrap();
    symlink(fx.at("real"), fx.at("alias")).unwrap();
    let out = call(&fx.read, json!({"path": "alias/doc.md"}))
        .await
        .unwrap();
    assert_eq!(out, "# doc");
}
