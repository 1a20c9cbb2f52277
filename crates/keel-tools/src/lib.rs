//! keel-tools owns keel's built-in tools: today the file tools (`read_file`, `write_file`,
//! `list_dir`), each confined to a [`Workspace`] root. Shell and HTTP tools and MCP tool
//! servers will join as sibling modules beside [`files`], each implementing
//! [`keel_core::Tool`].
//!
//! It depends on no keel crate but `keel-core`, whose `Tool` trait and `ToolRegistry` it serves.
//! It never prints; failures go back to the model as [`keel_core::ToolError`]s.

pub mod files;
mod schema;
pub mod workspace;

pub use files::{FILES_MODULE, ListDir, ReadFile, WriteFile, file_tools};
pub use workspace::{Access, Workspace, WorkspaceError};
