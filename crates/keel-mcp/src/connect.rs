//! Opening one MCP session: spawning a stdio server or reaching an HTTP one, the MCP
//! handshake, and hearing the server say its tool list changed.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{Notify, watch};

use crate::child::ChildTransport;
use crate::config::{McpServerConfig, McpTransport};
use crate::http_client::WatchedClient;

/// How long reaching an HTTP server's host may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines of a stdio server's standard error kept to say why it stopped.
const STDERR_LINES: usize = 5;
/// Characters kept of each of those lines.
const STDERR_LINE_CHARS: usize = 300;

/// keel's side of a session: tells the supervisor when the server's tools changed.
pub(crate) struct ClientHandler {
    /// Notified on `notifications/tools/list_changed`.
    pub(crate) tools_changed: Arc<Notify>,
}

impl rmcp::ClientHandler for ClientHandler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("keel", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// An open session.
pub(crate) type Session = RunningService<RoleClient, ClientHandler>;

/// The last lines a stdio server wrote to its standard error.
#[derive(Clone)]
pub(crate) struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    /// True once the server's standard error closed (or there is none to read).
    closed: Arc<watch::Sender<bool>>,
}

impl Default for StderrTail {
    fn default() -> Self {
        StderrTail {
            lines: Arc::default(),
            closed: Arc::new(watch::channel(true).0),
        }
    }
}

impl StderrTail {
    /// The kept lines, joined; empty when there are none. A server that just died may still
    /// be flushing its last words: they are waited for, up to `grace`.
    pub(crate) async fn text(&self, grace: Duration) -> String {
        let mut closed = self.closed.subscribe();
        let _ = tokio::time::timeout(grace, closed.wait_for(|closed| *closed)).await;
        self.lines
            .lock()
            .map(|lines| lines.iter().cloned().collect::<Vec<_>>().join(" | "))
            .unwrap_or_default()
    }

    fn push(&self, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        if let Ok(mut lines) = self.lines.lock() {
            if lines.len() == STDERR_LINES {
                lines.pop_front();
            }
            lines.push_back(line.chars().take(STDERR_LINE_CHARS).collect());
        }
    }
}

/// Opens a session with the server and completes the MCP handshake. The error is for people
/// (not yet redacted). `too_large` is set when an HTTP server's reply is refused for its size.
pub(crate) async fn connect(
    config: &McpServerConfig,
    handler: ClientHandler,
    stderr: &StderrTail,
    too_large: &Arc<AtomicBool>,
) -> Result<Session, String> {
    match &config.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            launcher,
        } => {
            let mut cmd = match launcher.split_first() {
                // The launcher checks nothing: a missing program is its error, on stderr.
                Some((program, arguments)) => {
                    let mut cmd = tokio::process::Command::new(program);
                    cmd.args(arguments).arg(command);
                    cmd
                }
                None => tokio::process::Command::new(command),
            };
            cmd.args(args).envs(env).kill_on_drop(true);
            let (process, err) =
                ChildTransport::spawn(cmd).map_err(|e| format!("cannot start `{command}`: {e}"))?;
            if let Some(err) = err {
                let tail = stderr.clone();
                tail.closed.send_replace(false);
                tokio::spawn(async move {
                    let mut lines = BufReader::new(err).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tail.push(&line);
                    }
                    tail.closed.send_replace(true);
                });
            }
            handler
                .serve(process)
                .await
                .map_err(|e| format!("the MCP handshake failed: {e}"))
        }
        McpTransport::Http { url, headers } => {
            install_crypto_provider();
            let client = reqwest::Client::builder()
                .user_agent(concat!("keel/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(CONNECT_TIMEOUT)
                .build()
                .map_err(|e| format!("cannot set up an HTTP client: {e}"))?;
            let mut custom = HashMap::new();
            for (name, value) in headers {
                // Checked by `McpServerConfig::validate`; a bad one is skipped, never shown.
                if let (Ok(name), Ok(value)) = (
                    reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                    reqwest::header::HeaderValue::from_str(value),
                ) {
                    custom.insert(name, value);
                }
            }
            let mut config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            config.retry_config = Arc::new(stream_retries());
            let client = WatchedClient::new(client, too_large.clone());
            let transport = StreamableHttpClientTransport::with_client(client, config);
            handler
                .serve(transport)
                .await
                .map_err(|e| format!("cannot open an MCP session at {url}: {e}"))
        }
    }
}

/// How often a broken event stream is resumed before the session counts as lost (rmcp's
/// default retries forever, so a call to a server that went away would wait out its whole
/// timeout): 0.25 s, 0.5 s, 1 s.
fn stream_retries() -> ExponentialBackoff {
    let mut retries = ExponentialBackoff::default();
    retries.max_times = Some(3);
    retries.base_duration = Duration::from_millis(250);
    retries.max_delay = Some(Duration::from_secs(2));
    retries
}

/// Installs rustls's `ring` crypto provider as the process default, once: keel's reqwest is
/// built without a provider of its own.
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // An error only means another provider was installed first, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
