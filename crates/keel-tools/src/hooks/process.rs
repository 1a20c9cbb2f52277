//! Running one hook process: in the sandbox when there is one, its own process group (so
//! everything it starts can be killed at once), stdin written while stdout and stderr are
//! read, stdout capped, a time limit, and no process left behind — also when the caller stops
//! waiting.

use std::ffi::OsStr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::MAX_HOOK_STDOUT;
use crate::sandbox::{Input, Sandbox, SandboxError};

/// How much of stderr is kept to explain a failure.
const MAX_STDERR: usize = 4096;

/// How much of stderr a failure message quotes.
const STDERR_SHOWN: usize = 300;

/// How long to wait for a killed hook to be reaped.
const REAP_WAIT: Duration = Duration::from_secs(1);

/// A hook that exited 0.
#[derive(Debug)]
pub(super) struct Finished {
    /// What it printed on stdout (at most [`MAX_HOOK_STDOUT`] bytes).
    pub stdout: Vec<u8>,
}

/// Why a hook gave no answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum Failure {
    /// `sh` could not be started.
    #[error("it could not be started: {0}")]
    Spawn(std::io::Error),
    /// The sandbox cannot run it.
    #[error("it could not be started: {0}")]
    Sandbox(SandboxError),
    /// It ran past its time limit and was killed.
    #[error("it did not finish within {0:?} and was killed")]
    TimedOut(Duration),
    /// It printed more than [`MAX_HOOK_STDOUT`] bytes and was killed.
    #[error("it printed more than {MAX_HOOK_STDOUT} bytes on stdout and was killed")]
    TooMuchOutput,
    /// It exited with an error, or a signal ended it.
    #[error("it {}{stderr}", ended(.status))]
    Exited {
        /// How it ended.
        status: ExitStatus,
        /// The start of its stderr, as ` (stderr: ...)`, or empty.
        stderr: String,
    },
    /// Waiting for it failed.
    #[error("keel could not wait for it: {0}")]
    Wait(std::io::Error),
}

/// Runs `command` through `sh -c` in `dir` with `input` on its stdin, for at most `timeout`,
/// confined by `sandbox`, in keel's environment.
pub(super) async fn run(
    command: &str,
    dir: &Path,
    input: &[u8],
    timeout: Duration,
    sandbox: &Sandbox,
) -> Result<Finished, Failure> {
    // The lifeline is kept to the end: dropping it kills what still runs in the sandbox.
    let (mut command, _lifeline) = sandbox
        .command(
            OsStr::new("sh"),
            &[OsStr::new("-c"), OsStr::new(command)],
            dir,
            std::env::vars_os().collect(),
            Input::Piped,
        )
        .map_err(Failure::Sandbox)?;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, whose id is its pid: killing the group kills whatever it started.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(Failure::Spawn)?;
    let group = Group(child.id().and_then(|id| Pid::from_raw(id as i32)));
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let work = async {
        let write = async {
            // A hook may ignore its stdin or close it early: a broken pipe is no failure.
            if let Some(mut stdin) = stdin {
                let _ = stdin.write_all(input).await;
                let _ = stdin.shutdown().await;
            }
        };
        let read_stdout = async {
            let read = read_capped(stdout, MAX_HOOK_STDOUT).await;
            if read.overflowed {
                group.kill();
            }
            read
        };
        let wait = async {
            let status = child.wait().await;
            // Whatever it left running would hold its pipes open: it goes with it.
            group.kill();
            status
        };
        tokio::join!(write, read_stdout, read_capped(stderr, MAX_STDERR), wait)
    };
    let outcome = tokio::time::timeout(timeout, work).await;
    let Ok(((), stdout, stderr, status)) = outcome else {
        group.kill();
        let _ = tokio::time::timeout(REAP_WAIT, child.wait()).await;
        return Err(Failure::TimedOut(timeout));
    };
    if stdout.overflowed {
        return Err(Failure::TooMuchOutput);
    }
    let status = status.map_err(Failure::Wait)?;
    if !status.success() {
        return Err(Failure::Exited {
            status,
            stderr: quote_stderr(&stderr.bytes),
        });
    }
    Ok(Finished {
        stdout: stdout.bytes,
    })
}

/// A hook's process group; killed (again) when dropped, so a hook the caller stops waiting for
/// leaves nothing behind.
struct Group(Option<Pid>);

impl Group {
    /// Kills every process of the group; one already gone is no error.
    fn kill(&self) {
        if let Some(pid) = self.0 {
            let _ = kill_process_group(pid, Signal::KILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What was read from a pipe.
struct Read {
    bytes: Vec<u8>,
    /// More than the cap was offered; reading stopped there.
    overflowed: bool,
}

/// Reads `pipe` to its end, keeping at most `cap` bytes; stops at the first byte past it.
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>, cap: usize) -> Read {
    let mut bytes = Vec::new();
    let Some(pipe) = pipe else {
        return Read {
            bytes,
            overflowed: false,
        };
    };
    // One byte more than the cap tells "exactly the cap" from "too much".
    let mut limited = pipe.take(cap as u64 + 1);
    let _ = limited.read_to_end(&mut bytes).await;
    let overflowed = bytes.len() > cap;
    bytes.truncate(cap);
    Read { bytes, overflowed }
}

/// How a process that did not succeed ended: `exited with status 1`, `was killed by signal 9`.
fn ended(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => format!("ended with {status}"),
    }
}

/// ` (stderr: ...)` with the start of `stderr`, or nothing when it is empty.
fn quote_stderr(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    let shown: String = text.chars().take(STDERR_SHOWN).collect();
    let more = if shown.len() < text.len() { "…" } else { "" };
    format!(" (stderr: {shown}{more})")
}
