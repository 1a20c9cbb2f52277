//! Hook scripts in a temp directory, and a way to tell a process is gone.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A directory of hook scripts, and a place for the files they leave (pids, markers).
pub struct Scripts {
    dir: tempfile::TempDir,
}

impl Scripts {
    pub fn new() -> Self {
        Scripts {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A path in the directory.
    pub fn at(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes an executable `sh` script `name` with `body`; returns the command that runs it
    /// (its absolute path). `$DIR` in the body is this directory.
    pub fn script(&self, name: &str, body: &str) -> String {
        let path = self.at(name);
        let text = format!("#!/bin/sh\nDIR='{}'\n{body}\n", self.dir.path().display());
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    /// The pid a script wrote to `name`.
    pub fn pid(&self, name: &str) -> u32 {
        std::fs::read_to_string(self.at(name))
            .unwrap_or_else(|e| panic!("no pid file {name}: {e}"))
            .trim()
            .parse()
            .unwrap()
    }
}

/// True when process `pid` is gone: no such process, or a zombie (dead, not yet reaped by
/// whoever adopted it). Waits up to 2 s for the kernel to finish a kill.
pub async fn gone(pid: u32) -> bool {
    for _ in 0..100 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            // The state follows the command name in parentheses.
            Ok(stat)
                if stat
                    .rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')) =>
            {
                return true;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    false
}

/// A number no other process's command line holds, to give a test's `sleep` as its duration
/// (`sleep 30.<pid><n>`): processes in keel's sandbox have pids of their own, so a test finds
/// them by their command line instead.
pub fn marker() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "30.{}{:04}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// True once no living process has `marker` in its command line (a zombie, dead and not yet
/// reaped, has none). Waits up to 2 s for the kernel to finish a kill.
pub async fn none_running(marker: &str) -> bool {
    for _ in 0..100 {
        if running(marker).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The pids of the processes whose command line holds `marker`.
pub fn running(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| String::from_utf8_lossy(&line).contains(marker))
        })
        .collect()
}
