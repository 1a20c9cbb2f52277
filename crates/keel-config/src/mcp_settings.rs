//! `[mcp.servers.NAME]`: MCP servers whose tools the agent offers as `NAME__tool`. A server is
//! a program on stdio (`command`, `args`, `env`) or a streamable HTTP endpoint (`url`,
//! `headers`); `timeout_secs` bounds one call (60 by default). `env` values and `headers` may
//! hold keys: no error shows them. A stdio server runs in keel's sandbox when there is one
//! (see [`crate::sandbox_settings`]) unless its table says `sandbox = false`.

use std::collections::BTreeMap;
use std::time::Duration;

use keel_mcp::{DEFAULT_CALL_TIMEOUT, McpServerConfig, McpTransport};
use serde::Deserialize;

/// `[mcp]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// `[mcp.servers.NAME]`, by name.
    #[serde(default)]
    pub servers: BTreeMap<String, McpServerFile>,
}

/// One `[mcp.servers.NAME]` table.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerFile {
    /// The program of a stdio server.
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables added to its environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The endpoint of a streamable HTTP server.
    pub url: Option<String>,
    /// Headers sent with its every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The most one call may take, in seconds (60).
    pub timeout_secs: Option<f64>,
    /// Whether a stdio server runs in keel's sandbox (true).
    pub sandbox: Option<bool>,
}

/// Debug output without the values of `env` and `headers`.
impl std::fmt::Debug for McpServerFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerFile")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field(
                "url",
                &self.url.as_deref().map(keel_core::redact::redact_userinfo),
            )
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout_secs", &self.timeout_secs)
            .field("sandbox", &self.sandbox)
            .finish()
    }
}

impl McpConfig {
    /// The servers as keel-mcp takes them, checked. The error names the table and the key.
    pub fn servers(&self) -> Result<Vec<McpServerConfig>, String> {
        self.servers
            .iter()
            .map(|(name, file)| server(name, file))
            .collect()
    }

    /// The names of the stdio servers whose table says `sandbox = false`.
    pub fn unconfined(&self) -> Vec<String> {
        self.servers
            .iter()
            .filter(|(_, file)| file.sandbox == Some(false))
            .map(|(name, _)| name.clone())
            .collect()
    }
}

fn server(name: &str, file: &McpServerFile) -> Result<McpServerConfig, String> {
    let table = format!("[mcp.servers.{name}]");
    let transport = match (&file.command, &file.url) {
        (Some(command), None) => {
            if !file.headers.is_empty() {
                return Err(format!(
                    "{table}: headers are for a url server, not a command"
                ));
            }
            McpTransport::Stdio {
                command: command.clone(),
                args: file.args.clone(),
                env: file.env.clone(),
                // Set when the agent is assembled (`sandbox_settings`).
                launcher: Vec::new(),
            }
        }
        (None, Some(url)) => {
            if !file.args.is_empty() || !file.env.is_empty() {
                return Err(format!(
                    "{table}: args and env are for a command server, not a url"
                ));
            }
            if file.sandbox.is_some() {
                return Err(format!(
                    "{table}: sandbox is for a command server, not a url"
                ));
            }
            McpTransport::Http {
                url: url.clone(),
                headers: file.headers.clone(),
            }
        }
        _ => return Err(format!("{table}: set either command (stdio) or url (HTTP)")),
    };
    let call_timeout = match file.timeout_secs {
        None => DEFAULT_CALL_TIMEOUT,
        Some(secs) if secs.is_finite() && secs > 0.0 && secs < 1e9 => Duration::from_secs_f64(secs),
        Some(secs) => {
            return Err(format!(
                "{table} timeout_secs = {secs}: use a number of seconds above 0"
            ));
        }
    };
    let config = McpServerConfig {
        name: name.to_string(),
        transport,
        call_timeout,
    };
    config.validate().map_err(|e| format!("{table}: {e}"))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<McpServerConfig>, String> {
        let config: McpConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.servers()
    }

    #[test]
    fn stdio_and_http_servers_are_read() {
        let servers = parse(
            r#"
            [servers.files]
            command = "npx"
            args = ["-y", "server-files"]
            env = { TOKEN = "abc123456" }

            [servers.web]
            url = "https://mcp.example.com/mcp"
            headers = { Authorization = "Bearer xyz987654" }
            timeout_secs = 5
            "#,
        )
        .unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0].name, "files");
        assert_eq!(servers[0].call_timeout, DEFAULT_CALL_TIMEOUT);
        assert!(
            matches!(&servers[0].transport, McpTransport::Stdio { args, .. } if args.len() == 2)
        );
        assert_eq!(servers[1].call_timeout, Duration::from_secs(5));
        assert!(
            matches!(&servers[1].transport, McpTransport::Http { headers, .. } if headers.len() == 1)
        );
    }

    #[test]
    fn a_server_must_be_one_kind_or_the_other() {
        let both = parse("[servers.x]\ncommand = \"a\"\nurl = \"http://h/mcp\"").unwrap_err();
        assert!(
            both.contains("[mcp.servers.x]: set either command"),
            "{both}"
        );
        let neither = parse("[servers.x]\ntimeout_secs = 3").unwrap_err();
        assert!(neither.contains("set either command"), "{neither}");
        let mixed = parse("[servers.x]\nurl = \"http://h/mcp\"\nenv = { A = \"b\" }").unwrap_err();
        assert!(mixed.contains("args and env are for a command"), "{mixed}");
        let mixed = parse("[servers.x]\ncommand = \"a\"\nheaders = { A = \"b\" }").unwrap_err();
        assert!(mixed.contains("headers are for a url"), "{mixed}");
        let mixed = parse("[servers.x]\nurl = \"http://h/mcp\"\nsandbox = false").unwrap_err();
        assert!(mixed.contains("sandbox is for a command"), "{mixed}");
    }

    #[test]
    fn a_stdio_server_may_run_outside_the_sandbox() {
        let config: McpConfig = toml::from_str(
            "[servers.a]\ncommand = \"a\"\n[servers.b]\ncommand = \"b\"\nsandbox = false\n\
             [servers.c]\ncommand = \"c\"\nsandbox = true",
        )
        .unwrap();
        assert_eq!(config.unconfined(), ["b"]);
    }

    #[test]
    fn bad_names_timeouts_and_unknown_keys_are_refused() {
        let name = parse("[servers.\"a__b\"]\ncommand = \"a\"").unwrap_err();
        assert!(name.contains("not allowed"), "{name}");
        for bad in ["0", "-1", "nan", "inf"] {
            let err = parse(&format!(
                "[servers.x]\ncommand = \"a\"\ntimeout_secs = {bad}"
            ))
            .unwrap_err();
            assert!(err.contains("timeout_secs"), "{bad}: {err}");
        }
        let unknown = parse("[servers.x]\ncommand = \"a\"\ncmd = \"b\"").unwrap_err();
        assert!(unknown.contains("unknown field"), "{unknown}");
    }

    #[test]
    fn errors_and_debug_output_never_show_header_or_env_values() {
        let err = parse(
            "[servers.x]\nurl = \"http://h/mcp\"\nheaders = { \"Bad Name\" = \"sk-hidden-1\" }",
        )
        .unwrap_err();
        assert!(!err.contains("sk-hidden-1"), "{err}");
        let config: McpConfig =
            toml::from_str("[servers.x]\ncommand = \"a\"\nenv = { KEY = \"sk-hidden-2\" }")
                .unwrap();
        let debug = format!("{config:?}");
        assert!(
            debug.contains("KEY") && !debug.contains("sk-hidden-2"),
            "{debug}"
        );
    }
}
