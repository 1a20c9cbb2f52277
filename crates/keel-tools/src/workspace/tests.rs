use std::os::unix::fs::symlink;

use keel_core::ToolErrorKind;

use super::*;

fn setup() -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("root")).unwrap();
    let workspace = Workspace::new(dir.path().join("root")).unwrap();
    (dir, workspace)
}

fn denied(result: Result<Target, ToolError>) -> String {
    let err = result.unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Denied, "{}", err.message);
    err.message
}

/// The inode a target names, to compare with a path's.
fn same_file(target: &Target, path: &Path) -> bool {
    let found = rustix::fs::statat(target.dir(), target.name(), AtFlags::empty()).unwrap();
    let expected = rustix::fs::stat(path).unwrap();
    NodeId::of(&found) == NodeId::of(&expected)
}

#[test]
fn root_must_be_an_existing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = Workspace::new(dir.path().join("nope")).unwrap_err();
    assert!(
        missing.to_string().contains("cannot be opened"),
        "{missing}"
    );
    fs::write(dir.path().join("file"), "x").unwrap();
    let file = Workspace::new(dir.path().join("file")).unwrap_err();
    assert!(file.to_string().contains("not a directory"), "{file}");
}

#[test]
fn relative_paths_are_taken_from_the_root() {
    let (_dir, ws) = setup();
    fs::write(ws.root().join("c.txt"), "c").unwrap();
    let new = ws.locate("a/b.txt", Access::Write).unwrap();
    assert!(matches!(new.found(), Found::Missing));
    assert!(new.parents_missing());
    assert_eq!(new.shown(), "a/b.txt");
    let existing = ws.locate(".//./c.txt", Access::Read).unwrap();
    assert!(same_file(&existing, &ws.root().join("c.txt")));
    assert_eq!(existing.shown(), "c.txt");
    let root = ws.locate(".", Access::Read).unwrap();
    assert!(root.is_root() && matches!(root.found(), Found::Directory(_)));
    assert_eq!(root.shown(), ".");
}

#[test]
fn parent_components_are_refused_anywhere() {
    let (_dir, ws) = setup();
    for path in ["..", "../x", "a/../../x", "a/..", "/tmp/../etc"] {
        let message = denied(ws.locate(path, Access::Read));
        assert!(message.contains("`..` is not allowed"), "{message}");
        assert!(
            message.contains(&ws.root().display().to_string()),
            "{message}"
        );
    }
}

#[test]
fn absolute_paths_must_be_inside_the_root() {
    let (dir, ws) = setup();
    let inside = ws.root().join("notes.txt");
    let target = ws.locate(inside.to_str().unwrap(), Access::Write).unwrap();
    assert_eq!(target.shown(), "notes.txt");

    let outside = dir.path().join("secret.txt");
    let message = denied(ws.locate(outside.to_str().unwrap(), Access::Read));
    assert!(message.contains("outside the workspace"), "{message}");
    assert!(
        message.contains("relative to the workspace root"),
        "{message}"
    );
}

#[test]
fn a_sibling_whose_name_starts_with_the_roots_is_outside() {
    let (_dir, ws) = setup();
    let evil = PathBuf::from(format!("{}-evil", ws.root().display()));
    fs::create_dir(&evil).unwrap();
    fs::write(evil.join("secret.txt"), "s").unwrap();
    symlink(&evil, ws.root().join("evil")).unwrap();
    symlink("../root-evil/secret.txt", ws.root().join("relative")).unwrap();
    let absolute = evil.join("secret.txt");
    for path in [absolute.to_str().unwrap(), "evil/secret.txt", "relative"] {
        for access in [Access::Read, Access::Write] {
            denied(ws.locate(path, access));
        }
    }
}

#[test]
fn empty_paths_trailing_slashes_and_writing_the_root_are_refused() {
    let (_dir, ws) = setup();
    let err = ws.locate("  ", Access::Read).unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::InvalidArguments);
    let message = denied(ws.locate(".", Access::Write));
    assert!(message.contains("workspace root"), "{message}");
    let err = ws.locate("dir/", Access::Write).unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::InvalidArguments);
    assert!(err.message.contains("names a directory"), "{}", err.message);
}

#[test]
fn a_file_on_the_way_is_not_a_directory() {
    let (_dir, ws) = setup();
    fs::write(ws.root().join("f"), "x").unwrap();
    let err = ws.locate("f/g", Access::Read).unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    assert!(
        err.message.contains("`f` is a regular file"),
        "{}",
        err.message
    );
}

