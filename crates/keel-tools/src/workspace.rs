//! The workspace: the one directory tree the file tools may touch, and the rules that keep every
//! path inside it.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use keel_core::ToolError;

/// How many dangling symlinks [`Workspace::resolve`] follows by hand before giving up.
const MAX_SYMLINK_HOPS: usize = 40;

/// Why a workspace could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The root does not exist or cannot be read.
    #[error("workspace root {root} cannot be opened: {source}")]
    Unreadable {
        /// The root as given.
        root: PathBuf,
        /// What the operating system said.
        source: io::Error,
    },
    /// The root exists but is not a directory.
    #[error("workspace root {root} is not a directory")]
    NotADirectory {
        /// The root as given.
        root: PathBuf,
    },
}

/// What a tool means to do with a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read a file or list a directory.
    Read,
    /// Create, replace or append to a file.
    Write,
}

impl Access {
    fn verb(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// A root directory that confines the file tools.
///
/// Every path a tool touches goes through [`Workspace::resolve`]: relative paths are taken from
/// the root, `..` is refused, absolute paths must lie inside the root, and symlinks are followed
/// so that their real target must lie inside the root too. The check happens just before the
/// tool acts; a process that swaps a symlink in the root in between is outside this model.
#[derive(Clone, Debug)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Opens the workspace at `root`, which must be an existing directory. The root is
    /// canonicalized, so later checks compare real paths.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, WorkspaceError> {
        let given = root.as_ref();
        let root = fs::canonicalize(given).map_err(|source| WorkspaceError::Unreadable {
            root: given.to_path_buf(),
            source,
        })?;
        if !root.is_dir() {
            return Err(WorkspaceError::NotADirectory {
                root: given.to_path_buf(),
            });
        }
        Ok(Workspace { root })
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The real path `requested` names, if it stays inside the workspace.
    ///
    /// Relative paths are joined to the root; absolute paths must be inside it; `..` is never
    /// allowed. Symlinks are followed (also dangling ones, by hand) and the real target must be
    /// inside the root. A path that does not exist yet is checked through its deepest existing
    /// ancestor. `Write` also refuses the root itself. Blocks on the filesystem: call it from
    /// blocking code.
    pub fn resolve(&self, requested: &str, intent: Access) -> Result<PathBuf, ToolError> {
        let verb = intent.verb();
        if requested.trim().is_empty() {
            return Err(ToolError::invalid_arguments(format!(
                "cannot {verb} an empty path: give a path relative to the workspace root"
            )));
        }
        let path = Path::new(requested);
        if path.components().any(|c| c == Component::ParentDir) {
            return Err(ToolError::denied(format!(
                "cannot {verb} `{requested}`: `..` is not allowed: paths must stay inside the \
                 workspace {}",
                self.root.display()
            )));
        }
        let candidate = self.root.join(path);
        let real = real_path(&candidate)
            .map_err(|e| ToolError::failed(format!("cannot {verb} `{requested}`: {e}")))?;
        if !real.starts_with(&self.root) {
            return Err(self.outside(requested, &candidate, &real, verb));
        }
        if intent == Access::Write && real == self.root {
            return Err(ToolError::denied(format!(
                "cannot write `{requested}`: it is the workspace root; give a file path inside it"
            )));
        }
        Ok(real)
    }

    /// How `requested` is shown to the model: relative to the root, `.` for the root itself.
    /// `resolved` is what [`Workspace::resolve`] returned; it names an absolute path that
    /// reached the root through another name (a symlinked parent of the root).
    pub fn display(&self, requested: &str, resolved: &Path) -> String {
        let path = Path::new(requested);
        let relative = if path.is_absolute() {
            path.strip_prefix(&self.root)
                .or_else(|_| resolved.strip_prefix(&self.root))
                .unwrap_or(path)
        } else {
            path
        };
        let shown: PathBuf = relative
            .components()
            .filter(|c| *c != Component::CurDir)
            .collect();
        if shown.as_os_str().is_empty() {
            ".".to_string()
        } else {
            shown.display().to_string()
        }
    }

    /// The refusal for a path whose real location is outside the root.
    fn outside(&self, requested: &str, candidate: &Path, real: &Path, verb: &str) -> ToolError {
        let root = self.root.display();
        if candidate.starts_with(&self.root) {
            ToolError::denied(format!(
                "cannot {verb} `{requested}`: it goes through a symlink that leads to {}, outside \
                 the workspace {root}; symlinks must point inside the workspace",
                real.display()
            ))
        } else {
            ToolError::denied(format!(
                "cannot {verb} `{requested}`: it is outside the workspace {root}; use a path \
                 relative to the workspace root (or an absolute path inside it)"
            ))
        }
    }
}

/// The real location of `path` (absolute, without `..`): the canonical form of its deepest
/// existing ancestor with the missing components appended. Dangling symlinks are followed by
/// hand, so a link to a file that does not exist yet resolves to where that file would be.
fn real_path(path: &Path) -> io::Result<PathBuf> {
    let mut existing = path.to_path_buf();
    let mut missing: Vec<OsString> = Vec::new();
    let mut hops = 0;
    let base = loop {
        match fs::symlink_metadata(&existing) {
            Ok(meta) if meta.file_type().is_symlink() => match fs::canonicalize(&existing) {
                Ok(real) => break real,
                Err(e) if is_missing(&e) => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(io::Error::other("too many levels of symlinks"));
                    }
                    let target = fs::read_link(&existing)?;
                    // A symlink always has a parent: the root `/` is never a symlink.
                    let parent = existing.parent().unwrap_or(Path::new("/"));
                    existing = parent.join(target);
                }
                Err(e) => return Err(e),
            },
            Ok(_) => break fs::canonicalize(&existing)?,
            Err(e) if is_missing(&e) => match existing.file_name() {
                Some(name) => {
                    missing.push(name.to_os_string());
                    existing.pop();
                }
                None => {
                    return Err(io::Error::other(
                        "a symlink on the way goes through `..` in a missing directory",
                    ));
                }
            },
            Err(e) => return Err(e),
        }
    };
    Ok(missing
        .iter()
        .rev()
        .fold(base, |path, name| path.join(name)))
}

