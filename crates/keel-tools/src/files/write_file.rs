//! `write_file`: create or replace a file atomically.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use keel_core::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::{FILES_MODULE, not_a_regular_file, parse_args, run_blocking};
use crate::schema::parameters_for;
use crate::workspace::{Access, Found, Target, Workspace};

const DESCRIPTION: &str = "Write a text file in the workspace, replacing it if it exists. `path` \
is relative to the workspace root; missing parent directories are created. `content` is the \
complete new text of the file (not a diff or a fragment). The write is atomic: the file is either \
fully replaced or left as it was.";

/// Numbers temporary files so concurrent writes in one process never pick the same name.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteFileArgs {
    /// Path of the file, relative to the workspace root.
    path: String,
    /// The complete text the file should contain.
    content: String,
}

/// The `write_file` tool: a side effect (not idempotent), confined to a workspace.
pub struct WriteFile {
    workspace: Arc<Workspace>,
    spec: ToolSpec,
}

impl WriteFile {
    /// A `write_file` tool writing inside `workspace`.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        let mut spec = ToolSpec::new("write_file", DESCRIPTION, parameters_for::<WriteFileArgs>());
        spec.module = Some(FILES_MODULE.to_string());
        WriteFile { workspace, spec }
    }
}

#[async_trait]
impl Tool for WriteFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        args: serde_json::Value,
        _: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: WriteFileArgs = parse_args("write_file", args)?;
        let workspace = self.workspace.clone();
        run_blocking(move || write(&workspace, &args)).await
    }
}

fn write(workspace: &Workspace, args: &WriteFileArgs) -> Result<ToolOutput, ToolError> {
    let mut target = workspace.locate(&args.path, Access::Write)?;
    let shown = target.shown().to_string();
    let existing = match target.found() {
        Found::Directory(_) => {
            return Err(ToolError::failed(format!(
                "{shown} is a directory; write_file writes files, so give a file path"
            )));
        }
        Found::Other(FileType::RegularFile) => {
            let stat = rustix::fs::statat(target.dir(), target.name(), AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| ToolError::failed(format!("cannot write {shown}: {e}")))?;
            Some(Mode::from_raw_mode(stat.st_mode))
        }
        Found::Other(file_type) => {
            return Err(not_a_regular_file(
                &shown,
                *file_type,
                "write_file only writes",
            ));
        }
        Found::Missing => None,
    };
    target.create_parents().map_err(|e| {
        ToolError::failed(format!("cannot create the directories for {shown}: {e}"))
    })?;
    let replaced = existing.is_some();
    atomic_write(&target, args.content.as_bytes(), existing)
        .map_err(|e| ToolError::failed(format!("cannot write {shown}: {e}")))?;
    let what = if replaced {
        "replaced the existing file"
    } else {
        "created a new file"
    };
    // The file is returned with the run's answer (seed 003 "extract files").
    Ok(ToolOutput::text(format!(
        "wrote {} bytes to {shown} ({what})",
        args.content.len()
    ))
    .with_file(shown, args.content.clone().into_bytes()))
}

/// Writes `content` to a temporary file beside the target, flushes it to disk and renames it
/// over the target, so readers see the old file or the new one, never a half-written one. An
/// existing file's permissions (`mode`) are carried over. All of it happens in the target's
/// directory handle: a symlink swapped in meanwhile is replaced, never followed.
fn atomic_write(target: &Target, content: &[u8], mode: Option<Mode>) -> io::Result<()> {
    let dir = target.dir();
    let (temp, mut file) = create_temp(dir)?;
    let result = file
        .write_all(content)
        .and_then(|()| match mode {
            Some(mode) => rustix::fs::fchmod(&file, mode).map_err(io::Error::from),
            None => Ok(()),
        })
        .and_then(|()| file.sync_all())
        .and_then(|()| {
            rustix::fs::renameat(dir, &temp, dir, target.name()).map_err(io::Error::from)
        });
    if result.is_err() {
        // Best effort: the write already failed, and a leftover temp file is harmless.
        let _ = rustix::fs::unlinkat(dir, &temp, AtFlags::empty());
    }
    result
}

/// A new, empty temporary file in `dir` with a name no other writer holds.
fn create_temp(dir: &OwnedFd) -> io::Result<(String, File)> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for _ in 0..100 {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp = format!(".keel-write-{}-{n}.tmp", std::process::id());
        match rustix::fs::openat(dir, temp.as_str(), flags, Mode::from_raw_mode(0o666)) {
            Ok(fd) => return Ok((temp, File::from(fd))),
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other("could not create a temporary file"))
}
