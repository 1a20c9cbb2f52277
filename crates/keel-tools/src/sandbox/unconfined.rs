//! A command run without the sandbox still dies with keel: the kernel sends it `SIGKILL` when
//! the thread that started it ends (keel's process dying, however it dies). bubblewrap gets
//! the same from its first instruction on (it asks for it itself only later). What an
//! unconfined command started itself is not covered: the callers kill its process group when the call ends, but a
//! process that left the group, or that outlives a keel killed with `SIGKILL`, is out of
//! reach — only the sandbox's PID namespace holds those.

/// Has the command's first process killed when keel dies.
#[cfg(target_os = "linux")]
pub(super) fn die_with_keel(command: &mut tokio::process::Command) {
    use rustix::process::{Signal, getpid, getppid, set_parent_process_death_signal};
    let keel = getpid();
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed; it makes two system calls (prctl, getppid) and
    // allocates nothing.
    unsafe {
        command.pre_exec(move || {
            set_parent_process_death_signal(Some(Signal::KILL))?;
            // keel died before the signal was asked for: the child was handed to another
            // parent, and must not run.
            if getppid() != Some(keel) {
                return Err(std::io::ErrorKind::Other.into());
            }
            Ok(())
        });
    }
}

/// Elsewhere, only the process group is killed (by the callers).
#[cfg(not(target_os = "linux"))]
pub(super) fn die_with_keel(_command: &mut tokio::process::Command) {}
