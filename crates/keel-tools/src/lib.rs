//! keel-tools owns keel's built-in tools, each implementing [`keel_core::Tool`]:
//!
//! - [`files`]: `read_file`, `write_file`, `append_file` and `list_dir`, each confined to a
//!   [`Workspace`] root. `write_file` and `append_file` are side effects, never retried or re-run
//!   on resume: appending twice would add the text twice;
//! - [`http`]: `http_get`, one GET request per call, with a timeout, a body size limit and an
//!   optional host allow-list ([`HttpGetConfig`]); it never connects to loopback, private or
//!   other non-public addresses unless `allow_private` is set. Its errors are classified so that keel
//!   retries only what may pass next time (timeouts, network failures, 429, 5xx).
//!
//! - [`memory_files`]: [`FileMemory`], the `memory` tool's notes as `MEMORY.md` and `USER.md`
//!   per user under `$KEEL_HOME/memory`, edited under a file lock;
//! - [`attachments`]: `read_attachment`, the files sent with a message of the conversation;
//! - [`session_search`]: `session_search`, full-text search over the caller's own past
//!   sessions through the store's index;
//! - [`hooks`]: [`CommandHook`], a configured tool hook run as a shell command in the
//!   workspace, bounded in time and output, leaving no process behind;
//! - [`shell`]: `shell`, one command line per call through `sh -c` in the workspace directory,
//!   in its own process group (killed whole on timeout and cancel), without keel's secrets in
//!   its environment, judged first by the command policy ([`ShellPolicy`]). A side effect,
//!   never retried.
//!
//! - [`sandbox`]: [`Sandbox`], the kernel's confinement (bubblewrap) of the commands keel
//!   starts for tools: writes only in the workspace, keel's own files and process out of
//!   sight, nothing left running after the call or after keel;
//!
//! - [`skills`]: `SKILL.md` directories: the ones a message matches go into the system prompt
//!   ([`SkillPrompt`]); `skills_list` and `skill_view` open the others.
//!
//! MCP tool servers are in the `keel-mcp` crate.
//!
//! It depends on no keel crate but `keel-core`, whose `Tool` trait and `ToolRegistry` it serves.
//! It never prints; failures go back to the model as [`keel_core::ToolError`]s.

pub mod attachments;
pub mod files;
pub mod hooks;
pub mod http;
pub mod memory_files;
pub mod project_context;
pub mod sandbox;
mod schema;
pub mod session_search;
pub mod shell;
pub mod skills;
pub mod workspace;

pub use attachments::ReadAttachment;
pub use files::{AppendFile, FILES_MODULE, ListDir, ReadFile, WriteFile, file_tools};
pub use hooks::{CommandHook, DEFAULT_HOOK_TIMEOUT, MAX_HOOK_STDOUT};
pub use http::{HTTP_MODULE, HttpGet, HttpGetConfig, http_tools};
pub use memory_files::FileMemory;
pub use project_context::ProjectContext;
pub use sandbox::{Input, Lifeline, Sandbox, SandboxError, SandboxState};
pub use session_search::{SESSION_SEARCH, SESSIONS_MODULE, SessionSearchTool};
pub use shell::{SHELL_MODULE, Shell, ShellConfig, ShellPolicy, Verdict, shell_tools};
pub use skills::{SkillPrompt, SkillSet, skill_roots, skill_tools};
pub use workspace::{Access, Workspace, WorkspaceError};
