//! Walking a path from the workspace's root handle, one component at a time.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

use keel_core::ToolError;
use rustix::fs::{FileType, Mode};
use rustix::io::Errno;

use super::target::{Found, Target, describe_type};
use super::{NodeId, Workspace, directory_flags, stat_entry};

/// How many symlinks (or entries swapped while being opened) one walk goes through before
/// giving up: the kernel's own limit for symlinks.
const MAX_HOPS: usize = 40;

/// One step of a walk.
enum Step {
    /// Into the entry of this name.
    Name(OsString),
    /// Back to the parent: only from a symlink's target.
    Up,
}

/// A directory open on the walk.
struct Opened {
    fd: OwnedFd,
    id: NodeId,
    /// Its name in its parent (empty for the root).
    name: OsString,
}

/// A walk in progress. See [`Workspace::locate`].
pub(super) struct Walk<'a> {
    workspace: &'a Workspace,
    requested: &'a str,
    verb: &'static str,
    /// The open directories from the root down.
    stack: Vec<Opened>,
    /// Names below the top of `stack` that do not exist (yet).
    missing: Vec<OsString>,
    /// The entry reached that is not a directory: only the last step may reach one.
    reached: Option<(OsString, FileType)>,
    /// What is left to walk.
    steps: VecDeque<Step>,
    /// Symlinks followed and entries looked at again.
    hops: usize,
}

impl<'a> Walk<'a> {
    /// Starts a walk at the root, refused at once when the root itself is protected.
    pub(super) fn new(
        workspace: &'a Workspace,
        requested: &'a str,
        verb: &'static str,
    ) -> Result<Self, ToolError> {
        let mut walk = Walk {
            workspace,
            requested,
            verb,
            stack: Vec::new(),
            missing: Vec::new(),
            reached: None,
            steps: VecDeque::new(),
            hops: 0,
        };
        let fd = walk.root()?;
        let id = NodeId::of(&rustix::fs::fstat(&fd).map_err(|e| walk.io_fail(e))?);
        workspace.check_protected(id, OsStr::new(""), Some(id), requested, verb)?;
        walk.stack.push(Opened {
            fd,
            id,
            name: OsString::new(),
        });
        Ok(walk)
    }

    /// Walks `relative` (no `..` in it) and says what is there.
    pub(super) fn run(mut self, relative: &Path) -> Result<Target, ToolError> {
        self.steps.extend(steps_of(relative));
        while let Some(step) = self.steps.pop_front() {
            if let Some((name, file_type)) = self.reached.take() {
                let mut path = self.path();
                path.push(name);
                return Err(self.fail(format!(
                    "`{}` is {}, not a directory",
                    path.display(),
                    describe_type(file_type)
                )));
            }
            match step {
                Step::Up => self.up()?,
                Step::Name(name) if !self.missing.is_empty() => self.missing.push(name),
                Step::Name(name) => self.enter(name)?,
            }
        }
        self.finish(shown(relative))
    }

    /// One `..` from a symlink's target: the physical parent, never above the root.
    fn up(&mut self) -> Result<(), ToolError> {
        if self.missing.pop().is_some() {
            return Ok(());
        }
        if self.stack.len() == 1 {
            return Err(ToolError::denied(format!(
                "cannot {} `{}`: a symlink on the way leads above the workspace root {}; \
                 symlinks must point inside the workspace",
                self.verb,
                self.requested,
                self.workspace.root.display()
            )));
        }
        self.stack.pop();
        Ok(())
    }