/// True when `error` means a path (or one of its parents) does not exist.
fn is_missing(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

#[cfg(test)]
mod tests {
    use keel_core::ToolErrorKind;

    use super::*;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("root")).unwrap();
        let workspace = Workspace::new(dir.path().join("root")).unwrap();
        (dir, workspace)
    }

    fn denied(result: Result<PathBuf, ToolError>) -> String {
        let err = result.unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::Denied, "{}", err.message);
        err.message
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
    fn relative_paths_are_joined_to_the_root() {
        let (_dir, ws) = setup();
        let root = ws.root().to_path_buf();
        assert_eq!(
            ws.resolve("a/b.txt", Access::Write).unwrap(),
            root.join("a/b.txt")
        );
        assert_eq!(
            ws.resolve("./c.txt", Access::Read).unwrap(),
            root.join("c.txt")
        );
        assert_eq!(ws.resolve(".", Access::Read).unwrap(), root);
    }

    #[test]
    fn parent_components_are_refused_anywhere() {
        let (_dir, ws) = setup();
        for path in ["..", "../x", "a/../../x", "a/..", "/tmp/../etc"] {
            let message = denied(ws.resolve(path, Access::Read));
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
        let resolved = ws.resolve(inside.to_str().unwrap(), Access::Write).unwrap();
        assert_eq!(resolved, inside);
        assert_eq!(ws.display(inside.to_str().unwrap(), &resolved), "notes.txt");

        let outside = dir.path().join("secret.txt");
        let message = denied(ws.resolve(outside.to_str().unwrap(), Access::Read));
        assert!(message.contains("outside the workspace"), "{message}");
        assert!(
            message.contains("relative to the workspace root"),
            "{message}"
        );
    }

    #[test]
    fn empty_paths_and_writing_the_root_are_refused() {
        let (_dir, ws) = setup();
        let err = ws.resolve("  ", Access::Read).unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::InvalidArguments);
        let message = denied(ws.resolve(".", Access::Write));
        assert!(message.contains("workspace root"), "{message}");
    }

    #[test]
    fn display_is_relative_to_the_root() {
        let (_dir, ws) = setup();
        let root = ws.root().to_path_buf();
        assert_eq!(ws.display("./a/./b", &root.join("a/b")), "a/b");
        assert_eq!(ws.display(".", &root), ".");
        assert_eq!(ws.display(root.to_str().unwrap(), &root), ".");
    }

    #[cfg(unix)]
    mod symlinks {
        use std::os::unix::fs::symlink;

        use super::*;

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
                let message = denied(ws.resolve(path, access));
                assert!(message.contains(&format!("`{path}`")), "{message}");
                assert!(message.contains("symlink"), "{message}");
            }
        }

        #[test]
        fn a_symlink_inside_the_root_resolves_to_its_target() {
            let (_dir, ws) = setup();
            fs::create_dir(ws.root().join("real")).unwrap();
            symlink("real", ws.root().join("alias")).unwrap();
            assert_eq!(
                ws.resolve("alias/x.txt", Access::Write).unwrap(),
                ws.root().join("real/x.txt")
            );
        }

        #[test]
        fn dangling_symlinks_are_followed_by_hand() {
            let (dir, ws) = setup();
            symlink(dir.path().join("gone/file"), ws.root().join("out")).unwrap();
            let message = denied(ws.resolve("out", Access::Write));
            assert!(message.contains("`out`"), "{message}");

            symlink("later.txt", ws.root().join("soon")).unwrap();
            assert_eq!(
                ws.resolve("soon", Access::Write).unwrap(),
                ws.root().join("later.txt")
            );

            symlink("loop", ws.root().join("loop")).unwrap();
            let err = ws.resolve("loop", Access::Write).unwrap_err();
            assert_eq!(err.kind, ToolErrorKind::Failed);
        }

        #[test]
        fn a_root_reached_through_a_symlink_is_canonical() {
            let (dir, ws) = setup();
            symlink(ws.root(), dir.path().join("alias")).unwrap();
            let via_alias = Workspace::new(dir.path().join("alias")).unwrap();
            assert_eq!(via_alias.root(), ws.root());
            let requested = dir.path().join("alias/a.txt");
            let resolved = via_alias
                .resolve(requested.to_str().unwrap(), Access::Write)
                .unwrap();
            assert_eq!(resolved, ws.root().join("a.txt"));
            assert_eq!(
                via_alias.display(requested.to_str().unwrap(), &resolved),
                "a.txt"
            );
        }
    }
}
