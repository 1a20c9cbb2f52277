//! Who drives a run: its worker process, recorded with the run, and whether that process is
//! still alive. A run whose worker is known to be gone can be resumed at once; one whose worker
//! cannot be checked (another host, no way to look) falls back on the heartbeat rule.
//!
//! keel-core does no system work: a [`WorkerProbe`] given to the agent names this process and
//! looks at others (the `keel` binary reads `/proc`). Without one, no worker is recorded and
//! only heartbeats count.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A worker process, as recorded with the runs it drives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worker {
    /// The host it runs on (its hostname).
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// When it started, in the host's own units (on Linux, clock ticks since boot): tells the
    /// worker from a later process that got the same pid. `None` when unknown.
    #[serde(default)]
    pub started: Option<u64>,
    /// The process-id namespace its pid belongs to (on Linux, e.g. `pid:[4026531836]`): a pid
    /// names the same process only within it (containers sharing a hostname). `None` when
    /// unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl fmt::Display for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} on {}", self.pid, self.host)
    }
}

/// What is known about a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// It is running.
    Alive,
    /// It is not running any more: its runs can be taken over at once.
    Gone,
    /// It cannot be checked from here (another host, or no way to look).
    Unknown,
}

/// Names this process and tells whether a recorded worker is alive.
pub trait WorkerProbe: Send + Sync {
    /// This process as a worker, when it can be named.
    fn this_process(&self) -> Option<Worker>;

    /// Whether `worker` is still running.
    fn liveness(&self, worker: &Worker) -> Liveness;
}

/// The probe of an agent given none: no worker is recorded, nothing can be checked.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProbe;

impl WorkerProbe for NoProbe {
    fn this_process(&self) -> Option<Worker> {
        None
    }

    fn liveness(&self, _: &Worker) -> Liveness {
        Liveness::Unknown
    }
}

/// True when the run's recorded worker is known to be gone.
pub fn worker_gone(probe: &dyn WorkerProbe, worker: Option<&Worker>) -> bool {
    worker.is_some_and(|worker| probe.liveness(worker) == Liveness::Gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_probe_nothing_is_gone() {
        let worker = Worker {
            host: "h".into(),
            pid: 1,
            started: Some(2),
            namespace: None,
        };
        assert!(!worker_gone(&NoProbe, Some(&worker)));
        assert!(!worker_gone(&NoProbe, None));
        assert_eq!(worker.to_string(), "pid 1 on h");
    }
}
