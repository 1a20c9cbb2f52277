//! `[memory]` of keel.toml: the `memory` tool's notes (see [`keel_core::memory_notes`]).
//!
//! ```toml
//! [memory]
//! enabled = true        # offer the `memory` tool and show the notes in new sessions (true)
//! memory_chars = 2200   # the limit of MEMORY.md, what the agent learned (2200)
//! user_chars = 1375     # the limit of USER.md, about the user (1375)
//! ```
//!
//! The notes are files under `$KEEL_HOME/memory/<user>/`, out of the file tools' reach (they
//! never touch keel's home), so the model edits them only through the tool and its limits.

use std::path::PathBuf;
use std::sync::Arc;

use keel_core::memory_notes::MemoryLimits;
use keel_tools::FileMemory;
use serde::Deserialize;

/// The most characters a note's limit may be: the notes go into every session's prompt.
pub const MAX_NOTE_CHARS: usize = 100_000;

/// `[memory]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Whether runs are offered the `memory` tool (true).
    pub enabled: Option<bool>,
    /// The limit of `MEMORY.md`, in characters (2200).
    pub memory_chars: Option<usize>,
    /// The limit of `USER.md`, in characters (1375).
    pub user_chars: Option<usize>,
}

/// The `memory` tool's effective settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemorySettings {
    /// Whether runs are offered the tool.
    pub enabled: bool,
    /// The notes' limits.
    pub limits: MemoryLimits,
    /// Where the notes are (`$KEEL_HOME/memory`); set when the settings are loaded for a home.
    pub dir: Option<PathBuf>,
}

impl MemoryConfig {
    /// The effective settings, or what is wrong with the section.
    pub fn settings(&self) -> Result<MemorySettings, String> {
        let defaults = MemoryLimits::default();
        let limit = |value: Option<usize>, default: usize, key: &str| match value {
            None => Ok(default),
            Some(n) if (1..=MAX_NOTE_CHARS).contains(&n) => Ok(n),
            Some(n) => Err(format!(
                "[memory] {key} = {n}: use 1 to {MAX_NOTE_CHARS} characters"
            )),
        };
        Ok(MemorySettings {
            enabled: self.enabled.unwrap_or(true),
            limits: MemoryLimits {
                memory_chars: limit(self.memory_chars, defaults.memory_chars, "memory_chars")?,
                user_chars: limit(self.user_chars, defaults.user_chars, "user_chars")?,
            },
            dir: None,
        })
    }
}

impl MemorySettings {
    /// The notes' backend, when the tool is on and the settings know keel's home.
    pub fn backend(&self) -> Option<Arc<FileMemory>> {
        let dir = self.dir.as_ref().filter(|_| self.enabled)?;
        Some(Arc::new(FileMemory::new(dir)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bad_limits() {
        let settings = MemoryConfig::default().settings().unwrap();
        assert!(settings.enabled);
        assert_eq!(settings.limits, MemoryLimits::default());
        assert!(settings.backend().is_none(), "no home, no notes");
        let config: MemoryConfig = toml::from_str("memory_chars = 0").unwrap();
        assert!(config.settings().unwrap_err().contains("memory_chars = 0"));
        let config: MemoryConfig = toml::from_str("user_chars = 100001").unwrap();
        assert!(config.settings().unwrap_err().contains("user_chars"));
        assert!(toml::from_str::<MemoryConfig>("chars = 1").is_err());
        let config: MemoryConfig = toml::from_str("enabled = false\nmemory_chars = 10").unwrap();
        let mut settings = config.settings().unwrap();
        assert_eq!(settings.limits.memory_chars, 10);
        settings.dir = Some("/tmp/x".into());
        assert!(settings.backend().is_none(), "off");
    }
}
