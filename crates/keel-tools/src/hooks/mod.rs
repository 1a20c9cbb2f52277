//! Tool hooks as shell commands: [`CommandHook`] runs one configured hook (`sh -c COMMAND` in
//! the workspace) for the hook protocol (see [`keel_extensions::tool_hooks`]).
//!
//! The command gets the call as JSON on stdin and answers on stdout. Whatever it does, it is
//! bounded: it is killed — with every process it started — when it runs past its time limit or
//! prints more than [`MAX_HOOK_STDOUT`] bytes, and when keel stops waiting for it. A command
//! that does not read its stdin, or closes it early, still answers. It runs in keel's sandbox
//! ([`Sandbox`]) when there is one, the workspace writable; where there is none, unconfined
//! (a hook is the owner's command, not the model's).

mod process;

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use keel_extensions::tool_hooks::{HookCommand, HookFailure};

use crate::sandbox::Sandbox;

/// How long a hook may run when the configuration does not say.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// The most a hook may print on stdout; more is a failure, and the hook is killed.
pub const MAX_HOOK_STDOUT: usize = 64 * 1024;

/// One hook command: run through `sh -c` in a directory, with a time limit.
#[derive(Clone, Debug)]
pub struct CommandHook {
    command: String,
    dir: PathBuf,
    timeout: Duration,
    sandbox: Sandbox,
}

impl CommandHook {
    /// `command`, run through `sh -c` in `dir` (the workspace), killed after `timeout`, in
    /// the sandbox found on this machine ([`Sandbox::detect`]) or unconfined where there is none.
    pub fn new(command: impl Into<String>, dir: impl Into<PathBuf>, timeout: Duration) -> Self {
        CommandHook {
            command: command.into(),
            dir: dir.into(),
            timeout,
            sandbox: Sandbox::off(),
        }
        .sandbox(Sandbox::detect())
    }

    /// Runs it confined by `sandbox` (where none is available: unconfined), its directory
    /// writable.
    pub fn sandbox(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = sandbox.or_off().writable(self.dir.clone());
        self
    }

    /// The command line.
    pub fn command(&self) -> &str {
        &self.command
    }
}

#[async_trait]
impl HookCommand for CommandHook {
    async fn run(&self, input: &str) -> Result<String, HookFailure> {
        let finished = process::run(
            &self.command,
            &self.dir,
            input.as_bytes(),
            self.timeout,
            &self.sandbox,
        )
        .await
        .map_err(|failure| HookFailure(failure.to_string()))?;
        String::from_utf8(finished.stdout)
            .map_err(|_| HookFailure("it printed something that is not UTF-8".to_string()))
    }
}
