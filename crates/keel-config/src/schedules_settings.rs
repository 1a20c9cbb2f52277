//! `[schedules]` of keel.toml: whether `keel serve` fires schedules, and how often it looks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::config::{self, ConfigError};

/// `[schedules]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulesConfig {
    /// Whether `keel serve` fires schedules (true).
    pub enabled: Option<bool>,
    /// Milliseconds between the scheduler's looks at the due schedules (1000).
    pub tick_ms: Option<u64>,
    /// Seconds a slot may be late and still fire as on time; older slots are the schedule's
    /// catch-up policy's (60).
    pub grace_secs: Option<u64>,
    /// For tests only: a file holding an RFC 3339 instant that the scheduler (and the
    /// `schedule` tool) take as "now", read at each look, so a test can move time across
    /// slots without waiting. Not for production use.
    pub clock_file: Option<PathBuf>,
}

/// The scheduler's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulesSettings {
    /// Whether `keel serve` fires schedules.
    pub enabled: bool,
    /// Time between the scheduler's looks.
    pub tick: Duration,
    /// How late a slot may fire and still be on time.
    pub grace: Duration,
    /// For tests only: the file that says what time it is.
    pub clock_file: Option<PathBuf>,
}

impl SchedulesConfig {
    /// Says what is wrong, naming the key.
    pub fn validate(&self) -> Result<(), String> {
        self.settings().map(drop)
    }

    fn settings(&self) -> Result<SchedulesSettings, String> {
        let tick_ms = self.tick_ms.unwrap_or(1000);
        if !(10..=3_600_000).contains(&tick_ms) {
            return Err(format!(
                "[schedules] tick_ms = {tick_ms}: use milliseconds between 10 and 3600000"
            ));
        }
        let grace = self.grace_secs.unwrap_or(60);
        if grace > 86_400 {
            return Err(format!(
                "[schedules] grace_secs = {grace}: use at most 86400 (a day)"
            ));
        }
        Ok(SchedulesSettings {
            enabled: self.enabled.unwrap_or(true),
            tick: Duration::from_millis(tick_ms),
            grace: Duration::from_secs(grace),
            clock_file: self.clock_file.clone(),
        })
    }
}

/// The `[schedules]` settings of the configuration in use.
pub fn load(config_file: Option<&Path>, home: &Path) -> Result<SchedulesSettings, ConfigError> {
    let loaded = config::load(config_file, home)?;
    loaded.file.schedules.settings().map_err(ConfigError)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SchedulesSettings, String> {
        toml::from_str::<SchedulesConfig>(text)
            .map_err(|e| e.to_string())?
            .settings()
    }

    #[test]
    fn defaults_and_every_key() {
        let defaults = parse("").unwrap();
        assert!(defaults.enabled);
        assert_eq!(defaults.tick, Duration::from_secs(1));
        assert_eq!(defaults.grace, Duration::from_secs(60));
        assert_eq!(defaults.clock_file, None);
        let set = parse("enabled = false\ntick_ms = 50\ngrace_secs = 5\nclock_file = \"/tmp/now\"")
            .unwrap();
        assert!(!set.enabled);
        assert_eq!(set.tick, Duration::from_millis(50));
        assert_eq!(set.grace, Duration::from_secs(5));
        assert_eq!(set.clock_file, Some(PathBuf::from("/tmp/now")));
    }

    #[test]
    fn mistakes_name_their_key() {
        assert!(parse("tick_ms = 0").unwrap_err().contains("tick_ms"));
        assert!(
            parse("grace_secs = 100000")
                .unwrap_err()
                .contains("grace_secs")
        );
        assert!(parse("tick = 5").unwrap_err().contains("unknown field"));
    }
}
