//! `[skills]` and `[routing]` of keel.toml: which skills go into the system prompt, and which
//! model each tier of message goes to.
//!
//! ```toml
//! [skills]
//! enabled = true        # read $KEEL_HOME/skills and the workspace's .keel/skills (true)
//! max_tokens = 2000     # the most the matched skills may add to the system prompt (2000)
//!
//! [routing]             # used when the caller names no model (no --model, no persona model)
//! fast = "gpt-4.1-nano"     # greetings, acknowledgements, short plain questions
//! primary = "gpt-4.1-mini"  # everything between (default: the configured model)
//! smart = "gpt-4.1"         # code, multi-step work, requests that need tools, attachments
//! ```

use std::path::PathBuf;

use keel_extensions::routing::RoutingPolicy;
use serde::Deserialize;

/// The default budget of the matched skills, in tokens.
pub const DEFAULT_SKILLS_MAX_TOKENS: usize = 2000;

/// `[skills]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillsConfig {
    /// Whether skills are read at all (true).
    pub enabled: Option<bool>,
    /// The most tokens matched skills add to the system prompt (2000).
    pub max_tokens: Option<usize>,
}

/// `[routing]` as written: a model per tier, of the configured provider.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingConfig {
    /// Model for greetings and short plain questions.
    pub fast: Option<String>,
    /// Model for everything between (the configured model when unset).
    pub primary: Option<String>,
    /// Model for code, multi-step and tool-needing requests.
    pub smart: Option<String>,
}

/// The skills' effective settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillsSettings {
    /// Whether skills are read.
    pub enabled: bool,
    /// Their budget in the system prompt, in tokens.
    pub max_tokens: usize,
    /// Where they are read from, in order (a later root wins); set by
    /// [`crate::load_settings`] from keel's home and the workspace.
    pub roots: Vec<PathBuf>,
}

impl SkillsConfig {
    /// The effective settings, or what is wrong, naming the key.
    pub fn settings(&self) -> Result<SkillsSettings, String> {
        let max_tokens = self.max_tokens.unwrap_or(DEFAULT_SKILLS_MAX_TOKENS);
        if !(1..=100_000).contains(&max_tokens) {
            return Err(format!(
                "[skills] max_tokens = {max_tokens}: use a number of tokens from 1 to 100000"
            ));
        }
        Ok(SkillsSettings {
            enabled: self.enabled.unwrap_or(true),
            max_tokens,
            roots: Vec::new(),
        })
    }
}

impl RoutingConfig {
    /// The policy, `None` when no tier names a model; or what is wrong, naming the key.
    pub fn policy(&self) -> Result<Option<RoutingPolicy>, String> {
        let tier = |key: &str, value: &Option<String>| match value {
            Some(model) if model.trim().is_empty() => {
                Err(format!("[routing] {key} = \"\": name a model"))
            }
            Some(model) => Ok(Some(model.trim().to_string())),
            None => Ok(None),
        };
        let policy = RoutingPolicy {
            fast: tier("fast", &self.fast)?,
            primary: tier("primary", &self.primary)?,
            smart: tier("smart", &self.smart)?,
        };
        Ok((policy != RoutingPolicy::default()).then_some(policy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bad_values() {
        let skills = SkillsConfig::default().settings().unwrap();
        assert!(skills.enabled);
        assert_eq!(skills.max_tokens, DEFAULT_SKILLS_MAX_TOKENS);
        let zero = SkillsConfig {
            max_tokens: Some(0),
            ..SkillsConfig::default()
        };
        assert!(zero.settings().unwrap_err().contains("max_tokens"));
        assert_eq!(RoutingConfig::default().policy(), Ok(None));
        let blank = RoutingConfig {
            fast: Some(" ".into()),
            ..RoutingConfig::default()
        };
        assert!(blank.policy().unwrap_err().contains("[routing] fast"));
        let set = RoutingConfig {
            smart: Some("big".into()),
            ..RoutingConfig::default()
        };
        assert_eq!(set.policy().unwrap().unwrap().smart.as_deref(), Some("big"));
    }
}
