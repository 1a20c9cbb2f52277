//! `read_file`: the text of a file, whole or a range of lines.

use std::io::{self, Read};
use std::sync::Arc;

use async_trait::async_trait;
use keel_core::{Reach, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

use rustix::fs::{FileType, Mode, OFlags};

use super::{FILES_MODULE, changed, not_a_regular_file, parse_args, run_blocking};
use crate::schema::parameters_for;
use crate::workspace::{Access, Found, OpenError, Target, Workspace};

/// The largest file `read_file` reads: 10 MiB.
pub const MAX_READ_BYTES: u64 = 10 * 1024 * 1024;

const DESCRIPTION: &str = "Read a UTF-8 text file in the workspace. `path` is relative to the \
workspace root. Returns the file's text; for a long file pass `offset` (the 1-based line to start \
at) and `limit` (how many lines) to read part of it, and the result says which lines are shown. \
Binary files and files over 10 MiB are refused. Use list_dir to see what a directory holds.";

/// The arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadFileArgs {
    /// Path of the file, relative to the workspace root.
    path: String,
    /// Line number to start at, 1-based. Default: 1.
    #[schemars(range(min = 1))]
    offset: Option<usize>,
    /// Maximum number of lines to return. Default: all lines to the end of the file.
    #[schemars(range(min = 1))]
    limit: Option<usize>,
}

/// The `read_file` tool: idempotent, confined to a workspace.
pub struct ReadFile {
    workspace: Arc<Workspace>,
    spec: ToolSpec,
}

impl ReadFile {
    /// A `read_file` tool reading inside `workspace`.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        // Inside the workspace only.
        let mut spec = ToolSpec::new("read_file", DESCRIPTION, parameters_for::<ReadFileArgs>())
            .idempotent()
            .reach(Reach::Conversation);
        spec.module = Some(FILES_MODULE.to_string());
        ReadFile { workspace, spec }
    }
}

#[async_trait]
impl Tool for ReadFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        args: serde_json::Value,
        _: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: ReadFileArgs = parse_args("read_file", args)?;
        let workspace = self.workspace.clone();
        run_blocking(move || read(&workspace, &args)).await
    }
}

fn read(workspace: &Workspace, args: &ReadFileArgs) -> Result<ToolOutput, ToolError> {
    let target = workspace.locate(&args.path, Access::Read)?;
    let shown = target.shown().to_string();
    let bytes = read_bytes(workspace, &target)?;
    if bytes.contains(&0) {
        return Err(binary(&shown));
    }
    let text = String::from_utf8(bytes).map_err(|_| binary(&shown))?;
    if text.is_empty() {
        return Ok(ToolOutput::text(format!("{shown} is empty (0 bytes)")));
    }
    if args.offset.is_none() && args.limit.is_none() {
        return Ok(ToolOutput::text(text));
    }
    let start = args.offset.unwrap_or(1).max(1);
    line_range(&text, &shown, start, args.limit).map(ToolOutput::text)
}

/// The whole file, after checking it is a regular file within the size limit and not another
/// name (a hard link) of one of keel's own files.
fn read_bytes(workspace: &Workspace, target: &Target) -> Result<Vec<u8>, ToolError> {
    let shown = target.shown();
    let not_regular = |file_type| match file_type {
        FileType::Directory => ToolError::failed(format!(
            "{shown} is a directory, not a file: use list_dir to see its entries"
        )),
        other => not_a_regular_file(shown, other, "read_file only reads"),
    };
    match target.found() {
        Found::Missing => return Err(ToolError::failed(format!("no such file: {shown}"))),
        Found::Directory(_) => return Err(not_regular(FileType::Directory)),
        // Checked before opening, so that opening a device has no effect.
        Found::Other(file_type) if *file_type != FileType::RegularFile => {
            return Err(not_regular(*file_type));
        }
        Found::Other(_) => {}
    }
    let file = target
        .open_file(OFlags::RDONLY, Mode::empty())
        .map_err(|e| match e {
            OpenError::NotRegular(file_type) => not_regular(file_type),
            OpenError::Changed => changed(shown),
            OpenError::Io(e) if e.kind() == io::ErrorKind::NotFound => {
                ToolError::failed(format!("no such file: {shown}"))
            }
            OpenError::Io(e) => ToolError::failed(format!("cannot read {shown}: {e}")),
        })?;
    workspace.check_other_names(&file, shown, "read")?;
    let io_error = |e: io::Error| ToolError::failed(format!("cannot read {shown}: {e}"));
    let size = file.metadata().map_err(io_error)?.len();
    if size > MAX_READ_BYTES {
        return Err(too_large(shown, size));
    }
    let mut bytes = Vec::new();
    // Read one byte past the limit so a file that grew since the check is still caught.
    file.take(MAX_READ_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    if bytes.len() as u64 > MAX_READ_BYTES {
        return Err(too_large(shown, bytes.len() as u64));
    }
    Ok(bytes)
}

/// Lines `start..start+limit` of `text` (1-based), with a header naming them and a note on how
/// to continue when lines remain.
fn line_range(
    text: &str,
    shown: &str,
    start: usize,
    limit: Option<usize>,
) -> Result<String, ToolError> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let total = lines.len();
    if start > total {
        return Err(ToolError::invalid_arguments(format!(
            "offset {start} is past the end of {shown}, which has {total} lines"
        )));
    }
    let end = limit.map_or(total, |n| start.saturating_add(n.max(1) - 1).min(total));
    let mut out = format!("[{shown}: lines {start}-{end} of {total}]\n");
    out.extend(lines[start - 1..end].iter().copied());
    if end < total {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(
            "[{} more lines; continue with offset={}]",
            total - end,
            end + 1
        ));
    }
    Ok(out)
}

fn binary(shown: &str) -> ToolError {
    ToolError::failed(format!(
        "{shown} is a binary file (not UTF-8 text); read_file only reads text files"
    ))
}

fn too_large(shown: &str, size: u64) -> ToolError {
    ToolError::failed(format!(
        "{shown} is {size} bytes ({:.1} MiB); read_file only reads files up to {} MiB",
        size as f64 / (1024.0 * 1024.0),
        MAX_READ_BYTES / (1024 * 1024)
    ))
}
