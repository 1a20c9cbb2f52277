//! The channels' configuration: `[channels.telegram]`, `[channels.slack]`,
//! `[channels.discord]`, `[channels.email]` and `[[webhooks]]` of `keel.toml`, each read by its
//! platform's module ([`parse_section`]); secrets are named by environment variable, never
//! written in the file ([`secret`]).

use serde::de::DeserializeOwned;

use std::time::Duration;

use crate::courier::CourierPolicy;
use crate::lane_policy::ChannelLanePolicies;
use crate::runtime::StartError;

/// The sections of `keel.toml` the channels read, as written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChannelsConfig {
    /// `[channels.telegram]`.
    pub telegram: Option<toml::Value>,
    /// `[channels.slack]`.
    pub slack: Option<toml::Value>,
    /// `[channels.discord]`.
    pub discord: Option<toml::Value>,
    /// `[channels.email]`.
    pub email: Option<toml::Value>,
    /// `[[webhooks]]`.
    pub webhooks: Vec<toml::Value>,
    /// `[channels] poll_ms`, `retry_first_ms`, `retry_max_secs`: how replies are delivered.
    pub courier: CourierPolicy,
    /// Each channel's `lane_policy` (taken out of its section).
    pub lane_policies: ChannelLanePolicies,
}

impl ChannelsConfig {
    /// Reads `[channels]` and `[[webhooks]]`; a channel keel does not know is an error.
    pub fn from_toml(channels: &toml::Table, webhooks: &[toml::Value]) -> Result<Self, String> {
        let mut config = ChannelsConfig {
            webhooks: webhooks.to_vec(),
            ..ChannelsConfig::default()
        };
        for (name, value) in channels {
            let millis = |value: &toml::Value, scale: u64| match value.as_integer() {
                Some(n) if n > 0 => Ok(Duration::from_millis(n as u64 * scale)),
                _ => Err(format!("[channels] {name} must be a positive whole number")),
            };
            let slot = match name.as_str() {
                "poll_ms" => {
                    config.courier.poll = millis(value, 1)?;
                    continue;
                }
                "retry_first_ms" => {
                    config.courier.first_backoff = millis(value, 1)?;
                    continue;
                }
                "retry_max_secs" => {
                    config.courier.max_backoff = millis(value, 1000)?;
                    continue;
                }
                "telegram" => &mut config.telegram,
                "slack" => &mut config.slack,
                "discord" => &mut config.discord,
                "email" => &mut config.email,
                other => {
                    return Err(format!(
                        "[channels.{other}] is not a channel keel knows; the channels are \
                         telegram, slack, discord and email (webhooks are [[webhooks]]), and \
                         [channels] takes poll_ms, retry_first_ms and retry_max_secs"
                    ));
                }
            };
            let mut value = value.clone();
            if let Some(policy) = value.as_table_mut().and_then(|t| t.remove("lane_policy")) {
                config.lane_policies.read(name, &policy)?;
            }
            *slot = Some(value);
        }
        Ok(config)
    }

    /// Whether no channel is configured.
    pub fn is_empty(&self) -> bool {
        self.telegram.is_none()
            && self.slack.is_none()
            && self.discord.is_none()
            && self.email.is_none()
            && self.webhooks.is_empty()
    }

    /// The names of the configured channels (as the outbox and `keel channels status` name
    /// them; each webhook delivers through the channel it names, if any).
    pub fn names(&self) -> Vec<&'static str> {
        [
            ("telegram", self.telegram.is_some()),
            ("slack", self.slack.is_some()),
            ("discord", self.discord.is_some()),
            ("email", self.email.is_some()),
            ("webhooks", !self.webhooks.is_empty()),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect()
    }
}

/// Reads section `name` (e.g. `channels.telegram`) as `T`, its errors naming the section.
pub fn parse_section<T: DeserializeOwned>(name: &str, raw: &toml::Value) -> Result<T, StartError> {
    raw.clone()
        .try_into()
        .map_err(|e: toml::de::Error| StartError::Config(format!("[{name}]: {}", e.message())))
}

/// The value of the environment variable `variable`, which section `section` names for
/// `what`; missing or empty is an error saying which variable to set.
pub fn secret(section: &str, what: &str, variable: &str) -> Result<String, StartError> {
    match std::env::var(variable) {
        Ok(value) if !value.trim().is_empty() => Ok(value.trim().to_string()),
        _ => Err(StartError::Config(format!(
            "[{section}] takes its {what} from the environment variable {variable}, which is \
             not set"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_channel_is_named() {
        let table: toml::Table = toml::from_str("[irc]\nserver = \"x\"").unwrap();
        let error = ChannelsConfig::from_toml(&table, &[]).unwrap_err();
        assert!(error.contains("[channels.irc]"), "{error}");
    }

    #[test]
    fn a_missing_secret_names_its_variable() {
        let error = secret(
            "channels.telegram",
            "bot token",
            "KEEL_TEST_SURELY_UNSET_VAR",
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("KEEL_TEST_SURELY_UNSET_VAR"), "{error}");
    }
}
