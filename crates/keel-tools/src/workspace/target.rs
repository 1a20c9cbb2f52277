//! Walking a path from the workspace's root handle, and what the walk found: a [`Target`].

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

use keel_core::ToolError;
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use super::{NodeId, Workspace, directory_flags, stat_entry};

/// How many symlinks one walk follows before giving up (the kernel's own limit).
const MAX_SYMLINK_HOPS: usize = 40;

/// What a path named, found by [`Workspace::locate`]: the directory that holds it, open, and
/// its name there. Every operation on it goes through that handle, never through a path.
#[derive(Debug)]
pub struct Target {
    /// The directory holding the entry (the deepest existing one when directories are missing).
    dir: OwnedFd,
    /// The entry's name in `dir` (after the missing directories); `None` for the root itself.
    name: Option<OsString>,
    /// Directories that do not exist yet between `dir` and `name`, outermost first.
    missing: Vec<OsString>,
    /// What is there.
    found: Found,
    /// The path as shown to the model: relative to the root, `.` for the root itself.
    shown: String,
}

/// What a [`Target`] names, as found by the walk.
#[derive(Debug)]
pub enum Found {
    /// A directory, held open.
    Directory(OwnedFd),
    /// Something else: a regular file, a FIFO, a socket, a device.
    Other(FileType),
    /// Nothing yet.
    Missing,
}

impl Target {
    /// The path as the model should see it: relative to the workspace root.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// What the walk found there.
    pub fn found(&self) -> &Found {
        &self.found
    }

    /// True when the target is the workspace root itself.
    pub fn is_root(&self) -> bool {
        self.name.is_none()
    }

    /// The directory holding the entry; valid once [`Target::create_parents`] ran (or when no
    /// directory was missing).
    pub fn dir(&self) -> &OwnedFd {
        &self.dir
    }

    /// The entry's name in [`Target::dir`] (`.` for the root).
    pub fn name(&self) -> &Path {
        self.name.as_deref().map_or(Path::new("."), Path::new)
    }

    /// True when directories on the way do not exist yet.
    pub fn parents_missing(&self) -> bool {
        !self.missing.is_empty()
    }

    /// Creates the missing directories, each relative to the one before and never through a
    /// symlink; afterwards [`Target::dir`] is the entry's parent. Returns the directories whose
    /// entries changed (the first existing one, then each created one but the last), to flush.
    pub fn create_parents(&mut self) -> io::Result<Vec<OwnedFd>> {
        let mut changed = Vec::new();
        for name in std::mem::take(&mut self.missing) {
            match rustix::fs::mkdirat(&self.dir, name.as_os_str(), Mode::from_bits_truncate(0o777))
            {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            let next = rustix::fs::openat(
                &self.dir,
                name.as_os_str(),
                directory_flags(),
                Mode::empty(),
            )?;
            changed.push(std::mem::replace(&mut self.dir, next));
        }
        Ok(changed)
    }

    /// Opens the entry as a file with `flags` (never through a symlink, never blocking on a
    /// FIFO), and checks that what was opened is a regular file.
    pub fn open_file(&self, flags: OFlags, mode: Mode) -> Result<File, OpenError> {
        let flags = flags | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, self.name(), flags, mode).map_err(|e| match e {
            Errno::LOOP => OpenError::Changed,
            Errno::ISDIR => OpenError::NotRegular(FileType::Directory),
            e => OpenError::Io(e.into()),
        })?;
        let file_type =
            FileType::from_raw_mode(rustix::fs::fstat(&fd).map_err(io::Error::from)?.st_mode);
        if file_type != FileType::RegularFile {
            return Err(OpenError::NotRegular(file_type));
        }
        let file = File::from(fd);
        // Reads and writes of a regular file block as usual; only the open had to not block.
        set_blocking(&file)?;
        Ok(file)
    }
}

/// Why [`Target::open_file`] could not give a regular file.
#[derive(Debug)]
pub enum OpenError {
    /// The entry is a directory, FIFO, socket or device.
    NotRegular(FileType),
    /// The entry became a symlink between the walk and the open: someone is changing the
    /// workspace meanwhile.
    Changed,
    /// What the operating system said.
    Io(io::Error),
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Io(e)
    }
}

