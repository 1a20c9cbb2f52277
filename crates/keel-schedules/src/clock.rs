//! The scheduler's clock: the system's, or — for tests of `keel serve` only — a file holding
//! the instant that is "now" (`[schedules] clock_file`), so a test can stop the daemon, move
//! the time across slots, and start it again without waiting.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use keel_core::clock::Clock;

/// A clock that reads "now" from a file holding one RFC 3339 instant, each time it is asked.
/// For tests: a file that is missing or does not hold an instant gives the system's time (and
/// a warning in the log).
#[derive(Clone, Debug)]
pub struct FileClock {
    path: PathBuf,
}

impl FileClock {
    /// A clock reading `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileClock { path: path.into() }
    }

    /// The instant the file holds, if it holds one.
    pub fn read(&self) -> Option<DateTime<Utc>> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        DateTime::parse_from_rfc3339(text.trim())
            .ok()
            .map(|at| at.with_timezone(&Utc))
    }
}

impl Clock for FileClock {
    fn now(&self) -> DateTime<Utc> {
        match self.read() {
            Some(now) => now,
            None => {
                tracing::warn!(
                    path = %self.path.display(),
                    "[schedules] clock_file holds no RFC 3339 instant; using the system clock"
                );
                Utc::now()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_says_what_time_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("now");
        let clock = FileClock::new(&path);
        assert_eq!(clock.read(), None);
        std::fs::write(&path, "2026-11-29T12:00:00Z\n").unwrap();
        assert_eq!(clock.now().to_rfc3339(), "2026-11-29T12:00:00+00:00");
        std::fs::write(&path, "2026-11-29T13:00:00+01:00").unwrap();
        assert_eq!(clock.now().to_rfc3339(), "2026-11-29T12:00:00+00:00");
        std::fs::write(&path, "soon").unwrap();
        assert_eq!(clock.read(), None);
    }
}
