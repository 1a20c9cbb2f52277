//! `list_dir`: the entries of a directory.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use keel_core::{Reach, Tool, ToolContext, ToolError, ToolErrorKind, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

use rustix::fs::{AtFlags, Dir, FileType};

use super::{FILES_MODULE, parse_args, run_blocking};
use crate::schema::parameters_for;
use crate::workspace::{Access, Found, Workspace, describe_type};

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
        // Inside the workspace only.
        let mut spec = ToolSpec::new("list_dir", DESCRIPTION, parameters_for::<ListDirArgs>())
            .idempotent()
            .reach(Reach::Conversation);
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
    let target = workspace.locate(path, Access::Read)?;
    let shown = target.shown();
    let dir = match target.found() {
        Found::Directory(dir) => dir,
        Found::Missing => return Err(ToolError::failed(format!("no such directory: {shown}"))),
        Found::Other(FileType::RegularFile) => {
            return Err(ToolError::failed(format!(
                "{shown} is a file, not a directory: use read_file to read it"
            )));
        }
        Found::Other(file_type) => {
            return Err(ToolError::failed(format!(
                "{shown} is {}, not a directory",
                describe_type(*file_type)
            )));
        }
    };
    let io_error = |e: rustix::io::Errno| ToolError::failed(format!("cannot list {shown}: {e}"));
    let mut names = Vec::new();
    for entry in Dir::read_from(dir).map_err(io_error)? {
        let name = OsStr::from_bytes(entry.map_err(io_error)?.file_name().to_bytes()).to_owned();
        if name != "." && name != ".." {
            names.push(name);
        }
    }
    if names.is_empty() {
        return Ok(ToolOutput::text(format!("{shown}/ is empty")));
    }
    names.sort();
    let total = names.len();
    let noun = if total == 1 { "entry" } else { "entries" };
    let mut out = format!("{shown}/ ({total} {noun})");
    for name in names.iter().take(MAX_LIST_ENTRIES) {
        out.push('\n');
        out.push_str(&describe(workspace, dir, shown, name));
    }
    if total > MAX_LIST_ENTRIES {
        out.push_str(&format!(
            "\n[{} more entries not shown: listings stop at {MAX_LIST_ENTRIES}]",
            total - MAX_LIST_ENTRIES
        ));
    }
    Ok(ToolOutput::text(out))
}

/// One line for the entry `name` of `dir` (shown as `shown`): `name/` for a directory,
/// `name  (N bytes)` for a file, and for a symlink its target and what it leads to.
fn describe(workspace: &Workspace, dir: &OwnedFd, shown: &str, name: &OsString) -> String {
    let display = name.to_string_lossy();
    if workspace.is_protected(dir, name) {
        return format!("{display}  (keel's own files; not accessible)");
    }
    let Ok(stat) = rustix::fs::statat(dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) else {
        return format!("{display}  (unreadable)");
    };
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Directory => return format!("{display}/"),
        FileType::RegularFile => return format!("{display}  ({} bytes)", stat.st_size),
        FileType::Symlink => {}
        _ => return format!("{display}  (special file)"),
    }
    let target = rustix::fs::readlinkat(dir, name.as_os_str(), Vec::new())
        .map(|t| String::from_utf8_lossy(t.as_bytes()).into_owned())
        .unwrap_or_else(|_| "?".to_string());
    let path = if shown == "." {
        PathBuf::from(name)
    } else {
        Path::new(shown).join(name)
    };
    let leads_to = match path.to_str().map(|p| workspace.locate(p, Access::Read)) {
        Some(Err(e)) if e.kind == ToolErrorKind::Denied => {
            "symlink leading outside the workspace; not accessible".to_string()
        }
        Some(Ok(found)) => match found.found() {
            Found::Directory(_) => "symlink to a directory".to_string(),
            Found::Other(FileType::RegularFile) => {
                match rustix::fs::statat(found.dir(), found.name(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) => format!("symlink to a file, {} bytes", stat.st_size),
                    Err(_) => "symlink".to_string(),
                }
            }
            Found::Other(file_type) => format!("symlink to {}", describe_type(*file_type)),
            Found::Missing => "broken symlink".to_string(),
        },
        _ => "broken symlink".to_string(),
    };
    format!("{display} -> {target}  ({leads_to})")
}
