//! One MCP server kept alive: its supervisor opens a session, lists the tools, lists them again
//! when the server says they changed, and when the session ends restarts it after a growing
//! pause. Calls go through the current session; while there is none they fail at once with
//! a clear tool error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use keel_core::redact::Redactor;
use keel_core::{Tool, ToolError};
use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RoleClient};
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::config::McpServerConfig;
use crate::connect::{ClientHandler, StderrTail, connect};
use crate::tool::tools_of;

/// The most tools keel takes from one server.
const MAX_TOOLS: usize = 256;

/// How long a dead stdio server's last words on standard error are waited for.
const STDERR_GRACE: Duration = Duration::from_millis(200);

/// How long starting a server (spawn or connect, handshake, first tool list) may take.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How a server is started and restarted: one start (spawn or connect, handshake, first tool
/// list) may take `startup_timeout`; the pauses between restarts of a server whose session
/// ended or could not open start at `first_delay` and double up to `max_delay`. A session
/// that opens resets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// The first pause (0.5 s).
    pub first_delay: Duration,
    /// The longest pause (30 s).
    pub max_delay: Duration,
    /// The most one start may take ([`STARTUP_TIMEOUT`]).
    pub startup_timeout: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            first_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            startup_timeout: STARTUP_TIMEOUT,
        }
    }
}

/// Where a server stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerState {
    /// Its first session is opening.
    Starting,
    /// A session is open.
    Running,
    /// Its session ended or could not open; it is started again after a pause.
    Restarting {
        /// Why, redacted.
        reason: String,
    },
}

struct Inner {
    state: ServerState,
    /// The open session's peer, what tells its supervisor a call found it broken, and whether
    /// a reply was refused for its size (then the session ends).
    peer: Option<(Peer<RoleClient>, Arc<Notify>, Arc<AtomicBool>)>,
    tools: Vec<Arc<dyn Tool>>,
}

/// What the supervisor and the tools share about one server.
pub(crate) struct ServerShared {
    pub(crate) config: McpServerConfig,
    redactor: Redactor,
    inner: Mutex<Inner>,
    /// True once the first attempt to start the server is over, however it went.
    settled: watch::Sender<bool>,
}

impl ServerShared {
    pub(crate) fn new(config: McpServerConfig) -> Arc<ServerShared> {
        Arc::new(ServerShared {
            redactor: config.redactor(),
            config,
            inner: Mutex::new(Inner {
                state: ServerState::Starting,
                peer: None,
                tools: Vec::new(),
            }),
            settled: watch::channel(false).0,
        })
    }

    /// Where the server stands.
    pub(crate) fn state(&self) -> ServerState {
        self.lock(|inner| inner.state.clone())
            .unwrap_or(ServerState::Starting)
    }

    /// Its tools as last listed (kept while it restarts, so a call says why it fails).
    pub(crate) fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.lock(|inner| inner.tools.clone()).unwrap_or_default()
    }

    /// Waits until the first attempt to start the server is over.
    pub(crate) async fn settled(&self) {
        let mut settled = self.settled.subscribe();
        // An error means the sender is gone, which cannot happen while `self` lives.
        let _ = settled.wait_for(|settled| *settled).await;
    }

    fn lock<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> Option<T> {
        self.inner.lock().ok().map(|mut inner| f(&mut inner))
    }

    fn set_down(&self, reason: &str) {
        let reason = self.redactor.redact(reason);
        self.lock(|inner| {
            inner.peer = None;
            inner.state = ServerState::Restarting { reason };
        });
        self.settled.send_replace(true);
    }

    /// Calls `tool` with `args` through the current session, within the call timeout.
    pub(crate) async fn call(
        &self,
        tool: &str,
        args: Value,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, ToolError> {
        let name = &self.config.name;
        let (peer, broken, too_large) = self
            .lock(|inner| match (&inner.state, &inner.peer) {
                (ServerState::Running, Some(peer)) => Ok(peer.clone()),
                (ServerState::Restarting { reason }, _) => Err(ToolError::transient(format!(
                    "MCP server {name} is restarting: {reason}"
                ))),
                _ => Err(ToolError::transient(format!(
                    "MCP server {name} is starting; try again shortly"
                ))),
            })
            .unwrap_or_else(|| Err(ToolError::failed(format!("MCP server {name} is unusable"))))?;
        let Value::Object(arguments) = args else {
            return Err(ToolError::invalid_arguments(
                "the arguments must be a JSON object",
            ));
        };
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let timeout = self.config.call_timeout;
        tokio::select! {
            result = tokio::time::timeout(timeout, peer.call_tool(params)) => match result {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(e)) => {
                    let error = match too_large.load(Ordering::SeqCst) {
                        // The connection ended over a reply too large: this call's, most likely.
                        true => too_large_error(name, tool),
                        false => self.call_error(tool, e),
                    };
                    if error.kind == keel_core::ToolErrorKind::Transient
                        || too_large.load(Ordering::SeqCst)
                    {
                        self.mark_broken(&broken);
                    }
                    Err(error)
                }
                Err(_) => Err(ToolError::transient(format!(
                    "MCP server {name}: `{tool}` did not answer within {} s and was abandoned",
                    seconds(timeout)
                ))),
            },
            () = cancel.cancelled() => Err(ToolError::failed(format!(
                "MCP server {name}: `{tool}` was stopped: the run was cancelled"
            ))),
        }
    }

    /// A call found the session `broken` gone: calls fail at once from now on, and its
    /// supervisor (an HTTP session may not notice a server gone until a request fails) ends it
    /// and starts a new one. A newer session is left alone.
    fn mark_broken(&self, broken: &Arc<Notify>) {
        let current = self.lock(|inner| {
            let current = inner
                .peer
                .as_ref()
                .is_some_and(|(_, notify, _)| Arc::ptr_eq(notify, broken));
            if current {
                inner.peer = None;
                inner.state = ServerState::Restarting {
                    reason: "the connection was lost".into(),
                };
            }
            current
        });
        if current == Some(true) {
            broken.notify_one();
        }
    }

    fn call_error(&self, tool: &str, error: ServiceError) -> ToolError {
        let name = &self.config.name;
        let text = self.redactor.redact(&error.to_string());
        match error {
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                ToolError::transient(format!(
                    "MCP server {name} is restarting: the connection was lost during `{tool}` \
                     ({text})"
                ))
            }
            // Not the server's failure to answer, and asking again gets the same: not retried.
            ServiceError::McpError(e) if crate::capped::is_too_large(&e) => {
                too_large_error(name, tool)
            }
            ServiceError::McpError(e) if e.code == rmcp::model::ErrorCode::INVALID_PARAMS => {
                ToolError::invalid_arguments(format!("MCP server {name}: `{tool}`: {text}"))
            }
            _ => ToolError::failed(format!("MCP server {name}: `{tool}` failed: {text}")),
        }
    }
}

