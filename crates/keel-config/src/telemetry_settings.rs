//! `[telemetry]` of keel.toml: where traces go (OTLP), whether they carry message content, and
//! where the daemon's Prometheus metrics are served besides its own `/metrics`.

use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;

use crate::config::{self, ConfigError};

/// The environment variable OpenTelemetry's own SDKs read for the collector's address; used
/// when `[telemetry] otlp_endpoint` is not set.
pub const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// `[telemetry]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The OTLP collector's base address (`http://localhost:4318`); traces are posted to its
    /// `/v1/traces` over HTTP/protobuf. Unset (and no `OTEL_EXPORTER_OTLP_ENDPOINT`): no traces
    /// are exported and no exporter starts.
    pub otlp_endpoint: Option<String>,
    /// Whether spans carry message content (prompts, answers, tool arguments and results);
    /// false: only names, ids, counts and timings.
    pub record_content: Option<bool>,
    /// The `service.name` resource attribute of every span ("keel").
    pub service_name: Option<String>,
    /// An extra address that serves `/metrics` without a key (for a Prometheus on the same
    /// host or network); the API's own `/metrics` always needs an admin key.
    pub metrics_bind: Option<SocketAddr>,
}

/// The telemetry settings in use.
#[derive(Clone, Debug, PartialEq)]
pub struct TelemetrySettings {
    /// Where traces go, when anywhere (`[telemetry] otlp_endpoint`, else the environment).
    pub otlp_endpoint: Option<String>,
    /// Whether spans carry message content.
    pub record_content: bool,
    /// The `service.name` of every span.
    pub service_name: String,
    /// The extra, keyless `/metrics` address.
    pub metrics_bind: Option<SocketAddr>,
}

impl TelemetryConfig {
    /// Says what is wrong, naming the key.
    pub fn validate(&self) -> Result<(), String> {
        self.settings(None).map(drop)
    }

    /// The settings, `env_endpoint` (the environment's `OTEL_EXPORTER_OTLP_ENDPOINT`) used
    /// when the file names no endpoint.
    pub fn settings(&self, env_endpoint: Option<String>) -> Result<TelemetrySettings, String> {
        let endpoint = self
            .otlp_endpoint
            .clone()
            .or(env_endpoint)
            .map(|e| e.trim().to_string())
            .filter(|e| !e.is_empty());
        if let Some(endpoint) = &endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            return Err(format!(
                "[telemetry] otlp_endpoint = \"{endpoint}\": use an http:// or https:// address \
                 of an OTLP/HTTP collector, e.g. http://localhost:4318"
            ));
        }
        let service_name = self.service_name.clone().unwrap_or_else(|| "keel".into());
        if service_name.trim().is_empty() {
            return Err("[telemetry] service_name is empty".into());
        }
        Ok(TelemetrySettings {
            otlp_endpoint: endpoint,
            record_content: self.record_content.unwrap_or(false),
            service_name,
            metrics_bind: self.metrics_bind,
        })
    }
}

/// The `[telemetry]` settings of the configuration in use, with `OTEL_EXPORTER_OTLP_ENDPOINT`
/// standing in for an unset `otlp_endpoint`.
pub fn load(config_file: Option<&Path>, home: &Path) -> Result<TelemetrySettings, ConfigError> {
    let loaded = config::load(config_file, home)?;
    let env = std::env::var(OTLP_ENDPOINT_ENV).ok();
    loaded.file.telemetry.settings(env).map_err(ConfigError)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, env: Option<&str>) -> Result<TelemetrySettings, String> {
        toml::from_str::<TelemetryConfig>(text)
            .map_err(|e| e.to_string())?
            .settings(env.map(str::to_string))
    }

    #[test]
    fn nothing_is_exported_by_default() {
        let settings = parse("", None).unwrap();
        assert_eq!(settings.otlp_endpoint, None);
        assert!(!settings.record_content);
        assert_eq!(settings.service_name, "keel");
        assert_eq!(settings.metrics_bind, None);
    }

    #[test]
    fn the_file_wins_over_the_environment() {
        let settings = parse(
            "otlp_endpoint = \"http://collector:4318\"",
            Some("http://env:4318"),
        )
        .unwrap();
        assert_eq!(
            settings.otlp_endpoint.as_deref(),
            Some("http://collector:4318")
        );
        let settings = parse("", Some("http://env:4318")).unwrap();
        assert_eq!(settings.otlp_endpoint.as_deref(), Some("http://env:4318"));
        assert_eq!(parse("", Some("  ")).unwrap().otlp_endpoint, None);
    }

    #[test]
    fn bad_values_are_named() {
        let error = parse("otlp_endpoint = \"collector:4318\"", None).unwrap_err();
        assert!(error.contains("otlp_endpoint"), "{error}");
        let error = parse("metrics_bind = \"nowhere\"", None).unwrap_err();
        assert!(
            error.contains("metrics_bind") || error.contains("socket"),
            "{error}"
        );
        let error = parse("colour = true", None).unwrap_err();
        assert!(error.contains("colour"), "{error}");
        let settings = parse(
            "record_content = true\nmetrics_bind = \"127.0.0.1:9464\"",
            None,
        )
        .unwrap();
        assert!(settings.record_content);
        assert_eq!(
            settings.metrics_bind,
            Some("127.0.0.1:9464".parse().unwrap())
        );
    }
}
