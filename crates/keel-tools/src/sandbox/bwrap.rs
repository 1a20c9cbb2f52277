//! bubblewrap's arguments for a [`Sandbox`]: the namespaces, then the mounts, parents before
//! what lies inside them (bubblewrap mounts in the order it is told, a later mount over an
//! earlier one), then `--`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::Sandbox;

/// One mount of the sandbox's filesystem, besides the read-only root.
#[derive(Debug)]
enum Mount {
    /// The private `/tmp`.
    PrivateTmp,
    /// What the host has in `/tmp`, seen read-only in the private one (a hook's script, a
    /// checkout that lives there): writes go to the private `/tmp`, never to the host's.
    HostTmpEntry(PathBuf),
    /// A writable directory.
    Writable(PathBuf),
    /// A read-only path that exists.
    ReadOnly(PathBuf),
    /// A read-only path that does not exist: an empty read-only directory.
    Placeholder(PathBuf),
    /// A hidden directory: an empty read-only one in its place.
    HiddenDir(PathBuf),
    /// A hidden file: an empty read-only one in its place.
    HiddenFile(PathBuf),
}

impl Mount {
    fn path(&self) -> &Path {
        match self {
            Mount::PrivateTmp => Path::new("/tmp"),
            Mount::HostTmpEntry(path)
            | Mount::Writable(path)
            | Mount::ReadOnly(path)
            | Mount::Placeholder(path)
            | Mount::HiddenDir(path)
            | Mount::HiddenFile(path) => path,
        }
    }

    /// Which of two mounts of one path comes last, and so wins: hiding wins over everything.
    fn rank(&self) -> u8 {
        match self {
            Mount::PrivateTmp => 0,
            Mount::HostTmpEntry(_) => 1,
            Mount::Writable(_) => 2,
            Mount::ReadOnly(_) | Mount::Placeholder(_) => 3,
            Mount::HiddenDir(_) | Mount::HiddenFile(_) => 4,
        }
    }
}

/// bubblewrap's arguments up to and including `--`, the command's working directory being
/// `chdir` (or keel's own, when `None`).
pub(super) fn arguments(sandbox: &Sandbox, chdir: Option<&Path>) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        // The first process of the sandbox dies with keel (or with the thread that started
        // it), and every other process of its PID namespace with it.
        "--die-with-parent",
        "--unshare-pid",
        // A session of its own: no controlling terminal to push keystrokes into.
        "--new-session",
        // No capabilities, also when keel runs as root (which could unmount what hides keel's
        // files, or remount the root writable).
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        // The PID namespace's own `/proc`: keel's process is not in it.
        "--proc",
        "/proc",
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    if !sandbox.network {
        args.push("--unshare-net".into());
    }
    let mut remount = Vec::new();
    for mount in mounts(sandbox) {
        match mount {
            Mount::PrivateTmp => push(&mut args, "--tmpfs", None, Path::new("/tmp")),
            Mount::Writable(path) => push(&mut args, "--bind", Some(&path), &path),
            Mount::ReadOnly(path) => push(&mut args, "--ro-bind", Some(&path), &path),
            // `-try`: an entry removed since /tmp was read is no reason to fail the command.
            Mount::HostTmpEntry(path) => push(&mut args, "--ro-bind-try", Some(&path), &path),
            Mount::Placeholder(path) | Mount::HiddenDir(path) => {
                push(&mut args, "--tmpfs", None, &path);
                // Read-only only once whatever lies inside is mounted.
                remount.push(path);
            }
            Mount::HiddenFile(path) => {
                push(&mut args, "--ro-bind", Some(Path::new("/dev/null")), &path);
            }
        }
    }
    for path in remount {
        push(&mut args, "--remount-ro", None, &path);
    }
    if let Some(dir) = chdir {
        push(&mut args, "--chdir", None, &canonical(dir));
    }
    args.push("--".into());
    args
}

/// `OPTION [SOURCE] DEST`.
fn push(args: &mut Vec<OsString>, option: &str, source: Option<&Path>, dest: &Path) {
    args.push(option.into());
    if let Some(source) = source {
        args.push(source.into());
    }
    args.push(dest.into());
}

