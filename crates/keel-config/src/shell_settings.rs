//! `[tools.shell]` of keel.toml: the `shell` tool and its command policy.
//!
//! ```toml
//! [tools.shell]
//! enabled = true                 # offer the tool at all (true)
//! program = "sh"                 # runs each line as `PROGRAM -c LINE` ("sh")
//! timeout_secs = 120             # a call's timeout when it asks for none (120)
//! max_timeout_secs = 600         # the most a call may ask for with `timeout_secs` (600)
//! max_output_chars = 16000       # stdout and stderr shown together, head and tail kept (16000)
//! allow = ["git push *"]         # patterns allowed even if the built-in list objects
//! approve = ["npm publish *"]    # patterns that need approval
//! deny = ["curl *"]              # patterns refused
//! secret_env = ["WORK_DB_URL"]   # more variables kept from commands (beside *_API_KEY, …)
//! sandbox = "on"                 # "on": confined by bubblewrap, refused without it; "off" ("on")
//! network = true                 # commands may use the network; false needs the sandbox (true)
//! ```
//!
//! With `sandbox = "on"`, commands run in keel's sandbox ([`keel_tools::Sandbox`]): writes only
//! in the workspace and a private `/tmp`, keel's home and configuration out of sight, keel's
//! process out of sight, nothing left running after the call or after keel. Where bubblewrap's
//! `bwrap` is not on `PATH`, `shell` refuses every command (and keel says so at start) until
//! it is installed or `sandbox = "off"` is set.
//!
//! Patterns are keel's own ([`keel_tools::shell::CommandPattern`]): words matched one for one
//! against each simple command, `*` alone for any number of words, `*` and `?` inside a word.
//! `deny` wins over `approve`, which wins over `allow`, which wins over the built-in list.

use std::time::Duration;

use keel_tools::shell::{SecretFilter, ShellPolicy};
use keel_tools::{Sandbox, ShellConfig};
use serde::Deserialize;

use crate::resolve::Settings;

/// `[tools.shell]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellToolConfig {
    /// Whether runs are offered the `shell` tool (true).
    pub enabled: Option<bool>,
    /// The shell that runs each line (`sh`).
    pub program: Option<String>,
    /// Seconds a command may run when the call does not say (120).
    pub timeout_secs: Option<f64>,
    /// The most seconds a call may ask for (600, and never below `timeout_secs`).
    pub max_timeout_secs: Option<f64>,
    /// Characters of output shown to the model, stdout and stderr together (16000).
    pub max_output_chars: Option<usize>,
    /// Command patterns allowed even when the built-in list objects.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Command patterns refused.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Command patterns that need approval.
    #[serde(default)]
    pub approve: Vec<String>,
    /// Environment variables commands never see, beside every `*_API_KEY`, `*_TOKEN`,
    /// `*_SECRET`, `*_PASSWORD` and the providers' key variables.
    #[serde(default)]
    pub secret_env: Vec<String>,
    /// Whether commands run in keel's sandbox (`on`).
    pub sandbox: Option<SandboxSetting>,
    /// Whether commands may use the network (true).
    pub network: Option<bool>,
}

/// `[tools.shell] sandbox`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxSetting {
    /// Confined by the kernel; `shell` refuses to run where no sandbox is available.
    On,
    /// Unconfined: the command policy alone stands between the model and the machine.
    Off,
}

/// The `shell` tool's effective settings.
#[derive(Clone, Debug)]
pub struct ShellSettings {
    /// Whether runs are offered the tool.
    pub enabled: bool,
    /// The tool's configuration, without the providers' key variables (see
    /// [`tool_config`]).
    pub config: ShellConfig,
}

impl ShellToolConfig {
    /// Says what is wrong, naming the key.
    pub fn validate(&self) -> Result<(), String> {
        self.settings().map(drop)
    }

