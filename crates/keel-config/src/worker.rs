//! This process as a run's worker, and whether another worker is alive, from Linux's `/proc`:
//! the host is `/proc/sys/kernel/hostname`, a process's start time is field 22 of
//! `/proc/PID/stat` (clock ticks since boot), which tells a worker from a later process that
//! reused its pid, and `/proc/self/ns/pid` the pid namespace (two containers may share a
//! hostname, not their pids). Elsewhere no worker is recorded and only heartbeats count.

use std::path::Path;

use keel_core::worker::{Liveness, Worker, WorkerProbe};

/// The `/proc` probe.
#[derive(Clone, Debug)]
pub struct ProcProbe {
    root: std::path::PathBuf,
    this: Option<Worker>,
}

impl ProcProbe {
    /// The probe of this machine's `/proc`.
    pub fn new() -> ProcProbe {
        ProcProbe::at(Path::new("/proc"), std::process::id())
    }

    /// The probe of a `/proc` at `root`, naming process `pid` as this one.
    fn at(root: &Path, pid: u32) -> ProcProbe {
        let host = std::fs::read_to_string(root.join("sys/kernel/hostname"))
            .ok()
            .map(|host| host.trim().to_string())
            .filter(|host| !host.is_empty());
        let namespace = std::fs::read_link(root.join("self/ns/pid"))
            .ok()
            .map(|link| link.display().to_string());
        let this = host.and_then(|host| {
            let (_, started) = stat(root, pid)?;
            Some(Worker {
                host,
                pid,
                started: Some(started),
                namespace,
            })
        });
        ProcProbe {
            root: root.to_path_buf(),
            this,
        }
    }
}

impl Default for ProcProbe {
    fn default() -> Self {
        ProcProbe::new()
    }
}

impl WorkerProbe for ProcProbe {
    fn this_process(&self) -> Option<Worker> {
        self.this.clone()
    }

    fn liveness(&self, worker: &Worker) -> Liveness {
        let Some(this) = &self.this else {
            return Liveness::Unknown;
        };
        if worker.host != this.host || worker.namespace != this.namespace {
            return Liveness::Unknown;
        }
        match stat(&self.root, worker.pid) {
            // No such process, or a zombie (killed, not yet reaped by its parent).
            None => Liveness::Gone,
            Some(('Z' | 'X' | 'x', _)) => Liveness::Gone,
            Some((_, started)) if worker.started.is_some_and(|s| s != started) => Liveness::Gone,
            Some(_) => Liveness::Alive,
        }
    }
}

/// The state letter and start time of process `pid`, if it exists.
fn stat(root: &Path, pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(root.join(pid.to_string()).join("stat")).ok()?;
    // Field 2, the command, is in parentheses and may hold anything: count from its end.
    let (_, after_command) = text.rsplit_once(')')?;
    let mut fields = after_command.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 4 to 21 come between the state (3) and the start time (22).
    let started = fields.nth(18)?.parse().ok()?;
    Some((state, started))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_proc(processes: &[(u32, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("sys/kernel")).unwrap();
        std::fs::write(root.path().join("sys/kernel/hostname"), "box\n").unwrap();
        std::fs::create_dir_all(root.path().join("self/ns")).unwrap();
        std::os::unix::fs::symlink("pid:[1]", root.path().join("self/ns/pid")).unwrap();
        for (pid, stat) in processes {
            let dir = root.path().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("stat"), stat).unwrap();
        }
        root
    }

    /// A stat line of a process in `state` started at `started`, its command odd on purpose.
    fn stat_line(state: char, started: u64) -> String {
        let middle = (4..=21)
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        format!("1 (ke el) x) {state} {middle} {started} 23 24\n")
    }

    #[test]
    fn a_worker_is_alive_until_its_process_is_gone_or_replaced() {
        let root = fake_proc(&[
            (10, &stat_line('S', 500)),
            (11, &stat_line('R', 900)),
            (12, &stat_line('Z', 700)),
        ]);
        let probe = ProcProbe::at(root.path(), 10);
        let this = probe.this_process().unwrap();
        assert_eq!(
            (this.host.as_str(), this.pid, this.started),
            ("box", 10, Some(500))
        );
        assert_eq!(this.namespace.as_deref(), Some("pid:[1]"));
        let worker = |pid, started| Worker {
            host: "box".into(),
            pid,
            started: Some(started),
            namespace: Some("pid:[1]".into()),
        };
        assert_eq!(probe.liveness(&worker(11, 900)), Liveness::Alive);
        assert_eq!(
            probe.liveness(&worker(11, 800)),
            Liveness::Gone,
            "pid reused"
        );
        assert_eq!(probe.liveness(&worker(12, 700)), Liveness::Gone, "a zombie");
        assert_eq!(
            probe.liveness(&worker(13, 1)),
            Liveness::Gone,
            "no such process"
        );
        let elsewhere = Worker {
            host: "other".into(),
            ..worker(13, 1)
        };
        assert_eq!(probe.liveness(&elsewhere), Liveness::Unknown);
        let in_a_container = Worker {
            namespace: Some("pid:[2]".into()),
            ..worker(13, 1)
        };
        assert_eq!(probe.liveness(&in_a_container), Liveness::Unknown);
    }

    #[test]
    fn this_process_is_alive() {
        let probe = ProcProbe::new();
        if let Some(this) = probe.this_process() {
            assert_eq!(probe.liveness(&this), Liveness::Alive);
        }
    }
}