/// The sandbox's mounts, as the filesystem is now (a path to hide that does not exist is left
/// alone; one that is created later is hidden from the commands started after), in the order
/// they are made: a path's parents before it.
fn mounts(sandbox: &Sandbox) -> Vec<Mount> {
    let mut mounts = vec![Mount::PrivateTmp];
    mounts.extend(host_tmp_entries().into_iter().map(Mount::HostTmpEntry));
    mounts.extend(
        sandbox
            .writable
            .iter()
            .map(|p| Mount::Writable(canonical(p))),
    );
    for path in &sandbox.read_only {
        let path = canonical(path);
        // Only inside a writable directory can a missing path be created.
        let inside_writable = mounts.iter().any(|m| match m {
            Mount::Writable(dir) => path.starts_with(dir),
            _ => false,
        });
        mounts.push(if path.exists() {
            Mount::ReadOnly(path)
        } else if inside_writable {
            Mount::Placeholder(path)
        } else {
            continue;
        });
    }
    for path in &sandbox.hidden {
        let path = canonical(path);
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => mounts.push(Mount::HiddenDir(path)),
            Ok(_) => mounts.push(Mount::HiddenFile(path)),
            Err(_) => {}
        }
    }
    mounts.sort_by_key(|mount| (mount.path().components().count(), mount.rank()));
    mounts
}

/// The most entries of the host's `/tmp` shown in the private one.
const MAX_HOST_TMP_ENTRIES: usize = 4096;

/// The directories and regular files the host has in `/tmp` (not its links, sockets or
/// pipes), at most [`MAX_HOST_TMP_ENTRIES`] of them.
fn host_tmp_entries() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_type()
                .is_ok_and(|kind| kind.is_dir() || kind.is_file())
        })
        .map(|entry| entry.path())
        .take(MAX_HOST_TMP_ENTRIES)
        .collect()
}

/// `path` with its symbolic links resolved, when it exists (bubblewrap mounts on the path it
/// is given, and a link on the way would lead elsewhere); else made absolute as it is.
fn canonical(path: &Path) -> PathBuf {
    if let Ok(real) = path.canonicalize() {
        return real;
    }
    // A path that does not exist yet: its parent's real path, and its name.
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => {
            canonical(parent).join(name)
        }
        _ => std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn parents_are_mounted_before_what_lies_inside_and_hiding_wins() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let workspace = root.join("ws");
        let home = workspace.join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(root.join("keel.toml"), "").unwrap();
        let sandbox = Sandbox::bwrap("bwrap")
            .writable(&workspace)
            .read_only(workspace.join(".keel"))
            .hide(&home)
            .hide(root.join("keel.toml"))
            .hide(root.join("missing"))
            .network(false);
        let args = strings(&arguments(&sandbox, Some(&workspace)));
        let text = args.join(" ");
        let ws = workspace.display().to_string();
        let home = home.display().to_string();
        let keel = format!("{ws}/.keel");
        let tmp = text.find("--tmpfs /tmp ").unwrap();
        let bind = text.find(&format!("--bind {ws} {ws}")).unwrap();
        let hidden = text.find(&format!("--tmpfs {home}")).unwrap();
        let placeholder = text.find(&format!("--tmpfs {keel}")).unwrap();
        assert!(tmp < bind && bind < hidden && bind < placeholder, "{text}");
        assert!(text.contains(&format!("--remount-ro {home}")), "{text}");
        assert!(text.contains(&format!("--remount-ro {keel}")), "{text}");
        assert!(
            text.contains(&format!(
                "--ro-bind /dev/null {}",
                root.join("keel.toml").display()
            )),
            "{text}"
        );
        assert!(!text.contains("missing"), "{text}");
        assert!(text.contains("--unshare-net"), "{text}");
        assert!(text.ends_with(&format!("--chdir {ws} --")), "{text}");
    }

    #[test]
    fn the_network_is_on_unless_turned_off() {
        let args = strings(&arguments(&Sandbox::bwrap("bwrap"), None));
        assert!(!args.contains(&"--unshare-net".to_string()), "{args:?}");
        assert!(!args.contains(&"--chdir".to_string()), "{args:?}");
        for flag in [
            "--die-with-parent",
            "--unshare-pid",
            "--new-session",
            "--proc",
        ] {
            assert!(args.contains(&flag.to_string()), "{args:?}");
        }
    }
}
