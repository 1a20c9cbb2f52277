//! How far a path argument reaches: the whole machine, a system directory, the home directory,
//! the whole workspace, somewhere else, or something inside the workspace.

use super::command_line::Arg;

/// Where a path argument points, broadest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// `/` (also `/*`, `//`, `/.`).
    Root,
    /// A top-level directory (`/etc`, `/usr`, `/home`), or a glob among them (`/e*`).
    System,
    /// The home directory itself (`~`, `$HOME`, `~user`, `~/*`).
    Home,
    /// The whole working directory (`.`, `*`, `./*`, `.*`).
    Workspace,
    /// The parent directory or above (`..`, `../..`, `../*`).
    Parent,
    /// Any other path outside the workspace: deeper absolute paths, `~/x`, `../x`.
    Outside,
    /// Only known when the command runs (`$DIR`, `$(pwd)`).
    Unknown,
    /// A path inside the workspace.
    Inside,
}

impl Scope {
    /// True for scopes a recursive delete must never touch.
    pub fn is_broad(self) -> bool {
        matches!(
            self,
            Scope::Root | Scope::System | Scope::Home | Scope::Workspace | Scope::Parent
        )
    }

    /// A phrase for reasons.
    pub fn describe(self) -> &'static str {
        match self {
            Scope::Root => "the root directory",
            Scope::System => "a top-level system directory",
            Scope::Home => "the home directory",
            Scope::Workspace => "the whole working directory",
            Scope::Parent => "a parent directory",
            Scope::Outside => "a path outside the workspace",
            Scope::Unknown => "a path only known when it runs",
            Scope::Inside => "a path inside the workspace",
        }
    }
}

/// Where `arg` points.
pub(crate) fn scope(arg: &Arg) -> Scope {
    let text = arg.text.as_str();
    if arg.dynamic && !text.starts_with('~') {
        return Scope::Unknown;
    }
    if let Some(rest) = text.strip_prefix('~') {
        // `~`, `~/`, `~/*`, `~user`: the home itself; deeper: elsewhere.
        let below = components(rest.split_once('/').map_or("", |(_, below)| below));
        if arg.dynamic && !below.is_empty() {
            return Scope::Unknown;
        }
        return match below.as_slice() {
            [] => Scope::Home,
            [only] if is_everything(only) => Scope::Home,
            _ => Scope::Outside,
        };
    }
    if text.starts_with('/') {
        let parts = resolve_absolute(&components(text));
        return match parts.as_slice() {
            [] => Scope::Root,
            [only] if is_everything(only) => Scope::Root,
            [_] => Scope::System,
            [first, ..] if has_glob(first) && arg.glob => Scope::System,
            _ => Scope::Outside,
        };
    }
    let parts = resolve_relative(&components(text));
    let ups = parts.iter().take_while(|p| **p == "..").count();
    let rest = &parts[ups..];
    match (ups, rest) {
        (0, []) => Scope::Workspace,
        (0, [only]) if is_everything(only) => Scope::Workspace,
        (0, _) => Scope::Inside,
        (_, []) => Scope::Parent,
        (_, [only]) if is_everything(only) => Scope::Parent,
        _ => Scope::Outside,
    }
}

/// The components of a path: empty ones and `.` dropped (`a//./b` is `a/b`).
pub(crate) fn components(path: &str) -> Vec<&str> {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect()
}

/// An absolute path's components with `..` taken away lexically (`/x/../etc` is `/etc`).
pub(crate) fn resolve_absolute<'a>(parts: &[&'a str]) -> Vec<&'a str> {
    let mut resolved = Vec::new();
    for part in parts {
        if *part == ".." {
            resolved.pop();
        } else {
            resolved.push(*part);
        }
    }
    resolved
}

/// A relative path's components with `..` taken away lexically where it follows a name
/// (`src/..` is `.`); leading `..` stay.
pub(crate) fn resolve_relative<'a>(parts: &[&'a str]) -> Vec<&'a str> {
    let mut resolved: Vec<&str> = Vec::new();
    for part in parts {
        if *part == ".." && resolved.last().is_some_and(|last| *last != "..") {
            resolved.pop();
        } else {
            resolved.push(*part);
        }
    }
    resolved
}

/// A last component that means "everything here": `*`, `.*`, `.[!.]*`, `?*`…
fn is_everything(component: &str) -> bool {
    component.starts_with('*')
        || component.starts_with(".*")
        || component.starts_with(".[")
        || component.starts_with('?')
        || component.starts_with('[')
}

