//! What the file tools can never reach: a sibling of the root whose name merely starts like the
//! root's, keel's own files, and a file named like a directory.

mod common;

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use common::{Fixture, call, text};
use keel_core::ToolErrorKind;
use keel_tools::{AppendFile, ListDir, ReadFile, Workspace, WriteFile};
use serde_json::json;

#[cfg(unix)]
#[tokio::test]
async fn a_sibling_named_like_the_root_is_outside() {
    // Containment by string prefix would let `<root>-evil` pass for `<root>`.
    let fx = Fixture::new();
    let evil = PathBuf::from(format!("{}-evil", fx.root.display()));
    fs::create_dir(&evil).unwrap();
    fs::write(evil.join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(&evil, fx.at("evil")).unwrap();
    let absolute = evil.join("secret.txt");
    for path in [text(&absolute), "evil/secret.txt"] {
        let read = call(&fx.read, json!({"path": path})).await.unwrap_err();
        let write = call(&fx.write, json!({"path": path, "content": "pwned"}))
            .await
            .unwrap_err();
        let append = call(&fx.append, json!({"path": path, "content": "pwned"}))
            .await
            .unwrap_err();
        for err in [read, write, append] {
            assert_eq!(err.kind, ToolErrorKind::Denied, "{path}: {}", err.message);
        }
    }
    for path in [text(&evil), "evil"] {
        let err = call(&fx.list, json!({"path": path})).await.unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::Denied, "{path}: {}", err.message);
    }
    assert_eq!(fs::read_to_string(&absolute).unwrap(), "secret");
}

#[tokio::test]
async fn a_trailing_slash_never_creates_a_file() {
    let fx = Fixture::new();
    for tool in [&fx.write as &dyn keel_core::Tool, &fx.append] {
        let err = call(tool, json!({"path": "dir/", "content": "x"}))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::InvalidArguments);
        assert_eq!(
            err.message,
            "cannot write `dir/`: a path ending in `/` names a directory; give the path of a \
             file, without the trailing `/`"
        );
    }
    assert!(!fx.at("dir").exists());
}

/// keel's home and configuration inside the workspace, as when keel runs from `$HOME`.
struct KeelInside {
    fx: Fixture,
    read: ReadFile,
    write: WriteFile,
    append: AppendFile,
    list: ListDir,
}

impl KeelInside {
    fn new() -> Self {
        let fx = Fixture::new();
        let home = fx.at(".local/share/keel");
        fs::create_dir_all(&home).unwrap();
        fs::write(home.join("keel.toml"), "model = \"m\"\n").unwrap();
        fs::write(home.join("keel.db"), "database").unwrap();
        fs::write(fx.at("custom.toml"), "model = \"c\"\n").unwrap();
        let workspace = Arc::new(
            Workspace::new(&fx.root)
                .unwrap()
                .protect(&home)
                .protect(fx.at("custom.toml"))
                .protect(fx.at("custom.toml.lastgood")),
        );
        KeelInside {
            read: ReadFile::new(workspace.clone()),
            write: WriteFile::new(workspace.clone()),
            append: AppendFile::new(workspace.clone()),
            list: ListDir::new(workspace),
            fx,
        }
    }
}

#[cfg(unix)]
#[tokio::test]
async fn keels_own_files_are_out_of_reach_by_every_path() {
    let k = KeelInside::new();
    std::os::unix::fs::symlink(".local/share", k.fx.at("data")).unwrap();
    let absolute = k.fx.at(".local/share/keel/keel.db");
    let paths = [
        ".local/share/keel/keel.toml",
        ".local/share/keel/keel.db",
        ".local/share/keel/keel.db-wal",
        ".local/share/keel/keel.db-shm",
        "./.local//share/keel/keel.toml",
        text(&absolute),
        "data/keel/keel.db",
        "custom.toml",
        "custom.toml.lastgood",
    ];
    for path in paths {
        let errors = [
            call(&k.read, json!({"path": path})).await.unwrap_err(),
            call(&k.write, json!({"path": path, "content": "oops"}))
                .await
                .unwrap_err(),
            call(&k.append, json!({"path": path, "content": "oops"}))
                .await
                .unwrap_err(),
        ];
        for err in errors {
            assert_eq!(err.kind, ToolErrorKind::Denied, "{path}: {}", err.message);
            assert!(
                err.message.contains("one of keel's own files"),
                "{}",
                err.message
            );
        }
    }
    let listing = call(&k.list, json!({"path": ".local/share"}))
        .await
        .unwrap();
    assert_eq!(
        listing,
        ".local/share/ (1 entry)\nkeel  (keel's own files; not accessible)"
    );
    let err = call(&k.list, json!({"path": ".local/share/keel"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Denied);
    let home = k.fx.at(".local/share/keel");
    assert_eq!(
        fs::read_to_string(home.join("keel.db")).unwrap(),
        "database"
    );
    assert_eq!(
        fs::read_to_string(home.join("keel.toml")).unwrap(),
        "model = \"m\"\n"
    );
    assert!(!home.join("keel.db-wal").exists());
    assert!(!k.fx.at("custom.toml.lastgood").exists());
    // The rest of the workspace is as usable as ever.
    call(
        &k.write,
        json!({"path": ".local/share/notes.txt", "content": "ok"}),
    )
    .await
    .unwrap();
}
