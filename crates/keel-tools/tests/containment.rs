//! What the file tools can never reach: a sibling of the root whose name merely starts like the
//! root's, keel's own files (also the workspace's `.keel`, and by another name: a hard link),
//! and a file named like a directory.

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

#[tokio::test]
async fn a_trailing_dot_never_creates_a_file() {
    let fx = Fixture::new();
    for tool in [&fx.write as &dyn keel_core::Tool, &fx.append] {
        for path in ["new/.", "a/b/.", "./new/."] {
            let err = call(tool, json!({"path": path, "content": "x"}))
                .await
                .unwrap_err();
            assert_eq!(err.kind, ToolErrorKind::InvalidArguments, "{path}");
            assert_eq!(
                err.message,
                format!(
                    "cannot write `{path}`: a path ending in `/.` names a directory; give the \
                     path of a file, without the trailing `/.`"
                )
            );
        }
        let err = call(tool, json!({"path": "new/..", "content": "x"}))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::Denied);
    }
    assert!(!fx.at("new").exists());
    assert!(!fx.at("a").exists());
    // A file name that merely ends in a dot is a file.
    call(&fx.write, json!({"path": "notes.", "content": "x"}))
        .await
        .unwrap();
    assert_eq!(fs::read_to_string(fx.at("notes.")).unwrap(), "x");
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

/// A workspace whose `.keel` is protected, as keel's assembly does, with keel's home (holding
/// a memory note) outside it.
struct KeelBeside {
    fx: Fixture,
    home: PathBuf,
    read: ReadFile,
    write: WriteFile,
    append: AppendFile,
}

impl KeelBeside {
    fn new() -> Self {
        let fx = Fixture::new();
        let home = fx.outside.join("keel-home");
        fs::create_dir_all(home.join("memory/me")).unwrap();
        fs::write(home.join("memory/me/notes.md"), "private\n").unwrap();
        fs::write(home.join("keel.db"), "database").unwrap();
        fs::create_dir_all(fx.at(".keel/skills/deploy")).unwrap();
        fs::write(fx.at(".keel/skills/deploy/SKILL.md"), "skill\n").unwrap();
        let workspace = Arc::new(
            Workspace::new(&fx.root)
                .unwrap()
                .protect(&home)
                .protect(fx.at(".keel")),
        );
        KeelBeside {
            read: ReadFile::new(workspace.clone()),
            write: WriteFile::new(workspace.clone()),
            append: AppendFile::new(workspace),
            home,
            fx,
        }
    }
}

#[cfg(unix)]
#[tokio::test]
async fn the_workspaces_keel_is_never_written_by_any_path() {
    let k = KeelBeside::new();
    std::os::unix::fs::symlink(".keel", k.fx.at("s")).unwrap();
    std::os::unix::fs::symlink(k.fx.at(".keel/skills"), k.fx.at("abs")).unwrap();
    let absolute = k.fx.at(".keel/skills/evil/SKILL.md");
    let paths = [
        ".keel/skills/evil/SKILL.md",
        "./.keel/skills/evil/SKILL.md",
        ".//.keel/x",
        "new/../.keel/x",
        "src/../.keel/skills/evil/SKILL.md",
        ".keel/skills/deploy/SKILL.md",
        text(&absolute),
        "s/skills/evil/SKILL.md",
        "abs/evil/SKILL.md",
        ".keel",
    ];
    for path in paths {
        for tool in [&k.write as &dyn keel_core::Tool, &k.append] {
            let err = call(
                tool,
                json!({"path": path, "content": "---\nname: evil\n---\n"}),
            )
            .await
            .unwrap_err();
            assert_eq!(err.kind, ToolErrorKind::Denied, "{path}: {}", err.message);
        }
    }
    assert!(!k.fx.at(".keel/skills/evil").exists());
    assert!(!k.fx.at(".keel/x").exists());
    assert!(!k.fx.at("new").exists());
    assert_eq!(
        fs::read_to_string(k.fx.at(".keel/skills/deploy/SKILL.md")).unwrap(),
        "skill\n"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_hard_link_to_keels_own_files_is_neither_read_nor_appended_to() {
    let k = KeelBeside::new();
    // What `ln ~/.local/share/keel/memory/me/notes.md notes.md` in the shell would leave.
    fs::hard_link(k.home.join("memory/me/notes.md"), k.fx.at("notes.md")).unwrap();
    fs::hard_link(k.home.join("keel.db"), k.fx.at("sub.db")).unwrap();
    fs::hard_link(k.fx.at(".keel/skills/deploy/SKILL.md"), k.fx.at("skill.md")).unwrap();
    for path in ["notes.md", "sub.db", "skill.md"] {
        let err = call(&k.read, json!({"path": path})).await.unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::Denied, "{path}: {}", err.message);
        assert!(
            err.message.contains("hard link") && err.message.contains("one of keel's own files"),
            "{}",
            err.message
        );
        let err = call(&k.append, json!({"path": path, "content": "injected\n"}))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::Denied, "{path}: {}", err.message);
        assert!(err.message.contains("hard links"), "{}", err.message);
    }
    assert_eq!(
        fs::read_to_string(k.home.join("memory/me/notes.md")).unwrap(),
        "private\n"
    );
    assert_eq!(
        fs::read_to_string(k.fx.at(".keel/skills/deploy/SKILL.md")).unwrap(),
        "skill\n"
    );
    // write_file gives the name a new file: keel's stays as it was.
    call(&k.write, json!({"path": "notes.md", "content": "mine\n"}))
        .await
        .unwrap();
    assert_eq!(fs::read_to_string(k.fx.at("notes.md")).unwrap(), "mine\n");
    assert_eq!(
        fs::read_to_string(k.home.join("memory/me/notes.md")).unwrap(),
        "private\n"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn other_hard_links_are_read_but_never_appended_to() {
    let k = KeelBeside::new();
    fs::write(k.fx.outside.join("shared.txt"), "shared\n").unwrap();
    fs::hard_link(k.fx.outside.join("shared.txt"), k.fx.at("shared.txt")).unwrap();
    let text = call(&k.read, json!({"path": "shared.txt"})).await.unwrap();
    assert_eq!(text, "shared\n");
    let err = call(
        &k.append,
        json!({"path": "shared.txt", "content": "more\n"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Denied);
    assert_eq!(
        err.message,
        "cannot append to shared.txt: it has 2 names (hard links), so appending would change it \
         under its other names too, which may lie outside the workspace; write the whole new \
         content with write_file instead (it replaces this name only)"
    );
    assert_eq!(
        fs::read_to_string(k.fx.outside.join("shared.txt")).unwrap(),
        "shared\n"
    );
    // A file with one name is appended to as ever.
    fs::write(k.fx.at("log.txt"), "a\n").unwrap();
    call(&k.append, json!({"path": "log.txt", "content": "b\n"}))
        .await
        .unwrap();
    assert_eq!(fs::read_to_string(k.fx.at("log.txt")).unwrap(), "a\nb\n");
}
