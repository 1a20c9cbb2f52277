//! `[delegation]`: whether runs may hand tasks to sub-agents (`delegate_task`), and within what
//! bounds — tasks run at once, depth, a child's iterations, the model children use.

use keel_extensions::delegation::DelegationPolicy;
use serde::Deserialize;

/// `[delegation]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegationConfig {
    /// Offer `delegate_task` (false).
    pub enabled: Option<bool>,
    /// Most tasks one call runs concurrently (3).
    pub max_parallel: Option<u32>,
    /// Deepest sub-agent: a run at this depth cannot delegate (2).
    pub max_depth: Option<u32>,
    /// Most iterations a sub-agent may use (50).
    pub max_iterations: Option<u32>,
    /// The model sub-agents use, on the run's provider (the run's own).
    pub model: Option<String>,
}

impl DelegationConfig {
    /// The policy, when delegation is enabled; an error names a bad setting.
    pub fn policy(&self) -> Result<Option<DelegationPolicy>, String> {
        let defaults = DelegationPolicy::default();
        let policy = DelegationPolicy {
            max_parallel: self.max_parallel.unwrap_or(defaults.max_parallel),
            max_depth: self.max_depth.unwrap_or(defaults.max_depth),
            max_iterations: self.max_iterations.unwrap_or(defaults.max_iterations),
            model: self.model.clone(),
        };
        // Checked even when off, so a mistake shows before someone turns it on.
        policy.validate()?;
        Ok(self.enabled.unwrap_or(false).then_some(policy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Option<DelegationPolicy>, String> {
        let config: DelegationConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.policy()
    }

    #[test]
    fn off_unless_enabled_with_the_documented_defaults() {
        assert_eq!(read("").unwrap(), None);
        assert_eq!(read("max_parallel = 2").unwrap(), None);
        let on = read("enabled = true").unwrap().unwrap();
        assert_eq!(
            (on.max_parallel, on.max_depth, on.max_iterations),
            (3, 2, 50)
        );
        let tuned = read("enabled = true\nmax_parallel = 5\nmodel = \"cheap\"")
            .unwrap()
            .unwrap();
        assert_eq!(
            (tuned.max_parallel, tuned.model.as_deref()),
            (5, Some("cheap"))
        );
    }

    #[test]
    fn zero_absurd_and_unknown_settings_are_errors() {
        for (text, expected) in [
            (
                "enabled = true\nmax_parallel = 0",
                "max_parallel must be between 1 and",
            ),
            ("max_depth = 0", "max_depth must be between 1 and"),
            (
                "max_iterations = 100000",
                "max_iterations must be between 1 and",
            ),
            ("max_parallel = -1", "invalid value"),
            ("model = \"\"", "model must not be empty"),
            ("max_parallell = 2", "unknown field"),
        ] {
            let error = read(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