pub(crate) fn has_glob(text: &str) -> bool {
    text.contains(['*', '?', '[', '{'])
}

/// Where writing to `arg` would land, when that is somewhere dangerous: `Some((refuse,
/// what))`, with `refuse` false for places that need approval only.
pub(crate) fn risky_write(arg: &Arg) -> Option<(bool, &'static str)> {
    if arg.dynamic && !arg.text.starts_with('~') {
        return None;
    }
    let text = arg.text.as_str();
    if let Some(rest) = text.strip_prefix("~/") {
        let parts = components(rest);
        if parts.first().is_some_and(|p| p.starts_with('.')) {
            return Some((
                false,
                "a hidden file in the home directory (shell profiles, keys)",
            ));
        }
        return None;
    }
    if !text.starts_with('/') {
        return None;
    }
    let parts = resolve_absolute(&components(text));
    let path = format!("/{}", parts.join("/"));
    if let Some(device) = path.strip_prefix("/dev/") {
        const HARMLESS: [&str; 9] = [
            "null", "zero", "full", "stdout", "stderr", "stdin", "tty", "random", "urandom",
        ];
        const HARMLESS_DIRS: [&str; 3] = ["fd/", "pts/", "shm/"];
        const DISKS: [&str; 15] = [
            "sd", "hd", "vd", "xvd", "nvme", "mmcblk", "disk", "mapper", "loop", "dm-", "md", "sr",
            "mem", "kmem", "port",
        ];
        if HARMLESS.contains(&device) || HARMLESS_DIRS.iter().any(|d| device.starts_with(d)) {
            return None;
        }
        if DISKS.iter().any(|d| device.starts_with(d)) {
            return Some((true, "a disk or memory device"));
        }
        return Some((false, "a device"));
    }
    const SYSTEM: [&str; 12] = [
        "etc", "boot", "sys", "proc", "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
        "root",
    ];
    match parts.first() {
        Some(top) if SYSTEM.contains(top) => Some((true, "a system file")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> Scope {
        scope(&Arg::literal(text))
    }

    #[test]
    fn scopes() {
        for root in ["/", "//", "/.", "/*", "/x/..", "/../"] {
            assert_eq!(of(root), Scope::Root, "{root}");
        }
        for system in ["/etc", "/etc/", "/usr/", "/home", "/./tmp"] {
            assert_eq!(of(system), Scope::System, "{system}");
        }
        for home in ["~", "~/", "~/*", "~bob", "~/."] {
            assert_eq!(of(home), Scope::Home, "{home}");
        }
        for workspace in [".", "./", "*", "./*", ".*", "", "src/..", "a/b/../../*"] {
            assert_eq!(of(workspace), Scope::Workspace, "{workspace}");
        }
        for parent in ["..", "../", "../..", "../*"] {
            assert_eq!(of(parent), Scope::Parent, "{parent}");
        }
        for outside in ["/etc/nginx", "~/src", "../x", "/tmp/build"] {
            assert_eq!(of(outside), Scope::Outside, "{outside}");
        }
        for inside in ["target", "./build", "a/b/*", "a/../b"] {
            assert_eq!(of(inside), Scope::Inside, "{inside}");
        }
        let dynamic = Arg {
            text: "$DIR/".into(),
            dynamic: true,
            glob: false,
        };
        assert_eq!(scope(&dynamic), Scope::Unknown);
    }

    #[test]
    fn risky_writes() {
        let risk = |t: &str| risky_write(&Arg::literal(t));
        assert_eq!(risk("/dev/null"), None);
        assert_eq!(risk("/dev/fd/3"), None);
        assert_eq!(risk("/dev/sda").map(|r| r.0), Some(true));
        assert_eq!(risk("/dev/nvme0n1p1").map(|r| r.0), Some(true));
        assert_eq!(risk("/dev/watchdog").map(|r| r.0), Some(false));
        assert_eq!(risk("/etc/passwd").map(|r| r.0), Some(true));
        assert_eq!(risk("//etc/../etc/hosts").map(|r| r.0), Some(true));
        assert_eq!(risk("~/.bashrc").map(|r| r.0), Some(false));
        assert_eq!(risk("/tmp/x"), None);
        assert_eq!(risk("out.txt"), None);
    }
}
