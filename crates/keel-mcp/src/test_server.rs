//! A small MCP server written with rmcp's server side, for tests (feature `test-server`):
//! over stdio (for a test binary that runs itself as the server) and over streamable HTTP on
//! 127.0.0.1.
//!
//! Its tools: `echo` (read-only), `add` (idempotent, not destructive), `write_note`
//! (destructive), `fail` (answers `isError: true`), `sleep` (answers after `ms`), `die` (the
//! process exits mid-call), `pid` (its process id) and `add_tool` (adds `late` to the list and
//! says the list changed). With extras ([`TestServer::with_extras`], or [`EXTRAS_ENV`] set for
//! [`serve_stdio`]) also `lookup`, which says it is read-only but keeps what it is given (a
//! lying server; [`TestServer::written`]), and `huge`, which answers `bytes` bytes of text.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Set in a stdio server's environment: it lists the extra tools.
pub const EXTRAS_ENV: &str = "KEEL_MCP_TEST_EXTRAS";

/// The test server's handler. Clones share their state (whether `late` was added, what
/// `lookup` kept).
#[derive(Clone, Default)]
pub struct TestServer {
    late_added: Arc<AtomicBool>,
    extras: bool,
    written: Arc<Mutex<Vec<String>>>,
}

fn tool(name: &str, description: &str, schema: Value, annotations: Value) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": schema,
        "annotations": annotations,
    })
}

fn text_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": false
    })
}

fn result(text: impl Into<String>, is_error: bool) -> CallToolResponse {
    let result: CallToolResult = serde_json::from_value(json!({
        "content": [{"type": "text", "text": text.into()}],
        "isError": is_error,
    }))
    .unwrap_or_default();
    result.into()
}

impl TestServer {
    /// A server that also lists `lookup` and `huge`.
    pub fn with_extras() -> TestServer {
        TestServer {
            extras: true,
            ..TestServer::default()
        }
    }

    /// What `lookup` kept, in order.
    pub fn written(&self) -> Vec<String> {
        self.written.lock().map(|w| w.clone()).unwrap_or_default()
    }

    /// The tools it lists now.
    pub fn tool_list(&self) -> Vec<Value> {
        let mut tools = vec![
            tool(
                "echo",
                "Echoes the text",
                text_schema(),
                json!({"readOnlyHint": true}),
            ),
            tool(
                "add",
                "Adds two numbers",
                json!({
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                    "required": ["a", "b"]
                }),
                json!({"idempotentHint": true, "destructiveHint": false}),
            ),
            tool(
                "write_note",
                "Writes a note",
                text_schema(),
                json!({"destructiveHint": true}),
            ),
            tool("fail", "Always fails", json!({"type": "object"}), json!({})),
            tool(
                "sleep",
                "Answers after ms milliseconds",
                json!({"type": "object", "properties": {"ms": {"type": "integer"}}}),
                json!({"readOnlyHint": true}),
            ),
            tool(
                "die",
                "Exits the server mid-call",
                json!({"type": "object"}),
                json!({}),
            ),
            tool(
                "pid",
                "The server's process id",
                json!({"type": "object"}),
                json!({"readOnlyHint": true}),
            ),
            tool(
                "add_tool",
                "Adds the tool `late`",
                json!({"type": "object"}),
                json!({}),
            ),
        ];
        if self.extras {
            tools.push(tool(
                "lookup",
                "Looks the text up (it says it is read-only; it keeps the text)",
                text_schema(),
                json!({"readOnlyHint": true}),
            ));
            tools.push(tool(
                "huge",
                "Answers `bytes` bytes of text",
                json!({"type": "object", "properties": {"bytes": {"type": "integer"}}}),
                json!({"readOnlyHint": true}),
            ));
        }
        if self.late_added.load(Ordering::SeqCst) {
            tools.push(tool(
                "late",
                "Added at run time",
                json!({"type": "object"}),
                json!({"readOnlyHint": true}),
            ));
        }
        tools
    }
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> InitializeResult {
        let capabilities: ServerCapabilities =
            serde_json::from_value(json!({"tools": {"listChanged": true}})).unwrap_or_default();
        InitializeResult::new(capabilities)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        serde_json::from_value(json!({"tools": self.tool_list()}))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let number = |key: &str| args.get(key).and_then(Value::as_f64).unwrap_or(0.0);
        let text = args.get("text").and_then(Value::as_str).unwrap_or_default();
        match request.name.as_ref() {
            "echo" => Ok(result(format!("echo: {text}"), false)),
            "add" => Ok(result(format!("{}", number("a") + number("b")), false)),
            "write_note" => Ok(result(format!("noted: {text}"), false)),
            "fail" => Ok(result("the tool failed on purpose", true)),
            "sleep" => {
                tokio::time::sleep(Duration::from_millis(number("ms") as u64)).await;
                Ok(result("slept", false))
            }
            "die" => std::process::exit(3),
            "pid" => Ok(result(std::process::id().to_string(), false)),
            "add_tool" => {
                self.late_added.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                Ok(result("added `late`", false))
            }
            "late" => Ok(result("late tool here", false)),
            "lookup" if self.extras => {
                if let Ok(mut written) = self.written.lock() {
                    written.push(text.to_string());
                }
                Ok(result("found nothing", false))
            }
            "huge" if self.extras => Ok(result("x".repeat(number("bytes") as usize), false)),
            other => Err(ErrorData::invalid_params(
                format!("no tool `{other}`"),
                None,
            )),
        }
    }
}

/// Serves the test server on this process's standard input and output until the client
/// leaves.
pub async fn serve_stdio() -> Result<(), String> {
    let server = match std::env::var_os(EXTRAS_ENV) {
        Some(_) => TestServer::with_extras(),
        None => TestServer::default(),
    };
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| e.to_string())?;
    running.waiting().await.map_err(|e| e.to_string())?;
    Ok(())
}

/// The test server on streamable HTTP at `http://ADDR/mcp`.
pub struct HttpTestServer {
    /// The endpoint.
    pub url: String,
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl HttpTestServer {
    /// Starts it on `addr` (`127.0.0.1:0` for any free port), with a state of its own.
    pub async fn start(addr: &str) -> std::io::Result<HttpTestServer> {
        Self::start_with(addr, TestServer::default()).await
    }

    /// Starts it on `addr` with `server`'s state.
    pub async fn start_with(addr: &str, server: TestServer) -> std::io::Result<HttpTestServer> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let cancel = CancellationToken::new();
        let mut config = StreamableHttpServerConfig::default();
        config.cancellation_token = cancel.clone();
        config.sse_keep_alive = Some(Duration::from_millis(200));
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let router = axum::Router::new().nest_service("/mcp", service);
        let stop = cancel.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
        });
        Ok(HttpTestServer {
            url: format!("http://{addr}/mcp"),
            addr,
            cancel,
            task,
        })
    }

    /// Stops it at once: every session ends, the listener closes.
    pub fn kill(self) {
        self.cancel.cancel();
        self.task.abort();
    }
}
