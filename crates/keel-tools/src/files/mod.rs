//! File tools: read, write, append to and list files inside a [`Workspace`].

mod append_file;
mod list_dir;
mod read_file;
mod write_file;

use std::sync::Arc;

use keel_core::{Tool, ToolError};
use rustix::fs::FileType;

use crate::schema::parse_args;
use crate::workspace::{Workspace, describe_type};

pub use append_file::AppendFile;
pub use list_dir::{ListDir, MAX_LIST_ENTRIES};
pub use read_file::{MAX_READ_BYTES, ReadFile};
pub use write_file::WriteFile;

/// The module name file tools declare in their specs, for persona filtering.
pub const FILES_MODULE: &str = "files";

/// The four file tools (`read_file`, `write_file`, `append_file`, `list_dir`), all confined to
/// `workspace`. `write_file` and `append_file` are side effects (not idempotent); the other two
/// are idempotent.
pub fn file_tools(workspace: Arc<Workspace>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadFile::new(workspace.clone())),
        Arc::new(WriteFile::new(workspace.clone())),
        Arc::new(AppendFile::new(workspace.clone())),
        Arc::new(ListDir::new(workspace)),
    ]
}

/// Runs filesystem work on tokio's blocking pool so the async runtime is never blocked.
async fn run_blocking<T, F>(work: F) -> Result<T, ToolError>
where
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolError::failed(format!("the file operation did not finish: {e}")))?
}

/// The refusal for a FIFO, socket or device: `what` says what the tool works on ("read_file
/// only reads").
fn not_a_regular_file(shown: &str, file_type: FileType, what: &str) -> ToolError {
    ToolError::failed(format!(
        "{shown} is {}, not a regular file; {what} regular files",
        describe_type(file_type)
    ))
}

/// The failure when an entry turned into a symlink between finding it and opening it.
fn changed(shown: &str) -> ToolError {
    ToolError::failed(format!(
        "{shown} changed while being opened (it became a symlink); something else is changing \
         the workspace: look again before retrying"
    ))
}