/// The failure of a call whose reply was over [`crate::capped::MAX_MESSAGE_BYTES`]: not the
/// server's failure to answer, and asking again gets the same, so not retried.
fn too_large_error(name: &str, tool: &str) -> ToolError {
    ToolError::failed(format!(
        "MCP server {name}: `{tool}` answered with more than {} MiB, which keel does not take; \
         ask it for less (a narrower query, a smaller page)",
        crate::capped::MAX_MESSAGE_BYTES / (1024 * 1024)
    ))
}

/// Runs `server` until `shutdown`: start, serve, restart with backoff.
pub(crate) async fn supervise(
    server: Arc<ServerShared>,
    policy: RestartPolicy,
    shutdown: CancellationToken,
) {
    let mut delay = policy.first_delay;
    loop {
        let ended = tokio::select! {
            ended = run_session(&server, policy.startup_timeout) => ended,
            () = shutdown.cancelled() => return,
        };
        if let Some(reason) = ended.reason {
            server.set_down(&reason);
        }
        if ended.opened {
            delay = policy.first_delay;
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.cancelled() => return,
        }
        delay = (delay * 2).min(policy.max_delay);
    }
}

/// How a session ended.
struct Ended {
    /// The session opened (the backoff starts again).
    opened: bool,
    /// Why it ended, for people.
    reason: Option<String>,
}

/// One session, from opening to its end.
async fn run_session(server: &Arc<ServerShared>, startup_timeout: Duration) -> Ended {
    let name = &server.config.name;
    let tools_changed = Arc::new(Notify::new());
    let too_large = Arc::new(AtomicBool::new(false));
    let stderr = StderrTail::default();
    let handler = ClientHandler {
        tools_changed: tools_changed.clone(),
    };
    let weak = Arc::downgrade(server);
    let opening = async {
        let session = connect(&server.config, handler, &stderr, &too_large).await?;
        let tools = list_tools(session.peer(), name, &weak).await?;
        Ok::<_, String>((session, tools))
    };
    let (session, tools) = match tokio::time::timeout(startup_timeout, opening).await {
        Ok(Ok(opened)) => opened,
        Ok(Err(reason)) => {
            return Ended {
                opened: false,
                reason: Some(with_stderr(reason, &stderr).await),
            };
        }
        Err(_) => {
            return Ended {
                opened: false,
                reason: Some(
                    with_stderr(
                        format!("it did not start within {} s", seconds(startup_timeout)),
                        &stderr,
                    )
                    .await,
                ),
            };
        }
    };
    let peer = session.peer().clone();
    let broken = Arc::new(Notify::new());
    server.lock(|inner| {
        inner.peer = Some((peer.clone(), broken.clone(), too_large.clone()));
        inner.tools = tools;
        inner.state = ServerState::Running;
    });
    server.settled.send_replace(true);
    let waiting = session.waiting();
    tokio::pin!(waiting);
    loop {
        tokio::select! {
            quit = &mut waiting => {
                let why = match quit {
                    Ok(rmcp::service::QuitReason::Closed) => "the server closed the connection".into(),
                    Ok(other) => format!("the session ended ({other:?})"),
                    Err(e) => format!("the session failed ({e})"),
                };
                return Ended { opened: true, reason: Some(with_stderr(why, &stderr).await) };
            }
            () = broken.notified() => {
                return Ended {
                    opened: true,
                    reason: Some(with_stderr("the connection was lost".into(), &stderr).await),
                };
            }
            () = tools_changed.notified() => {
                // A failed listing keeps the old list; the session's end, if that is why,
                // shows next.
                let listing = tokio::time::timeout(server.config.call_timeout, list_tools(&peer, name, &weak));
                if let Ok(Ok(tools)) = listing.await {
                    server.lock(|inner| inner.tools = tools);
                }
            }
        }
    }
}

async fn list_tools(
    peer: &Peer<RoleClient>,
    name: &str,
    server: &Weak<ServerShared>,
) -> Result<Vec<Arc<dyn Tool>>, String> {
    let listed = peer
        .list_all_tools()
        .await
        .map_err(|e| format!("listing its tools failed: {e}"))?;
    Ok(tools_of(name, &listed, server, MAX_TOOLS))
}

async fn with_stderr(reason: String, stderr: &StderrTail) -> String {
    let tail = stderr.text(STDERR_GRACE).await;
    if tail.is_empty() {
        reason
    } else {
        format!("{reason}; its last words: {tail}")
    }
}

fn seconds(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs.fract() == 0.0 {
        format!("{secs:.0}")
    } else {
        format!("{secs}")
    }
}
