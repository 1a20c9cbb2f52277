//! The `shell` tool: runs a command line with `sh -c` in the workspace directory, judged first
//! by keel's command policy ([`ShellPolicy`]).
//!
//! A command runs in keel's sandbox ([`Sandbox`]: only the workspace and a private `/tmp`
//! writable, keel's files and process out of sight), in its own process group with standard
//! input closed (`/dev/null`), in an environment without keel's secrets ([`SecretFilter`]), for
//! at most its timeout. On timeout and when it exits, everything it started is killed, so
//! nothing it started in the background outlives the call; a cancelled run lets it finish (a
//! side effect in flight), and keel's exit kills it. Where no sandbox is available the tool
//! refuses to run, unless the sandbox was turned off ([`Sandbox::off`]). Its exit code,
//! standard output and standard error go back to the model as text; each output keeps its head
//! and tail when the two together exceed the cap.

mod capture;
mod environment;
pub mod policy;
mod process;
mod tool;

use std::sync::Arc;
use std::time::Duration;

use keel_core::Tool;

pub use environment::{ParentEnv, SecretFilter};
pub use policy::{CommandPattern, PatternError, PolicyError, ShellPolicy, Verdict};
pub use tool::{MAX_COMMAND_BYTES, Shell};

use crate::sandbox::Sandbox;
use crate::workspace::Workspace;

/// The module name the shell tool declares in its spec, for persona filtering.
pub const SHELL_MODULE: &str = "shell";

/// How the `shell` tool behaves.
#[derive(Clone, Debug)]
pub struct ShellConfig {
    /// The shell that runs the command line, as `PROGRAM -c LINE`. Default: `sh`.
    pub program: String,
    /// How long a command may run when the call does not say. Default: 120 s.
    pub timeout: Duration,
    /// The longest a call may ask for with `timeout_secs`. Default: 600 s.
    pub max_timeout: Duration,
    /// The most characters of output shown to the model, standard output and standard error
    /// together; more is cut in the middle, keeping each one's head and tail. Default: 16000.
    pub max_output_chars: usize,
    /// Which environment variables the command must not see.
    pub secrets: SecretFilter,
    /// Where the command's environment comes from before the secrets are taken out.
    pub parent_env: ParentEnv,
    /// The command policy.
    pub policy: ShellPolicy,
    /// How commands are confined; the tool adds its workspace as writable. Default:
    /// [`Sandbox::detect`].
    pub sandbox: Sandbox,
}

impl Default for ShellConfig {
    fn default() -> Self {
        ShellConfig {
            program: "sh".to_string(),
            timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            max_output_chars: 16_000,
            secrets: SecretFilter::default(),
            parent_env: ParentEnv::Process,
            policy: ShellPolicy::default(),
            sandbox: Sandbox::detect(),
        }
    }
}

/// The shell tools (today only `shell`), running in `workspace`'s root.
pub fn shell_tools(workspace: Arc<Workspace>, config: ShellConfig) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(Shell::new(workspace, config))]
}