#[test]
fn protected_paths_are_refused_by_every_name() {
    let (dir, ws) = setup();
    let home = ws.root().join(".local/share/keel");
    fs::create_dir_all(&home).unwrap();
    fs::write(home.join("keel.db"), "db").unwrap();
    let config = ws.root().join("etc/keel.toml");
    fs::create_dir_all(config.parent().unwrap()).unwrap();
    fs::write(&config, "model = 'x'").unwrap();
    symlink(".local/share", ws.root().join("share")).unwrap();
    symlink(&home, ws.root().join("abs")).unwrap();
    let ws = ws
        .protect(&home)
        .protect(&config)
        .protect(dir.path().join("root/etc/keel.toml.lastgood"));
    let absolute = home.join("keel.db");
    for path in [
        ".local/share/keel",
        ".local/share/keel/keel.db",
        ".local/share/keel/keel.db-wal",
        "./.local//share/keel/keel.db-shm",
        absolute.to_str().unwrap(),
        "share/keel/keel.toml",
        "abs/keel.db",
        "etc/keel.toml",
        "etc/keel.toml.lastgood",
    ] {
        for access in [Access::Read, Access::Write] {
            let message = denied(ws.locate(path, access));
            assert!(message.contains("keel's own files"), "{message}");
        }
    }
    ws.locate(".local/share/other", Access::Write).unwrap();
    ws.locate("etc/other.toml", Access::Write).unwrap();
}

#[test]
fn a_protected_file_is_known_by_what_it_is_now() {
    // keel replaces its last good copy by renaming a new file over it; the old file's inode
    // number may then be reused by any new file. Moving the protected file away shows the
    // same: the file that took its place is protected, the old one no longer is.
    let (_dir, ws) = setup();
    fs::create_dir(ws.root().join("etc")).unwrap();
    symlink("etc/keel.toml", ws.root().join("keel.toml")).unwrap();
    fs::write(ws.root().join("etc/keel.toml"), "old").unwrap();
    let config = ws.root().join("keel.toml");
    let ws = ws.protect(config);
    denied(ws.locate("etc/keel.toml", Access::Write));
    fs::rename(ws.root().join("etc/keel.toml"), ws.root().join("moved.txt")).unwrap();
    fs::write(ws.root().join("etc/keel.toml"), "new").unwrap();
    ws.locate("moved.txt", Access::Write).unwrap();
    denied(ws.locate("etc/keel.toml", Access::Write));
}

#[test]
fn a_symlink_out_of_the_root_is_refused_with_its_name() {
    let (dir, ws) = setup();
    fs::write(dir.path().join("secret.txt"), "s").unwrap();
    symlink(dir.path().join("secret.txt"), ws.root().join("leak")).unwrap();
    symlink(dir.path(), ws.root().join("up")).unwrap();
    for (path, access) in [
        ("leak", Access::Read),
        ("leak", Access::Write),
        ("up", Access::Read),
        ("up/secret.txt", Access::Read),
        ("up/new/file.txt", Access::Write),
    ] {
        let message = denied(ws.locate(path, access));
        assert!(message.contains(&format!("`{path}`")), "{message}");
        assert!(message.contains("symlink"), "{message}");
    }
}

#[test]
fn a_symlink_inside_the_root_leads_to_its_target() {
    let (_dir, ws) = setup();
    fs::create_dir(ws.root().join("real")).unwrap();
    fs::write(ws.root().join("real/x.txt"), "x").unwrap();
    symlink("real", ws.root().join("alias")).unwrap();
    symlink(ws.root().join("real/x.txt"), ws.root().join("absolute")).unwrap();
    fs::create_dir(ws.root().join("sub")).unwrap();
    symlink("../real/./x.txt", ws.root().join("sub/up")).unwrap();
    for path in ["alias/x.txt", "absolute", "sub/up"] {
        let target = ws.locate(path, Access::Write).unwrap();
        assert!(same_file(&target, &ws.root().join("real/x.txt")), "{path}");
        assert_eq!(target.shown(), path);
    }
}

#[test]
fn dangling_symlinks_are_followed_by_hand() {
    let (dir, ws) = setup();
    symlink(dir.path().join("gone/file"), ws.root().join("out")).unwrap();
    let message = denied(ws.locate("out", Access::Write));
    assert!(message.contains("`out`"), "{message}");

    symlink("later/x.txt", ws.root().join("soon")).unwrap();
    let mut target = ws.locate("soon", Access::Write).unwrap();
    assert!(matches!(target.found(), Found::Missing));
    target.create_parents().unwrap();
    assert_eq!(target.name(), Path::new("x.txt"));
    assert!(ws.root().join("later").is_dir());

    symlink("loop", ws.root().join("loop")).unwrap();
    let err = ws.locate("loop", Access::Write).unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
}

#[test]
fn a_root_reached_through_a_symlink_is_canonical() {
    let (dir, ws) = setup();
    symlink(ws.root(), dir.path().join("alias")).unwrap();
    let via_alias = Workspace::new(dir.path().join("alias")).unwrap();
    assert_eq!(via_alias.root(), ws.root());
    let requested = dir.path().join("alias/a.txt");
    let target = via_alias
        .locate(requested.to_str().unwrap(), Access::Write)
        .unwrap();
    assert_eq!(target.shown(), "a.txt");
}
