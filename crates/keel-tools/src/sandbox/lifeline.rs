//! The lifeline: a pipe from keel into the sandbox that nothing writes to, the standard input
//! of a guard process there. When keel's end closes — the call is over, or keel died, however —
//! the guard reads the end of its input and kills every process of the sandbox's PID namespace.
//! bubblewrap's `--die-with-parent` leaves a gap while it sets the sandbox up (its first
//! process asks for the signal only afterwards); the guard closes it.
//!
//! The guard needs the command's standard input (`sh` reads no other descriptor by number
//! above 9): only a command whose input is closed gets one.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;

use rustix::pipe::{PipeFlags, pipe_with};

/// keel's end of a command's lifeline. Keep it while the command runs: dropping it kills
/// whatever still runs in the sandbox. Holds nothing for a command without a guard.
#[derive(Debug, Default)]
#[must_use = "dropping the lifeline kills the sandboxed command"]
pub struct Lifeline {
    /// Held only to be closed when dropped.
    _write: Option<OwnedFd>,
}

/// The sandbox's end (the command's standard input), and keel's end.
pub(super) fn pipe() -> io::Result<(OwnedFd, Lifeline)> {
    // Close-on-exec: no other process keel starts inherits either end.
    let (read, write) = pipe_with(PipeFlags::CLOEXEC)?;
    Ok((
        read,
        Lifeline {
            _write: Some(write),
        },
    ))
}

/// The program and arguments that start the guard on the standard input, then run `program`
/// with `args` in its place with its input closed (`/dev/null`). `kill -9 -1` in a PID
/// namespace kills every process of it but its first (bubblewrap, which exits once its command
/// did).
pub(super) fn guarded(program: &OsStr, args: &[&OsStr]) -> Vec<OsString> {
    // An asynchronous list's input is /dev/null unless redirected: the lifeline is moved to
    // descriptor 3 first, for the guard alone.
    let guard = "exec 3<&0 </dev/null; (read -r _ <&3; kill -9 -1) >/dev/null 2>&1 & \
                 exec 3<&-; exec \"$@\"";
    let mut argv: Vec<OsString> = vec![
        "/bin/sh".into(),
        "-c".into(),
        guard.into(),
        "keel-sandbox".into(),
        program.into(),
    ];
    argv.extend(args.iter().map(|arg| arg.to_os_string()));
    argv
}
