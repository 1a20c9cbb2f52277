//! `append_file`: add text to the end of a file, creating it if missing.
//!
//! Unlike `write_file`, appending is not idempotent: running the same call twice appends twice.
//! The spec says so, and keel therefore never retries it nor re-runs it on resume.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use keel_core::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{FILES_MODULE, parse_args, run_blocking};
use crate::schema::parameters_for;
use crate::workspace::{Access, Workspace};

const DESCRIPTION: &str = "Append text to the end of a file in the workspace. `path` is relative \
to the workspace root; the file and missing parent directories are created if needed. `content` \
is added exactly as given: no newline is added before or after it, so end it with a newline if \
you are adding lines. Every call appends again, so calling twice adds the text twice. To replace \
a file's whole content use write_file instead.";

/// The arguments of `append_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AppendFileArgs {
    /// Path of the file, relative to the workspace root.
    path: String,
    /// The text to add at the end of the file, as is (no newline is added).
    content: String,
}

/// The `append_file` tool: a side effect (not idempotent), confined to a workspace.
pub struct AppendFile {
    workspace: Arc<Workspace>,
    spec: ToolSpec,
}

impl AppendFile {
    /// An `append_file` tool appending inside `workspace`.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        let mut spec = ToolSpec::new(
            "append_file",
            DESCRIPTION,
            parameters_for::<AppendFileArgs>(),
        );
        spec.module = Some(FILES_MODULE.to_string());
        AppendFile { workspace, spec }
    }
}

#[async_trait]
impl Tool for AppendFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        args: serde_json::Value,
        _: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: AppendFileArgs = parse_args("append_file", args)?;
        let workspace = self.workspace.clone();
        run_blocking(move || append(&workspace, &args)).await
    }
}

fn append(workspace: &Workspace, args: &AppendFileArgs) -> Result<ToolOutput, ToolError> {
    let real = workspace.resolve(&args.path, Access::Write)?;
    let shown = workspace.display(&args.path, &real);
    let exists = match fs::metadata(&real) {
        Ok(meta) if meta.is_dir() => {
            return Err(ToolError::failed(format!(
                "{shown} is a directory; append_file appends to files, so give a file path"
            )));
        }
        // A FIFO or device would block or misbehave on open; only regular files are appended to.
        Ok(meta) if !meta.is_file() => {
            return Err(ToolError::failed(format!(
                "{shown} is not a regular file; append_file only appends to regular files"
            )));
        }
        Ok(_) => true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(ToolError::failed(format!("cannot append to {shown}: {e}"))),
    };
    // `resolve` refuses the root for writes, so the path has a parent inside the root.
    let Some(parent) = real.parent() else {
        return Err(ToolError::failed(format!(
            "cannot append to {shown}: it has no parent"
        )));
    };
    // The first directory that already exists: it and every directory created below it get a
    // new entry that must reach the disk along with the file.
    let existing_dir = parent
        .ancestors()
        .find(|dir| dir.is_dir())
        .unwrap_or(workspace.root())
        .to_path_buf();
    fs::create_dir_all(parent).map_err(|e| {
        ToolError::failed(format!("cannot create the directories for {shown}: {e}"))
    })?;
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .open(&real)
        .map_err(|e| ToolError::failed(format!("cannot append to {shown}: {e}")))?;

    let bytes = args.content.as_bytes();
    let written = write_once(&mut file, bytes)
        .map_err(|e| ToolError::failed(format!("cannot append to {shown}: {e}")))?;
    if written < bytes.len() {
        // Writing the rest in a second call could interleave with another appender; say what
        // happened instead, so the model can look before trying again.
        return Err(ToolError::failed(format!(
            "cannot append to {shown}: only {written} of {} bytes were written, so the file now \
             ends with a partial append; read it before appending again",
            bytes.len()
        )));
    }
    // The bytes are in the file now: a failure from here on must not invite a blind retry.
    let not_durable = |e: io::Error| {
        ToolError::failed(format!(
            "appended {written} bytes to {shown} but could not flush them to disk: {e}; the \
             bytes are probably there, so read the file before appending again"
        ))
    };
    file.sync_data().map_err(not_durable)?;
    if !exists {
        for dir in parent.ancestors() {
            sync_dir(dir).map_err(not_durable)?;
            if dir == existing_dir {
                break;
            }
        }
    }
    let size = file
        .metadata()
        .map(|meta| meta.len().to_string())
        .unwrap_or_else(|_| "an unknown number of".to_string());
    Ok(ToolOutput::text(format!(
        "appended {written} bytes to {shown} (it now has {size} bytes)"
    )))
}

/// One `write` call (repeated only when interrupted before writing anything), so the content
/// lands in the file as one append. Returns how many bytes were written.
fn write_once(file: &mut File, bytes: &[u8]) -> io::Result<usize> {
    loop {
        match file.write(bytes) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            result => return result,
        }
    }
}

/// Flushes `dir`'s entries to disk, so a file or directory just created in it survives a crash.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Directories cannot be opened for syncing here; the file's own data is already flushed.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}