    /// Looks at the entry `name` of the directory on top and goes into it, follows it, or
    /// notes it as missing or as reached.
    fn enter(&mut self, name: OsString) -> Result<(), ToolError> {
        let top = self.top()?;
        let (dir_id, requested, verb) = (top.id, self.requested, self.verb);
        self.workspace
            .check_protected(dir_id, &name, None, requested, verb)?;
        let stat = match stat_entry(&top.fd, &name) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => {
                self.missing.push(name);
                return Ok(());
            }
            Err(e) => return Err(self.io_fail(e)),
        };
        let id = NodeId::of(&stat);
        self.workspace
            .check_protected(dir_id, &name, Some(id), requested, verb)?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => self.follow(name),
            FileType::Directory => {
                let opened = rustix::fs::openat(&top.fd, &name, directory_flags(), Mode::empty());
                match opened {
                    Ok(fd) => self.stack.push(Opened { fd, id, name }),
                    // Swapped for a symlink or a file since the stat: look again.
                    Err(Errno::LOOP | Errno::NOTDIR) => self.again(name)?,
                    Err(e) => return Err(self.io_fail(e)),
                }
                Ok(())
            }
            other => {
                self.reached = Some((name, other));
                Ok(())
            }
        }
    }

    /// Continues the walk with the target of the symlink `name`, which must stay inside.
    fn follow(&mut self, name: OsString) -> Result<(), ToolError> {
        self.hop()?;
        let link = match rustix::fs::readlinkat(&self.top()?.fd, &name, Vec::new()) {
            Ok(link) => PathBuf::from(OsString::from_vec(link.into_bytes())),
            // Replaced by something else since the stat: look again.
            Err(Errno::INVAL) => {
                self.steps.push_front(Step::Name(name));
                return Ok(());
            }
            Err(e) => return Err(self.io_fail(e)),
        };
        let relative = if link.is_absolute() {
            self.workspace.inside(&link).filter(|r| !climbs(r, 0))
        } else {
            Some(link.clone()).filter(|r| !climbs(r, self.stack.len() - 1))
        };
        let Some(relative) = relative else {
            return Err(self.escape(&name, &link));
        };
        if link.is_absolute() {
            self.stack.truncate(1);
        }
        for step in steps_of(&relative).collect::<Vec<_>>().into_iter().rev() {
            self.steps.push_front(step);
        }
        Ok(())
    }

    /// Looks at `name` again: it changed while being opened.
    fn again(&mut self, name: OsString) -> Result<(), ToolError> {
        self.hop()?;
        self.steps.push_front(Step::Name(name));
        Ok(())
    }

    fn hop(&mut self) -> Result<(), ToolError> {
        self.hops += 1;
        if self.hops > MAX_HOPS {
            return Err(self.fail(
                "too many levels of symlinks (or entries that keep changing while being opened)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The target: the entry reached, the first missing name, or the directory on top.
    fn finish(mut self, shown: String) -> Result<Target, ToolError> {
        if let Some((name, file_type)) = self.reached.take() {
            let dir = self.pop()?.fd;
            return Ok(Target::new(
                dir,
                Some(name),
                Vec::new(),
                Found::Other(file_type),
                shown,
            ));
        }
        if let Some(name) = self.missing.pop() {
            let missing = std::mem::take(&mut self.missing);
            let dir = self.pop()?.fd;
            return Ok(Target::new(dir, Some(name), missing, Found::Missing, shown));
        }
        let opened = self.pop()?;
        let found = Found::Directory(opened.fd);
        match self.stack.pop() {
            Some(parent) => Ok(Target::new(
                parent.fd,
                Some(opened.name),
                Vec::new(),
                found,
                shown,
            )),
            None => Ok(Target::new(self.root()?, None, Vec::new(), found, shown)),
        }
    }

    fn root(&self) -> Result<OwnedFd, ToolError> {
        self.workspace
            .root_dir
            .try_clone()
            .map_err(|e| self.fail(e.to_string()))
    }

    fn top(&self) -> Result<&Opened, ToolError> {
        // The root is never popped: `up` refuses to climb above it.
        self.stack
            .last()
            .ok_or_else(|| self.fail("lost its way".into()))
    }

    fn pop(&mut self) -> Result<Opened, ToolError> {
        let popped = self.stack.pop();
        popped.ok_or_else(|| self.fail("lost its way".into()))
    }

    /// The path of the directory on top (and the missing names), relative to the root.
    fn path(&self) -> PathBuf {
        let names = self.stack.iter().skip(1).map(|opened| &opened.name);
        names.chain(&self.missing).collect()
    }

    fn fail(&self, what: String) -> ToolError {
        ToolError::failed(format!("cannot {} `{}`: {what}", self.verb, self.requested))
    }

    fn io_fail(&self, error: Errno) -> ToolError {
        self.fail(io::Error::from(error).to_string())
    }

    /// The refusal for the symlink `name` (in the directory on top) leading to `link`, outside.
    fn escape(&self, name: &OsStr, link: &Path) -> ToolError {
        let mut at = self.path();
        at.push(name);
        ToolError::denied(format!(
            "cannot {} `{}`: it goes through the symlink `{}` -> {}, which leads outside the \
             workspace {}; symlinks must point inside the workspace",
            self.verb,
            self.requested,
            at.display(),
            link.display(),
            self.workspace.root.display()
        ))
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

/// True when `relative`, walked from `depth` directories below the root, climbs above the root
/// at some point.
fn climbs(relative: &Path, depth: usize) -> bool {
    let mut depth = depth as isize;
    steps_of(relative).any(|step| {
        depth += match step {
            Step::Up => -1,
            Step::Name(_) => 1,
        };
        depth < 0
    })
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
