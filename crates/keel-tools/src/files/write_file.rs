//! `write_file`: create or replace a file atomically.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use keel_core::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{FILES_MODULE, parse_args, run_blocking};
use crate::schema::parameters_for;
use crate::workspace::{Access, Workspace};

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
    let real = workspace.resolve(&args.path, Access::Write)?;
    let shown = workspace.display(&args.path, &real);
    let existing = match fs::metadata(&real) {
        Ok(meta) if meta.is_dir() => {
            return Err(ToolError::failed(format!(
                "{shown} is a directory; write_file writes files, so give a file path"
            )));
        }
        Ok(meta) => Some(meta.permissions()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(ToolError::failed(format!("cannot write {shown}: {e}"))),
    };
    // `resolve` refuses the root for writes, so the path has a parent inside the root.
    let Some(parent) = real.parent() else {
        return Err(ToolError::failed(format!(
            "cannot write {shown}: it has no parent"
        )));
    };
    fs::create_dir_all(parent).map_err(|e| {
        ToolError::failed(format!("cannot create the directories for {shown}: {e}"))
    })?;
    let replaced = existing.is_some();
    atomic_write(&real, args.content.as_bytes(), existing)
        .map_err(|e| ToolError::failed(format!("cannot write {shown}: {e}")))?;
    let what = if replaced {
        "replaced the existing file"
    } else {
        "created a new file"
    };
    Ok(ToolOutput::text(format!(
        "wrote {} bytes to {shown} ({what})",
        args.content.len()
    )))
}

/// Writes `content` to a temporary file beside `target`, flushes it to disk and renames it over
/// `target`, so readers see the old file or the new one, never a half-written one. An existing
/// file's permissions are carried over.
fn atomic_write(target: &Path, content: &[u8], permissions: Option<Permissions>) -> io::Result<()> {
    let dir = target
        .parent()
        .ok_or_else(|| io::Error::other("the file has no parent directory"))?;
    let (temp, mut file) = create_temp(dir)?;
    let result = file
        .write_all(content)
        .and_then(|()| match permissions {
            Some(permissions) => file.set_permissions(permissions),
            None => Ok(()),
        })
        .and_then(|()| file.sync_all())
        .and_then(|()| fs::rename(&temp, target));
    if result.is_err() {
        // Best effort: the write already failed, and a leftover temp file is harmless.
        let _ = fs::remove_file(&temp);
    }
    result
}

/// A new, empty temporary file in `dir` with a name no other writer holds.
fn create_temp(dir: &Path) -> io::Result<(PathBuf, File)> {
    for _ in 0..100 {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join(format!(".keel-write-{}-{n}.tmp", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("could not create a temporary file"))
}
