//! `list_dir`: the entries of a directory.

use std::fs::{self, DirEntry};
use std::io;
use std::sync::Arc;

use async_trait::async_trait;
use keel_core::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{FILES_MODULE, parse_args, run_blocking};
use crate::schema::parameters_for;
use crate::workspace::{Access, Workspace};

/// The most entries one `list_dir` call shows; the rest are counted in a note.
pub const MAX_LIST_ENTRIES: usize = 1000;

const DESCRIPTION: &str = "List a directory in the workspace. `path` is relative to the \
workspace root and defaults to the root itself. Entries are sorted by name, one per line: \
directories end with `/`, files show their size in bytes, symlinks show their target. Very large \
directories are cut at 1000 entries with a note of how many were left out.";

/// The arguments of `list_dir`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListDirArgs {
    /// Directory to list, relative to the workspace root. Default: "." (the root).
    #[serde(default = "workspace_root")]
    path: String,
}

fn workspace_root() -> String {
    ".".to_string()
}

/// The `list_dir` tool: idempotent, confined to a workspace.
pub struct ListDir {
    workspace: Arc<Workspace>,
    spec: ToolSpec,
}

impl ListDir {
    /// A `list_dir` tool listing inside `workspace`.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        let mut spec =
            ToolSpec::new("list_dir", DESCRIPTION, parameters_for::<ListDirArgs>()).idempotent();
        spec.module = Some(FILES_MODULE.to_string());
        ListDir { workspace, spec }
    }
}

#[async_trait]
impl Tool for ListDir {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        args: serde_json::Value,
        _: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: ListDirArgs = parse_args("list_dir", args)?;
        let workspace = self.workspace.clone();
        run_blocking(move || list(&workspace, &args.path)).await
    }
}

fn list(workspace: &Workspace, path: &str) -> Result<ToolOutput, ToolError> {
    let real = workspace.resolve(path, Access::Read)?;
    let shown = workspace.display(path, &real);
    let io_error = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => {
            ToolError::failed(format!("no such directory: {shown}"))
        }
        _ => ToolError::failed(format!("cannot list {shown}: {e}")),
    };
    let meta = fs::metadata(&real).map_err(io_error)?;
    if !meta.is_dir() {
        return Err(ToolError::failed(format!(
            "{shown} is a file, not a directory: use read_file to read it"
        )));
    }
    let mut entries = Vec::new();
    for entry in fs::read_dir(&real).map_err(io_error)? {
        let entry = entry.map_err(io_error)?;
        entries.push((entry.file_name().to_string_lossy().into_owned(), entry));
    }
    if entries.is_empty() {
        return Ok(ToolOutput::text(format!("{shown}/ is empty")));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let total = entries.len();
    let noun = if total == 1 { "entry" } else { "entries" };
    let mut out = format!("{shown}/ ({total} {noun})");
    for (name, entry) in entries.iter().take(MAX_LIST_ENTRIES) {
        out.push('\n');
        out.push_str(&describe(workspace, name, entry));
    }
    if total > MAX_LIST_ENTRIES {
        out.push_str(&format!(
            "\n[{} more entries not shown: listings stop at {MAX_LIST_ENTRIES}]",
            total - MAX_LIST_ENTRIES
        ));
    }
    Ok(ToolOutput::text(out))
}

/// One line for one entry: `name/` for a directory, `name  (N bytes)` for a file, and for a
/// symlink its target and what it leads to.
fn describe(workspace: &Workspace, name: &str, entry: &DirEntry) -> String {
    let Ok(file_type) = entry.file_type() else {
        return format!("{name}  (unreadable)");
    };
    if file_type.is_dir() {
        return format!("{name}/");
    }
    if file_type.is_file() {
        return match entry.metadata() {
            Ok(meta) => format!("{name}  ({} bytes)", meta.len()),
            Err(_) => format!("{name}  (unreadable)"),
        };
    }
    if !file_type.is_symlink() {
        return format!("{name}  (special file)");
    }
    let path = entry.path();
    let target = fs::read_link(&path)
        .map(|t| t.display().to_string())
        .unwrap_or_else(|_| "?".to_string());
    let leads_to = match fs::canonicalize(&path) {
        Err(_) => "broken symlink".to_string(),
        Ok(real) if !real.starts_with(workspace.root()) => {
            "symlink leading outside the workspace; not accessible".to_string()
        }
        Ok(real) if real.is_dir() => "symlink to a directory".to_string(),
        Ok(real) => match fs::metadata(&real) {
            Ok(meta) => format!("symlink to a file, {} bytes", meta.len()),
            Err(_) => "symlink".to_string(),
        },
    };
    format!("{name} -> {target}  ({leads_to})")
}
