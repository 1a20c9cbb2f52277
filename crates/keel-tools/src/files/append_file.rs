//! `append_file`: add text to the end of a file, creating it if missing.
//!
//! Unlike `write_file`, appending is not idempotent: running the same call twice appends twice.
//! The spec says so, and keel therefore never retries it nor re-runs it on resume.

use std::fs::File;
use std::io::{self, Write};
use std::sync::Arc;

use async_trait::async_trait;
use keel_core::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

use rustix::fs::{FileType, Mode, OFlags};

use super::{FILES_MODULE, changed, not_a_regular_file, parse_args, run_blocking};
use crate::schema::parameters_for;
use crate::workspace::{Access, Found, OpenError, Workspace};

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
    let mut target = workspace.locate(&args.path, Access::Write)?;
    let shown = target.shown().to_string();
    let not_regular = |file_type| match file_type {
        FileType::Directory => ToolError::failed(format!(
            "{shown} is a directory; append_file appends to files, so give a file path"
        )),
        // A FIFO or device would block or misbehave; only regular files are appended to.
        other => not_a_regular_file(&shown, other, "append_file only appends to"),
    };
    let exists = match target.found() {
        Found::Directory(_) => return Err(not_regular(FileType::Directory)),
        Found::Other(FileType::RegularFile) => true,
        Found::Other(file_type) => return Err(not_regular(*file_type)),
        Found::Missing => false,
    };
    // The first directory that already exists and every directory created below it get a new
    // entry that must reach the disk along with the file.
    let mut new_entries = target.create_parents().map_err(|e| {
        ToolError::failed(format!("cannot create the directories for {shown}: {e}"))
    })?;
    let mode = Mode::from_raw_mode(0o666);
    let mut file = target
        .open_file(OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE, mode)
        .map_err(|e| match e {
            OpenError::NotRegular(file_type) => not_regular(file_type),
            OpenError::Changed => changed(&shown),
            OpenError::Io(e) => ToolError::failed(format!("cannot append to {shown}: {e}")),
        })?;
    refuse_other_names(&file, &shown)?;

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
        let parent = target.dir().try_clone().map_err(not_durable)?;
        new_entries.push(parent);
        for dir in &new_entries {
            rustix::fs::fsync(dir).map_err(|e| not_durable(e.into()))?;
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

/// Refuses a file with more than one name (hard links): appending changes it under every name,
/// and the others may lie anywhere, outside the workspace too (keel's memory notes, a package
/// store). `write_file` is not refused: it gives the name a new file and leaves the others be.
fn refuse_other_names(file: &File, shown: &str) -> Result<(), ToolError> {
    let names = rustix::fs::fstat(file)
        .map_err(|e| {
            ToolError::failed(format!("cannot append to {shown}: {}", io::Error::from(e)))
        })?
        .st_nlink;
    if names <= 1 {
        return Ok(());
    }
    Err(ToolError::denied(format!(
        "cannot append to {shown}: it has {names} names (hard links), so appending would change \
         it under its other names too, which may lie outside the workspace; write the whole new \
         content with write_file instead (it replaces this name only)"
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
