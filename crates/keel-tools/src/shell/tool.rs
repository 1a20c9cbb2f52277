//! The `shell` tool itself: arguments, the policy check, and the result for the model.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use keel_core::{ApprovalNeed, Permission, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

use super::capture::split_budget;
use super::process::{Ending, Finished, Launch, StartError, run};
use super::{SHELL_MODULE, ShellConfig, Verdict};
use crate::sandbox::{Sandbox, SandboxError, SandboxState};
use crate::schema::{parameters_for, parse_args};
use crate::workspace::Workspace;

/// The longest command line accepted, in bytes.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;

const DESCRIPTION: &str = "Run a shell command line (`sh -c`) in the workspace directory and get \
back its exit code, standard output and standard error. Standard input is closed; nothing the \
command starts in the background outlives it. Long outputs keep their beginning and end. Some \
commands are refused or need approval (deleting broad paths, sudo, force pushes, writing system \
files); the result says why.";

/// Added to the description when commands run in the sandbox.
const SANDBOXED: &str = " The command runs in a sandbox: only the workspace and a private /tmp \
are writable, and keel's own files are out of sight.";

/// The arguments of `shell`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ShellArgs {
    /// The command line to run, as for `sh -c`.
    command: String,
    /// The most seconds it may run (fractions allowed); capped by the configured maximum.
    /// Default: the configured timeout.
    timeout_secs: Option<f64>,
}

/// The `shell` tool: a side effect (not idempotent, never retried), for `admin` callers and
/// above — a shell reaches everything keel's user can, far past the workspace.
pub struct Shell {
    workspace: Arc<Workspace>,
    config: ShellConfig,
    /// The configured sandbox, with the workspace writable.
    sandbox: Sandbox,
    spec: ToolSpec,
}

impl Shell {
    /// A `shell` tool running commands in `workspace`'s root.
    pub fn new(workspace: Arc<Workspace>, mut config: ShellConfig) -> Self {
        // The policy knows the workspace: a `cd` to an absolute path inside it stays inside,
        // and symlinks already on disk along a path are followed.
        config.policy = config.policy.clone().in_workspace(workspace.root());
        let description = match config.sandbox.state() {
            SandboxState::Bwrap(_) => format!("{DESCRIPTION}{SANDBOXED}"),
            SandboxState::Off | SandboxState::Unavailable => DESCRIPTION.to_string(),
        };
        let mut spec = ToolSpec::new("shell", description, parameters_for::<ShellArgs>());
        spec.module = Some(SHELL_MODULE.to_string());
        spec.required_permission = Permission::Admin;
        let sandbox = config.sandbox.clone().writable(workspace.root());
        Shell {
            workspace,
            config,
            sandbox,
            spec,
        }
    }

    /// The timeout for a call asking for `requested` seconds.
    fn timeout(&self, requested: Option<f64>) -> Result<Duration, ToolError> {
        let Some(secs) = requested else {
            return Ok(self.config.timeout.min(self.config.max_timeout));
        };
        if !secs.is_finite() || secs <= 0.0 {
            return Err(ToolError::invalid_arguments(format!(
                "timeout_secs must be a positive number of seconds, not {secs}"
            )));
        }
        let max = self.config.max_timeout;
        Ok(Duration::try_from_secs_f64(secs).map_or(max, |t| t.min(max)))
    }
}

#[async_trait]
impl Tool for Shell {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// The policy's `NeedsApproval`: the pattern an `approve_session` allows is the command
    /// line with its whitespace collapsed (the same command, however spaced).
    fn approval(&self, args: &serde_json::Value) -> Option<ApprovalNeed> {
        let command = args.get("command")?.as_str()?;
        match self.config.policy.classify(command) {
            Verdict::NeedsApproval { reason } => Some(ApprovalNeed {
                reason,
                pattern: command.split_whitespace().collect::<Vec<_>>().join(" "),
            }),
            Verdict::Allow | Verdict::Refuse { .. } => None,
        }
    }

