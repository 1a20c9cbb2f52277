//! Running one command line in its own process group (in the sandbox, when there is one),
//! killed whole when it ends.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

use super::capture::Capture;
use crate::sandbox::{Input, Sandbox, SandboxError};

/// How long the output pipes may stay open once the process group is dead: only a process
/// that left the group (`setsid`) can hold them open longer, and its output is not waited for.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// What to run.
pub(crate) struct Launch<'a> {
    /// The shell.
    pub program: &'a str,
    /// The line given to `-c`.
    pub line: &'a str,
    /// The working directory.
    pub dir: &'a Path,
    /// The whole environment.
    pub env: Vec<(OsString, OsString)>,
    /// The longest it may run.
    pub timeout: Duration,
    /// Bytes kept at each end of each output.
    pub keep_bytes: usize,
    /// How it is confined.
    pub sandbox: &'a Sandbox,
}

/// Why a command did not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// The sandbox cannot run it.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// Starting the process failed.
    #[error(transparent)]
    Spawn(#[from] io::Error),
}

/// How a command ended.
#[derive(Debug)]
pub(crate) enum Ending {
    /// It exited (or was killed by a signal from elsewhere).
    Exited(ExitStatus),
    /// Its timeout passed; the group was killed.
    TimedOut,
}

/// A finished command.
#[derive(Debug)]
pub(crate) struct Finished {
    /// How it ended.
    pub ending: Ending,
    /// Its standard output.
    pub stdout: Capture,
    /// Its standard error.
    pub stderr: Capture,
    /// A process that left the group still held an output open when keel stopped reading.
    pub incomplete: bool,
}

/// Runs `launch.line`, killing its whole process group (in the sandbox, everything it started)
/// when it exits or times out. A cancelled run does not stop it: a side effect in flight
/// finishes (dropping the future, as the run's hard time limit does, kills it). An error means
/// it could not be started.
pub(crate) async fn run(launch: Launch<'_>) -> Result<Finished, StartError> {
    // Kept to the end: dropping it kills what still runs in the sandbox.
    let (mut command, _lifeline) = launch.sandbox.command(
        OsStr::new(launch.program),
        &[OsStr::new("-c"), OsStr::new(launch.line)],
        launch.dir,
        launch.env,
        // Closed: the sandbox keeps it for the lifeline's guard.
        Input::Closed,
    )?;
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    // The child leads its own group, whose id is its pid.
    let mut group = ProcessGroup(
        child
            .id()
            .and_then(|id| Pid::from_raw(i32::try_from(id).ok()?)),
    );
    let stdout = Arc::new(Mutex::new(Capture::new(launch.keep_bytes)));
    let stderr = Arc::new(Mutex::new(Capture::new(launch.keep_bytes)));
    let readers = [
        child
            .stdout
            .take()
            .map(|pipe| read_into(pipe, stdout.clone())),
        child
            .stderr
            .take()
            .map(|pipe| read_into(pipe, stderr.clone())),
    ];
    let ending = tokio::select! {
        status = child.wait() => Ending::Exited(status?),
        () = tokio::time::sleep(launch.timeout) => Ending::TimedOut,
    };
    // Whatever happened, nothing the command started outlives it.
    group.kill();
    if matches!(ending, Ending::TimedOut) {
        // Reap the leader; the killed group's other members are reparented and reaped by init.
        child.wait().await?;
    }
    let mut incomplete = false;
    for reader in readers.into_iter().flatten() {
        let abort = reader.abort_handle();
        if tokio::time::timeout(DRAIN_GRACE, reader).await.is_err() {
            abort.abort();
            incomplete = true;
        }
    }
    Ok(Finished {
        ending,
        stdout: take(&stdout, launch.keep_bytes),
        stderr: take(&stderr, launch.keep_bytes),
        incomplete,
    })
}

/// Reads a pipe to its end into `capture`.
fn read_into(
    mut pipe: impl AsyncRead + Unpin + Send + 'static,
    capture: Arc<Mutex<Capture>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 8192];
        // A read error ends the capture like the end of the output does.
        while let Ok(n) = pipe.read(&mut buffer).await {
            if n == 0 {
                break;
            }
            capture
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(&buffer[..n]);
        }
    })
}

/// The capture behind `shared`, leaving an empty one (a reader aborted mid-way may still hold
/// its clone).
fn take(shared: &Mutex<Capture>, keep: usize) -> Capture {
    std::mem::replace(
        &mut *shared.lock().unwrap_or_else(PoisonError::into_inner),
        Capture::new(keep),
    )
}

/// A command's process group, killed whole when dropped too: a call abandoned mid-way (its
/// future dropped) leaves nothing behind.
struct ProcessGroup(Option<Pid>);

impl ProcessGroup {
    /// Kills the group, once: afterwards its id may name another group.
    fn kill(&mut self) {
        if let Some(pid) = self.0.take() {
            // ESRCH (the group is already gone) is the usual, harmless answer.
            let _ = kill_process_group(pid, Signal::KILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}
