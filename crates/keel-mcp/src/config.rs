//! What keel needs to know about one MCP server: its name, how to reach it, and how long one
//! call may take.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

use keel_core::redact::Redactor;

/// How long one tool call may take when the configuration does not say.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// One MCP server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServerConfig {
    /// Its name: the prefix of its tools' names (`NAME__tool`) and its module (`mcp:NAME`).
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// The most one tool call may take; also bounds starting the server and listing its tools.
    pub call_timeout: Duration,
}

/// How keel reaches an MCP server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its standard input and output.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its environment (may hold keys: never shown).
        env: BTreeMap<String, String>,
        /// The program and arguments the command runs under — keel's sandbox (`bwrap … --`),
        /// set by keel — or empty to run it as it is.
        launcher: Vec<OsString>,
    },
    /// A server reached over streamable HTTP.
    Http {
        /// Its endpoint.
        url: String,
        /// Headers sent with every request (may hold keys: never shown).
        headers: BTreeMap<String, String>,
    },
}

/// Why a server's configuration cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum McpConfigError {
    /// The name cannot prefix tool names.
    #[error(
        "MCP server name `{0}` is not allowed: use letters, digits, `-` and `_` (at most 32, \
         and no `__`)"
    )]
    InvalidName(String),
    /// Two servers share a name.
    #[error("two MCP servers are named `{0}`")]
    Duplicate(String),
    /// The call timeout is zero.
    #[error("MCP server `{0}`: timeout_secs must be above zero")]
    ZeroTimeout(String),
    /// No program or an empty one.
    #[error("MCP server `{0}`: command must not be empty")]
    EmptyCommand(String),
    /// Not an http(s) URL.
    #[error("MCP server `{0}`: url must start with http:// or https://")]
    InvalidUrl(String),
    /// A header that HTTP cannot carry.
    #[error("MCP server `{server}`: header `{header}` is not a valid HTTP header")]
    InvalidHeader {
        /// The server.
        server: String,
        /// The header's name (never its value).
        header: String,
    },
}

impl McpServerConfig {
    /// Checks what can be checked before starting the server.
    pub fn validate(&self) -> Result<(), McpConfigError> {
        if !valid_name(&self.name) {
            return Err(McpConfigError::InvalidName(self.name.clone()));
        }
        if self.call_timeout.is_zero() {
            return Err(McpConfigError::ZeroTimeout(self.name.clone()));
        }
        match &self.transport {
            McpTransport::Stdio { command, .. } if command.trim().is_empty() => {
                Err(McpConfigError::EmptyCommand(self.name.clone()))
            }
            McpTransport::Stdio { .. } => Ok(()),
            McpTransport::Http { url, headers } => {
                let lower = url.to_ascii_lowercase();
                if !(lower.starts_with("http://") || lower.starts_with("https://")) {
                    return Err(McpConfigError::InvalidUrl(self.name.clone()));
                }
                for (name, value) in headers {
                    let valid = reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok()
                        && reqwest::header::HeaderValue::from_str(value).is_ok();
                    if !valid {
                        return Err(McpConfigError::InvalidHeader {
                            server: self.name.clone(),
                            header: name.clone(),
                        });
                    }
                }
                Ok(())
            }
        }
    }

    /// Hides what may be a secret in any text about this server: the values of its
    /// environment and headers, and a password or a secret query value in its URL.
    pub fn redactor(&self) -> Redactor {
        let secrets: Vec<String> = match &self.transport {
            McpTransport::Stdio { env, .. } => env.values().cloned().collect(),
            McpTransport::Http { url, headers } => {
                let mut secrets = Redactor::url_secrets(url);
                secrets.extend(headers.values().cloned());
                // `Bearer KEY`: the key alone may show up too.
                secrets.extend(
                    headers
                        .values()
                        .filter_map(|value| value.split_once(' ').map(|(_, key)| key.to_string())),
                );
                secrets
            }
        };
        Redactor::new(secrets)
    }
}

/// A name that can prefix tool names for every provider: `[A-Za-z0-9_-]`, 1 to 32 characters,
/// no `__` (the separator).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(name: &str) -> McpServerConfig {
        McpServerConfig {
            name: name.into(),
            transport: McpTransport::Stdio {
                command: "server".into(),
                args: vec![],
                env: BTreeMap::from([("API_KEY".into(), "sk-secret-value".into())]),
                launcher: vec![],
            },
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }

    fn http(url: &str, headers: &[(&str, &str)]) -> McpServerConfig {
        McpServerConfig {
            name: "web".into(),
            transport: McpTransport::Http {
                url: url.into(),
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }

    #[test]
    fn names_that_cannot_prefix_tools_are_refused() {
        for bad in ["", "a__b", "a b", "a.b", "ä", &"x".repeat(33), "a/b"] {
            assert_eq!(
                stdio(bad).validate(),
                Err(McpConfigError::InvalidName(bad.into())),
                "{bad:?}"
            );
        }
        for good in ["a", "git-hub", "my_srv", "S3"] {
            assert_eq!(stdio(good).validate(), Ok(()), "{good}");
        }
    }

    #[test]
    fn a_zero_timeout_an_empty_command_and_a_bad_url_are_refused() {
        let mut config = stdio("a");
        config.call_timeout = Duration::ZERO;
        assert!(matches!(
            config.validate(),
            Err(McpConfigError::ZeroTimeout(_))
        ));
        let mut config = stdio("a");
        config.transport = McpTransport::Stdio {
            command: " ".into(),
            args: vec![],
            env: BTreeMap::new(),
            launcher: vec![],
        };
        assert!(matches!(
            config.validate(),
            Err(McpConfigError::EmptyCommand(_))
        ));
        assert!(matches!(
            http("file:///etc/passwd", &[]).validate(),
            Err(McpConfigError::InvalidUrl(_))
        ));
        assert_eq!(http("HTTPS://example.com/mcp", &[]).validate(), Ok(()));
    }

    #[test]
    fn a_header_error_names_the_header_never_its_value() {
        let err = http(
            "https://x/mcp",
            &[("Authorization", "Bearer sk-1\nInjected: yes")],
        )
        .validate()
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("Authorization"), "{text}");
        assert!(!text.contains("sk-1"), "{text}");
    }

    #[test]
    fn env_values_header_values_and_url_passwords_are_redacted() {
        let text = stdio("a")
            .redactor()
            .redact("spawn failed with API_KEY=sk-secret-value");
        assert!(!text.contains("sk-secret-value"), "{text}");
        let config = http(
            "https://user:hunter2hunter2@example.com/mcp",
            &[("Authorization", "Bearer tok-abcdef123")],
        );
        let text = config
            .redactor()
            .redact("401 for tok-abcdef123 at https://user:hunter2hunter2@example.com/mcp");
        assert!(!text.contains("tok-abcdef123"), "{text}");
        assert!(!text.contains("hunter2hunter2"), "{text}");
    }
}
