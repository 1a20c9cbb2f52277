//! What a walk from the workspace's root handle found: a [`Target`], and how to open it.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use super::directory_flags;

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
    pub(super) fn new(
        dir: OwnedFd,
        name: Option<OsString>,
        missing: Vec<OsString>,
        found: Found,
        shown: String,
    ) -> Self {
        Target {
            dir,
            name,
            missing,
            found,
            shown,
        }
    }

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