/// What a file type is called in messages: "a FIFO", "a directory".
pub fn describe_type(file_type: FileType) -> &'static str {
    match file_type {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a FIFO (named pipe)",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "a special file",
    }
}

fn set_blocking(file: &File) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(file)?;
    rustix::fs::fcntl_setfl(file, flags - OFlags::NONBLOCK)?;
    Ok(())
}

/// One step of a walk.
enum Step {
    /// Into the entry of this name.
    Name(OsString),
    /// Back to the parent: only from a symlink's target.
    Up,
}

/// Walks `relative` (no `..`) from the root's handle. See [`Workspace::locate`].
pub(super) fn walk(
    workspace: &Workspace,
    relative: &Path,
    requested: &str,
    verb: &str,
) -> Result<Target, ToolError> {
    let fail = |what: String| ToolError::failed(format!("cannot {verb} `{requested}`: {what}"));
    let io_fail = |e: Errno| fail(io::Error::from(e).to_string());
    let root = workspace
        .root_dir
        .try_clone()
        .map_err(|e| fail(e.to_string()))?;
    let root_id = NodeId::of(&rustix::fs::fstat(&root).map_err(io_fail)?);
    workspace.check_protected(root_id, OsStr::new(""), Some(root_id), requested, verb)?;
    // The open directories from the root down, with their ids and names.
    let mut stack: Vec<(OwnedFd, NodeId, OsString)> = vec![(root, root_id, OsString::new())];
    let mut missing: Vec<OsString> = Vec::new();
    let mut last: Option<(OsString, FileType)> = None;
    let mut steps: VecDeque<Step> = steps_of(relative).collect();
    let mut hops = 0;
    while let Some(step) = steps.pop_front() {
        if let Some((name, file_type)) = last.take() {
            // Only the last step may be something other than a directory.
            let mut path = stack_path(&stack, &missing);
            path.push(name);
            return Err(fail(format!(
                "`{}` is {}, not a directory",
                path.display(),
                describe_type(file_type)
            )));
        }
        let name = match step {
            Step::Up => {
                if missing.pop().is_none() {
                    if stack.len() == 1 {
                        return Err(ToolError::denied(format!(
                            "cannot {verb} `{requested}`: a symlink on the way leads above the \
                             workspace root {}; symlinks must point inside the workspace",
                            workspace.root.display()
                        )));
                    }
                    stack.pop();
                }
                continue;
            }
            Step::Name(name) if !missing.is_empty() => {
                missing.push(name);
                continue;
            }
            Step::Name(name) => name,
        };
        let Some((dir, dir_id, _)) = stack.last() else {
            return Err(fail("lost its way".into()));
        };
        workspace.check_protected(*dir_id, &name, None, requested, verb)?;
        let stat = match stat_entry(dir, &name) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => {
                missing.push(name);
                continue;
            }
            Err(e) => return Err(io_fail(e)),
        };
        let id = NodeId::of(&stat);
        workspace.check_protected(*dir_id, &name, Some(id), requested, verb)?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(fail("too many levels of symlinks".into()));
                }
                let link = match rustix::fs::readlinkat(dir, name.as_os_str(), Vec::new()) {
                    Ok(link) => PathBuf::from(OsString::from_vec(link.into_bytes())),
                    // Replaced by something else since the stat: look again.
                    Err(Errno::INVAL) => {
                        steps.push_front(Step::Name(name));
                        continue;
                    }
                    Err(e) => return Err(io_fail(e)),
                };
                let relative = if link.is_absolute() {
                    workspace.inside(&link).filter(|r| !has_parent_dir(r))
                } else {
                    Some(link.clone())
                };
                let Some(relative) = relative else {
                    return Err(escape(workspace, &stack, &name, &link, requested, verb));
                };
                if link.is_absolute() {
                    stack.truncate(1);
                }
                for step in steps_of(&relative).collect::<Vec<_>>().into_iter().rev() {
                    steps.push_front(step);
                }
                if has_parent_dir(&relative) && escapes(&stack, &relative) {
                    return Err(escape(workspace, &stack, &name, &link, requested, verb));
                }
            }
            FileType::Directory => {
                match rustix::fs::openat(dir, name.as_os_str(), directory_flags(), Mode::empty()) {
                    Ok(fd) => stack.push((fd, id, name)),
                    // Swapped for a symlink or a file since the stat: look again.
                    Err(Errno::LOOP | Errno::NOTDIR) => {
                        hops += 1;
                        if hops > MAX_SYMLINK_HOPS {
                            return Err(fail("it keeps changing while being opened".into()));
                        }
                        steps.push_front(Step::Name(name));
                    }
                    Err(e) => return Err(io_fail(e)),
                }
            }
            other => last = Some((name, other)),
        }
    }
    let shown = shown(relative);
    if let Some((name, file_type)) = last {
        let (dir, _, _) = stack.pop().ok_or_else(|| fail("lost its way".into()))?;
        return Ok(Target {
            dir,
            name: Some(name),
            missing,
            found: Found::Other(file_type),
            shown,
        });
    }
    if let Some(name) = missing.pop() {
        let (dir, _, _) = stack.pop().ok_or_else(|| fail("lost its way".into()))?;
        return Ok(Target {
            dir,
            name: Some(name),
            missing,
            found: Found::Missing,
            shown,
        });
    }
    let (opened, _, name) = stack.pop().ok_or_else(|| fail("lost its way".into()))?;
    let found = Found::Directory(opened);
    match stack.pop() {
        Some((dir, _, _)) => Ok(Target {
            dir,
            name: Some(name),
            missing,
            found,
            shown,
        }),
        None => {
            let dir = workspace
                .root_dir
                .try_clone()
                .map_err(|e| fail(e.to_string()))?;
            Ok(Target {
                dir,
                name: None,
                missing,
                found,
                shown,
            })
        }
    }
}

