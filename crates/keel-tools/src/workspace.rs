//! The workspace: the one directory tree the file tools may touch, and the rules that keep every
//! path inside it.
//!
//! Containment never rests on a path checked first and opened later. The root is held open as a
//! directory handle, and every path is walked from it one component at a time
//! ([`Workspace::locate`]): each directory is opened relative to the one before without following
//! symlinks, and a symlink met on the way is read and followed by hand, so its target must lie
//! inside the workspace too. Whoever renames or swaps entries meanwhile can make a call fail,
//! never make it reach outside. A file with several names (hard links) is no name's alone: one
//! that is also a file in a protected directory is refused ([`Workspace::check_other_names`]).

mod links;
mod target;
mod walk;

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use keel_core::ToolError;
use rustix::fs::{AtFlags, Mode, OFlags};

pub use target::{Found, OpenError, Target, describe_type};

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

/// One file or directory on one filesystem: what a path leads to, whatever its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct NodeId {
    dev: u64,
    ino: u64,
}

impl NodeId {
    fn of(stat: &rustix::fs::Stat) -> Self {
        #[allow(clippy::useless_conversion)] // The field types differ between platforms.
        NodeId {
            dev: u64::from(stat.st_dev),
            ino: u64::from(stat.st_ino),
        }
    }
}

/// A path the file tools must never reach ([`Workspace::protect`]).
#[derive(Clone, Debug)]
struct Protected {
    /// The path as given, for messages.
    path: PathBuf,
    /// The path made absolute: what it is now (looked up at each check, since keel replaces
    /// some of its files and their old inode numbers get reused) is refused by any name, a
    /// directory with all it holds.
    absolute: PathBuf,
    /// Its parent directory and name: refused even before it exists.
    entry: Option<(NodeId, OsString)>,
}

/// A root directory that confines the file tools.
///
/// Every path a tool touches goes through [`Workspace::locate`]: relative paths are taken from
/// the root, `..` is refused, absolute paths must lie inside the root, and symlinks are followed
/// by hand so that their targets must lie inside the root too. Paths given to
/// [`Workspace::protect`] (keel's own files) are refused whatever path leads to them.
#[derive(Clone, Debug)]
pub struct Workspace {
    root: PathBuf,
    root_dir: Arc<OwnedFd>,
    protected: Vec<Protected>,
}