    async fn call(
        &self,
        args: serde_json::Value,
        // A cancelled run lets the command finish: it is a side effect in flight.
        _ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: ShellArgs = parse_args("shell", args)?;
        validate(&args.command)?;
        let timeout = self.timeout(args.timeout_secs)?;
        // A command that needs approval reaches here only once the loop got a person's yes
        // (see `approval` below).
        if let Verdict::Refuse { reason } = self.config.policy.classify(&args.command) {
            return Err(ToolError::denied(format!(
                "refused by keel's command policy: {reason}. The command was not run."
            )));
        }
        let launch = Launch {
            program: &self.config.program,
            line: &args.command,
            dir: self.workspace.root(),
            env: self.config.parent_env.for_command(&self.config.secrets),
            timeout,
            keep_bytes: self.config.max_output_chars.saturating_mul(4).max(64),
            sandbox: &self.sandbox,
        };
        let finished = run(launch).await.map_err(|e| match e {
            StartError::Sandbox(SandboxError::Unavailable) => ToolError::denied(format!(
                "`shell` is refused: {}. The command was not run.",
                SandboxError::Unavailable
            )),
            e => ToolError::failed(format!(
                "the command could not be started: `{}` failed to run: {e}",
                self.config.program
            )),
        })?;
        let report = self.report(&finished);
        match finished.ending {
            Ending::Exited(_) => Ok(ToolOutput::text(report)),
            Ending::TimedOut => Err(ToolError::failed(format!(
                "the command timed out after {} and was killed with everything it started.\n{report}",
                seconds(timeout)
            ))),
        }
    }
}

impl Shell {
    /// The result for the model:
    ///
    /// ```text
    /// exit code: 0
    /// --- stdout ---
    /// …
    /// --- stderr ---
    /// …
    /// ```
    ///
    /// `exit code: killed by signal N` when a signal ended it and `exit code: none` when keel
    /// killed it; an empty stream shows `(empty)`.
    fn report(&self, finished: &Finished) -> String {
        let status = match &finished.ending {
            Ending::Exited(status) => match (status.code(), signal_of(status)) {
                (Some(code), _) => code.to_string(),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                (None, None) => "unknown".to_string(),
            },
            Ending::TimedOut => "none (killed by keel)".to_string(),
        };
        let (out_budget, err_budget) = split_budget(
            finished.stdout.chars(),
            finished.stderr.chars(),
            self.config.max_output_chars,
        );
        let stream = |text: String| {
            if text.is_empty() {
                "(empty)\n".to_string()
            } else if text.ends_with('\n') {
                text
            } else {
                format!("{text}\n")
            }
        };
        let mut report = format!(
            "exit code: {status}\n--- stdout ---\n{}--- stderr ---\n{}",
            stream(finished.stdout.render(out_budget)),
            stream(finished.stderr.render(err_budget)),
        );
        if finished.incomplete {
            report.push_str(
                "(output may be incomplete: a process that left the command's process group kept \
                 it open)\n",
            );
        }
        report
    }
}

/// Refuses command lines that cannot be meant: empty, with NUL bytes, or absurdly long.
fn validate(command: &str) -> Result<(), ToolError> {
    if command.trim().is_empty() {
        return Err(ToolError::invalid_arguments(
            "`command` is empty: give the command line to run",
        ));
    }
    if command.contains('\0') {
        return Err(ToolError::invalid_arguments(
            "`command` contains a NUL byte, which no shell command can hold",
        ));
    }
    if command.len() > MAX_COMMAND_BYTES {
        return Err(ToolError::invalid_arguments(format!(
            "`command` is {} bytes long; the most is {MAX_COMMAND_BYTES}: write long scripts to \
             a file and run that",
            command.len()
        )));
    }
    Ok(())
}

fn signal_of(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

fn seconds(duration: Duration) -> String {
    format!("{} s", duration.as_secs_f64())
}