    /// The effective settings, or what is wrong, naming the key.
    pub fn settings(&self) -> Result<ShellSettings, String> {
        let defaults = ShellConfig::default();
        let secs = |value: Option<f64>, key: &str, default: Duration| match value {
            None => Ok(default),
            Some(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(Duration::from_secs_f64(v)),
            Some(v) => Err(format!(
                "[tools.shell] {key} = {v}: use a number of seconds above 0"
            )),
        };
        let timeout = secs(self.timeout_secs, "timeout_secs", defaults.timeout)?;
        let max_timeout = secs(
            self.max_timeout_secs,
            "max_timeout_secs",
            defaults.max_timeout,
        )?;
        let program = self.program.clone().unwrap_or(defaults.program);
        if program.trim().is_empty() || program.contains('\0') {
            return Err("[tools.shell] program must name a shell, e.g. \"sh\" or \"bash\"".into());
        }
        let max_output_chars = match self.max_output_chars {
            Some(0) => return Err("[tools.shell] max_output_chars must be at least 1".into()),
            value => value.unwrap_or(defaults.max_output_chars),
        };
        let policy = ShellPolicy::new(&self.allow, &self.deny, &self.approve)
            .map_err(|e| format!("[tools.shell] {e}"))?;
        let network = self.network.unwrap_or(true);
        let sandbox = match self.sandbox.unwrap_or(SandboxSetting::On) {
            SandboxSetting::On => Sandbox::detect().network(network),
            SandboxSetting::Off if !network => {
                return Err(
                    "[tools.shell] network = false needs the sandbox: it is the sandbox \
                            that takes the network away (sandbox = \"on\")"
                        .into(),
                );
            }
            SandboxSetting::Off => Sandbox::off(),
        };
        Ok(ShellSettings {
            enabled: self.enabled.unwrap_or(true),
            config: ShellConfig {
                program,
                timeout,
                max_timeout: max_timeout.max(timeout),
                max_output_chars,
                secrets: SecretFilter::new(self.secret_env.iter().cloned()),
                policy,
                sandbox,
                ..defaults
            },
        })
    }
}

/// The `shell` tool's configuration for a run with `settings`: its own, with the key
/// variables of every provider the run may call (primary, fallbacks, summary) kept from
/// commands too, since they need not end in `_API_KEY`.
pub fn tool_config(settings: &Settings) -> ShellConfig {
    let fallbacks = settings
        .fallbacks
        .iter()
        .filter_map(|f| f.provider.as_ref());
    let summary = settings.summary.iter().filter_map(|s| s.provider.as_ref());
    let key_envs = std::iter::once(&settings.provider)
        .chain(fallbacks)
        .chain(summary)
        .filter_map(|p| p.api_key_env.clone());
    let mut config = settings.shell.config.clone();
    config.secrets = config.secrets.with(key_envs);
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ShellSettings, String> {
        toml::from_str::<ShellToolConfig>(text)
            .map_err(|e| e.to_string())?
            .settings()
    }

    #[test]
    fn defaults() {
        let settings = parse("").unwrap();
        assert!(settings.enabled);
        assert_eq!(settings.config.program, "sh");
        assert_eq!(settings.config.timeout, Duration::from_secs(120));
        assert_eq!(settings.config.max_timeout, Duration::from_secs(600));
        assert_eq!(settings.config.max_output_chars, 16_000);
        assert_eq!(settings.config.sandbox, Sandbox::detect());
        assert!(settings.config.sandbox.has_network());
    }

    #[test]
    fn the_sandbox_and_the_network() {
        let config = parse("sandbox = \"on\"\nnetwork = false").unwrap().config;
        assert_eq!(config.sandbox, Sandbox::detect().network(false));
        let config = parse("sandbox = \"off\"").unwrap().config;
        assert_eq!(config.sandbox.state(), keel_tools::SandboxState::Off);
        let error = parse("sandbox = \"off\"\nnetwork = false").unwrap_err();
        assert!(
            error.contains("network = false needs the sandbox"),
            "{error}"
        );
        let error = parse("sandbox = \"maybe\"").unwrap_err();
        assert!(error.contains("sandbox"), "{error}");
    }

    #[test]
    fn every_key_is_read() {
        let settings = parse(
            "enabled = false\nprogram = \"bash\"\ntimeout_secs = 5\nmax_timeout_secs = 2.5\n\
             max_output_chars = 100\nallow = [\"git push *\"]\ndeny = [\"curl *\"]\n\
             approve = [\"make *\"]\nsecret_env = [\"WORK_DB_URL\"]\n",
        )
        .unwrap();
        assert!(!settings.enabled);
        let config = settings.config;
        assert_eq!(config.program, "bash");
        assert_eq!(config.timeout, Duration::from_secs(5));
        // The maximum is never below the default timeout.
        assert_eq!(config.max_timeout, Duration::from_secs(5));
        assert_eq!(config.max_output_chars, 100);
        assert!(config.policy.classify("git push --force").is_allow());
        assert!(!config.policy.classify("curl x").is_allow());
        assert!(!config.policy.classify("make").is_allow());
        assert!(config.secrets.is_secret("work_db_url".as_ref()));
    }

    #[test]
    fn mistakes_name_their_key() {
        for (text, key) in [
            ("timeout_secs = 0", "timeout_secs"),
            ("max_timeout_secs = -1", "max_timeout_secs"),
            ("max_output_chars = 0", "max_output_chars"),
            ("program = \"\"", "program"),
            ("deny = [\"  \"]", "deny"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(key), "{text}: {error}");
        }
        assert!(parse("allowed = []").unwrap_err().contains("allowed"));
    }
}