impl Workspace {
    /// Opens the workspace at `root`, which must be an existing directory. The root is
    /// canonicalized (for messages and absolute paths) and held open: later renames of the root
    /// or its parents do not move the workspace.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, WorkspaceError> {
        let given = root.as_ref();
        let unreadable = |source: io::Error| WorkspaceError::Unreadable {
            root: given.to_path_buf(),
            source,
        };
        let root = fs::canonicalize(given).map_err(unreadable)?;
        if !root.is_dir() {
            return Err(WorkspaceError::NotADirectory {
                root: given.to_path_buf(),
            });
        }
        let root_dir = rustix::fs::open(&root, directory_flags(), Mode::empty())
            .map_err(|e| unreadable(e.into()))?;
        Ok(Workspace {
            root,
            root_dir: Arc::new(root_dir),
            protected: Vec::new(),
        })
    }

    /// The same workspace, refusing `path` to every tool, by any name: through a symlink, a
    /// `./`, an absolute path. A directory is refused with everything in it. A path that does
    /// not exist yet is refused by its name in its parent directory (when that exists), so it
    /// cannot be created either. keel protects its home (the database, its `-wal` and `-shm`
    /// files), the configuration file and its last good copy this way.
    pub fn protect(mut self, path: impl AsRef<Path>) -> Self {
        let path = path.as_ref();
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let entry = match (absolute.parent(), absolute.file_name()) {
            (Some(parent), Some(name)) => node_of(parent).map(|id| (id, name.to_os_string())),
            _ => None,
        };
        self.protected.push(Protected {
            path: path.to_path_buf(),
            absolute,
            entry,
        });
        self
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Finds what `requested` names inside the workspace, walking from the root's handle.
    ///
    /// Relative paths are taken from the root; absolute paths must be inside it; `..` is never
    /// allowed, and a trailing `/` or `/.` is refused for writes (it names a directory).
    /// Symlinks are followed (also dangling ones) and must lead inside the root; protected paths
    /// are refused. `Write` also refuses the root itself. Nothing is created:
    /// [`Target::create_parents`] does that. Blocks on the filesystem: call it from blocking
    /// code.
    pub fn locate(&self, requested: &str, intent: Access) -> Result<Target, ToolError> {
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
        // `new/.` would otherwise be read as `new` (a path's components skip `.`).
        let ending = ["/", "/."].into_iter().find(|e| requested.ends_with(e));
        if let (Access::Write, Some(ending)) = (intent, ending) {
            return Err(ToolError::invalid_arguments(format!(
                "cannot write `{requested}`: a path ending in `{ending}` names a directory; give \
                 the path of a file, without the trailing `{ending}`"
            )));
        }
        let relative = if path.is_absolute() {
            self.inside(path).ok_or_else(|| {
                ToolError::denied(format!(
                    "cannot {verb} `{requested}`: it is outside the workspace {}; use a path \
                     relative to the workspace root (or an absolute path inside it)",
                    self.root.display()
                ))
            })?
        } else {
            path.to_path_buf()
        };
        let target = walk::Walk::new(self, requested, verb)?.run(&relative)?;
        if intent == Access::Write && target.is_root() {
            return Err(ToolError::denied(format!(
                "cannot write `{requested}`: it is the workspace root; give a file path inside it"
            )));
        }
        Ok(target)
    }

    /// `absolute` relative to the root, when it lies inside: by its name, or else by its real
    /// location (the root reached through a symlinked parent). The result is only ever walked
    /// from the root's handle, so a path that changes meanwhile cannot lead out.
    fn inside(&self, absolute: &Path) -> Option<PathBuf> {
        if let Ok(relative) = absolute.strip_prefix(&self.root) {
            return Some(relative.to_path_buf());
        }
        let mut existing = absolute.to_path_buf();
        let mut missing: Vec<OsString> = Vec::new();
        let real = loop {
            match fs::canonicalize(&existing) {
                Ok(real) => break real,
                Err(_) => {
                    missing.push(existing.file_name()?.to_os_string());
                    existing.pop();
                }
            }
        };
        let relative = real.strip_prefix(&self.root).ok()?;
        Some(
            missing
                .iter()
                .rev()
                .fold(relative.to_path_buf(), |p, n| p.join(n)),
        )
    }

    /// True when the entry `name` of the directory `dir` is one of the paths given to
    /// [`Workspace::protect`], by its name or by what it is.
    pub fn is_protected(&self, dir: &OwnedFd, name: &OsStr) -> bool {
        let Ok(parent) = rustix::fs::fstat(dir) else {
            return false;
        };
        let id = stat_entry(dir, name).ok().map(|s| NodeId::of(&s));
        self.protection(NodeId::of(&parent), name, id).is_some()
    }

    /// The protected path that `name` in the directory `parent`, or the node `id` it leads to,
    /// would reach.
    fn protection(&self, parent: NodeId, name: &OsStr, id: Option<NodeId>) -> Option<&Protected> {
        self.protected.iter().find(|p| {
            p.entry
                .as_ref()
                .is_some_and(|(dir, n)| *dir == parent && n == name)
                || (id.is_some() && node_of(&p.absolute) == id)
        })
    }

    /// The refusal when `name` in the directory `parent` (or the node `id`) is protected.
    fn check_protected(
        &self,
        parent: NodeId,
        name: &OsStr,
        id: Option<NodeId>,
        requested: &str,
        verb: &str,
    ) -> Result<(), ToolError> {
        match self.protection(parent, name, id) {
            Some(protected) => Err(ToolError::denied(format!(
                "cannot {verb} `{requested}`: it leads to {}, one of keel's own files (its home, \
                 database, configuration or last good configuration), which the file tools never \
                 read or write",
                protected.path.display()
            ))),
            None => Ok(()),
        }
    }
}

/// What `path` leads to now, following symlinks.
fn node_of(path: &Path) -> Option<NodeId> {
    rustix::fs::stat(path).ok().map(|stat| NodeId::of(&stat))
}

/// How directories on a walk are opened: read-only, as directories, never through a symlink.
fn directory_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Reads an entry's own metadata, not its symlink target's.
fn stat_entry(dir: &OwnedFd, name: &OsStr) -> rustix::io::Result<rustix::fs::Stat> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
}

#[cfg(test)]
mod tests;