/// The steps of a path: names, and `..` as [`Step::Up`]; `.` and the root are skipped.
fn steps_of(path: &Path) -> impl Iterator<Item = Step> + '_ {
    path.components().filter_map(|c| match c {
        Component::Normal(name) => Some(Step::Name(name.to_os_string())),
        Component::ParentDir => Some(Step::Up),
        Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
    })
}

fn has_parent_dir(path: &Path) -> bool {
    path.components().any(|c| c == Component::ParentDir)
}

/// True when `relative`, taken from the top of `stack`, climbs above the root at some point.
fn escapes(stack: &[(OwnedFd, NodeId, OsString)], relative: &Path) -> bool {
    let mut depth = stack.len() as isize - 1;
    for step in steps_of(relative) {
        depth += match step {
            Step::Up => -1,
            Step::Name(_) => 1,
        };
        if depth < 0 {
            return true;
        }
    }
    false
}

/// The path of the top of `stack` (and the missing directories), relative to the root.
fn stack_path(stack: &[(OwnedFd, NodeId, OsString)], missing: &[OsString]) -> PathBuf {
    stack
        .iter()
        .skip(1)
        .map(|(_, _, name)| name)
        .chain(missing)
        .collect()
}

/// The refusal for a symlink at `name` (in the directory on top of `stack`) leading to `link`,
/// outside the workspace.
fn escape(
    workspace: &Workspace,
    stack: &[(OwnedFd, NodeId, OsString)],
    name: &OsString,
    link: &Path,
    requested: &str,
    verb: &str,
) -> ToolError {
    let mut at = stack_path(stack, &[]);
    at.push(name);
    ToolError::denied(format!(
        "cannot {verb} `{requested}`: it goes through the symlink `{}` -> {}, which leads \
         outside the workspace {}; symlinks must point inside the workspace",
        at.display(),
        link.display(),
        workspace.root.display()
    ))
}

/// `relative` as shown to the model: without `./`, `.` for the root.
fn shown(relative: &Path) -> String {
    let shown: PathBuf = relative
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    if shown.as_os_str().is_empty() {
        ".".to_string()
    } else {
        shown.display().to_string()
    }
}
