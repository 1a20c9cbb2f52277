//! keel-mcp makes MCP servers tool sources for keel: each configured server (a child process
//! on stdio, or a streamable HTTP endpoint) is started and kept alive, and its tools join the
//! agent's registry as `SERVER__tool`, with their JSON schemas and their annotations mapped to
//! keel's flags. A server that dies is restarted with backoff; calls meanwhile fail with a
//! clear tool error. `notifications/tools/list_changed` refreshes the list, which the next run
//! offers.
//!
//! It depends on keel-core only (for the `Tool` and `ToolSource` traits); it never prints.
//! With the `test-server` feature it also holds a small MCP server for tests.

mod capped;
mod child;
pub mod config;
mod connect;
mod http_client;
mod server;
mod source;
#[cfg(feature = "test-server")]
pub mod test_server;
mod tool;

pub use config::{DEFAULT_CALL_TIMEOUT, McpConfigError, McpServerConfig, McpTransport};
pub use server::{RestartPolicy, STARTUP_TIMEOUT, ServerState};
pub use source::{McpServers, ServerStatus};
