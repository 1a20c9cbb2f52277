//! `http_get` as the model sees it, against a small axum server on 127.0.0.1.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;
use keel_core::{Tool, ToolCall, ToolContext, ToolError, ToolErrorKind, ToolRegistry};
use keel_tools::{HTTP_MODULE, HttpGet, HttpGetConfig, http_tools};
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

/// A test server: its base URL and how many requests reached `/hang`.
struct Server {
    base: String,
    port: u16,
    hung: Arc<AtomicUsize>,
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// Starts the test server on 127.0.0.1 with a port the OS picks.
async fn serve() -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hung = Arc::new(AtomicUsize::new(0));
    let hang_counter = hung.clone();
    let elsewhere = format!("http://localhost:{port}/echo");
    let image: Vec<u8> = [0x89, b'P', b'N', b'G', 0, 0]
        .into_iter()
        .cycle()
        .take(2048)
        .collect();
    let app = Router::new()
        .route("/echo", get(echo))
        .route("/big", get(|| async { "0123456789".repeat(300) }))
        .route(
            "/bytes",
            get(|| async { ([(CONTENT_TYPE, "text/plain")], b"caf\xe9 ok".to_vec()) }),
        )
        .route(
            "/image",
            get(move || async move { ([(CONTENT_TYPE, "image/png")], image) }),
        )
        .route("/empty", get(|| async { StatusCode::NO_CONTENT }))
        .route(
            "/missing",
            get(|| async { (StatusCode::NOT_FOUND, "no such page") }),
        )
        .route(
            "/boom",
            get(|| async {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error:\n  database   is down",
                )
            }),
        )
        .route(
            "/busy",
            get(|| async {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(RETRY_AFTER, "7")],
                    "down for maintenance",
                )
            }),
        )
        .route(
            "/slow-down",
            get(|| async { (StatusCode::TOO_MANY_REQUESTS, "rate limit exceeded") }),
        )
        .route(
            "/hang",
            get(move || async move {
                hang_counter.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await;
            }),
        )
        .route("/redirect", get(|| async { Redirect::temporary("/echo") }))
        .route(
            "/away",
            get(move || async move { Redirect::temporary(&elsewhere) }),
        )
        .route("/loop", get(|| async { Redirect::temporary("/loop") }));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server {
        base: format!("http://127.0.0.1:{port}"),
        port,
        hung,
    }
}

/// Answers with the request headers the tests look for.
async fn echo(headers: HeaderMap) -> impl IntoResponse {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("(absent)")
            .to_string()
    };
    (
        [(CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!(
            "x-test: {}\nuser-agent: {}",
            header("x-test"),
            header(USER_AGENT.as_str())
        ),
    )
}

fn ctx() -> ToolContext {
    ToolContext {
        session_id: "s".into(),
        run_id: "r".into(),
        call_id: "c".into(),
        user_id: None,
        untrusted_source: false,
        place: None,
        cancel: CancellationToken::new(),
    }
}

/// The default configuration, but allowed to fetch from the test servers on 127.0.0.1.
fn local() -> HttpGetConfig {
    HttpGetConfig {
        allow_private: true,
        ..HttpGetConfig::default()
    }
}

fn tool() -> HttpGet {
    HttpGet::new(local())
}

async fn fetch(tool: &HttpGet, url: &str) -> Result<String, ToolError> {
    tool.call(json!({ "url": url }), &ctx())
        .await
        .map(|out| out.content)
}

/// Fetches `url`, expecting an error of `kind`; returns its message.
async fn fails(tool: &HttpGet, url: &str, kind: ToolErrorKind) -> String {
    let err = fetch(tool, url).await.unwrap_err();
    assert_eq!(err.kind, kind, "{url}: {}", err.message);
    err.message
}

#[tokio::test]
async fn a_text_page_comes_with_its_status_line_and_sent_headers() {
    let server = serve().await;
    let args = json!({ "url": server.url("/echo"), "headers": { "X-Test": "sent by the model" } });
    let out = tool().call(args, &ctx()).await.unwrap().content;
    assert_eq!(
        out,
        format!(
            "HTTP 200 OK\ncontent-type: text/plain; charset=utf-8\n\nx-test: sent by the model\n\
             user-agent: keel/{}",
            env!("CARGO_PKG_VERSION")
        )
    );

    let args = json!({ "url": server.url("/echo"), "headers": { "User-Agent": "custom/1" } });
    let out = tool().call(args, &ctx()).await.unwrap().content;
    assert!(
        out.ends_with("x-test: (absent)\nuser-agent: custom/1"),
        "{out}"
    );
}

#[tokio::test]
async fn redirects_are_followed_and_the_final_url_shown() {
    let server = serve().await;
    let out = fetch(&tool(), &server.url("/redirect")).await.unwrap();
    assert!(
        out.starts_with(&format!(
            "HTTP 200 OK\ncontent-type: text/plain; charset=utf-8\nfinal-url: {}\n\nx-test:",
            server.url("/echo")
        )),
        "{out}"
    );
    let message = fails(&tool(), &server.url("/loop"), ToolErrorKind::Failed).await;
    assert!(
        message.contains("redirected more than 10 times"),
        "{message}"
    );
}

#[tokio::test]
async fn bodies_are_text_even_when_not_utf8_or_empty() {
    let server = serve().await;
    let out = fetch(&tool(), &server.url("/bytes")).await.unwrap();
    assert_eq!(
        out,
        "HTTP 200 OK\ncontent-type: text/plain\n\ncaf\u{FFFD} ok"
    );
    let out = fetch(&tool(), &server.url("/empty")).await.unwrap();
    assert_eq!(
        out,
        "HTTP 204 No Content\ncontent-type: (none)\n\n(empty body)"
    );
}

#[tokio::test]
async fn a_body_over_max_bytes_is_cut_with_a_note() {
    let server = serve().await;
    let small = HttpGet::new(HttpGetConfig {
        max_bytes: 1000,
        ..local()
    });
    let out = fetch(&small, &server.url("/big")).await.unwrap();
    let (head, body) = out.split_once("\n\n").unwrap();
    assert_eq!(head, "HTTP 200 OK\ncontent-type: text/plain; charset=utf-8");
    let (text, note) = body.split_once('\n').unwrap();
    assert_eq!(text, "0123456789".repeat(100));
    assert_eq!(
        note,
        "[body cut: showing the first 1000 of 3000 bytes; 2000 bytes left out]"
    );
}

#[tokio::test]
async fn binary_content_is_described_not_dumped() {
    let server = serve().await;
    let out = fetch(&tool(), &server.url("/image")).await.unwrap();
    assert_eq!(
        out,
        "HTTP 200 OK\ncontent-type: image/png\n\n[binary content not shown: image/png, 2048 bytes]"
    );
}

#[tokio::test]
async fn a_404_is_a_final_failure_naming_status_and_url() {
    let server = serve().await;
    let url = server.url("/missing");
    let message = fails(&tool(), &url, ToolErrorKind::Failed).await;
    assert_eq!(
        message,
        format!("HTTP 404 Not Found: {url}; the server said: no such page")
    );
}

#[tokio::test]
async fn server_errors_and_rate_limits_are_transient() {
    let server = serve().await;
    let host = format!("127.0.0.1:{}", server.port);
    let message = fails(&tool(), &server.url("/boom"), ToolErrorKind::Transient).await;
    assert_eq!(
        message,
        format!("HTTP 500 Internal Server Error from {host}: internal error: database is down")
    );
    let message = fails(&tool(), &server.url("/busy"), ToolErrorKind::Transient).await;
    assert_eq!(
        message,
        format!("HTTP 503 Service Unavailable from {host}: down for maintenance (Retry-After: 7)")
    );
    let message = fails(&tool(), &server.url("/slow-down"), ToolErrorKind::Transient).await;
    assert_eq!(
        message,
        format!("HTTP 429 Too Many Requests from {host}: rate limit exceeded")
    );
}

#[tokio::test(start_paused = true)]
async fn a_server_that_never_answers_times_out_transiently() {
    let server = serve().await;
    let start = tokio::time::Instant::now();
    let url = server.url("/hang");
    let message = fails(&tool(), &url, ToolErrorKind::Transient).await;
    assert_eq!(
        message,
        format!(
            "GET {url} timed out after 30 s: 127.0.0.1:{} did not answer in time",
            server.port
        )
    );
    // The clock is paused: the 30 s passed on tokio's clock, not the wall clock.
    assert!(start.elapsed() >= Duration::from_secs(30));
    assert_eq!(server.hung.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_run_stops_a_pending_request() {
    let server = serve().await;
    let context = ctx();
    let cancel = context.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let start = tokio::time::Instant::now();
    let err = tool()
        .call(json!({ "url": server.url("/hang") }), &context)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Failed);
    assert!(err.message.starts_with("cancelled"), "{}", err.message);
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn a_refused_connection_is_transient() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let message = fails(
        &tool(),
        &format!("http://{addr}/"),
        ToolErrorKind::Transient,
    )
    .await;
    assert_eq!(
        message,
        format!("cannot connect to {addr}: connection refused")
    );
}

#[tokio::test]
async fn a_connection_closed_without_an_answer_is_transient() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 1024];
        let _ = socket.read(&mut request).await;
        // Dropping the socket closes the connection before any response.
    });
    let url = format!("http://{addr}/");
    let message = fails(&tool(), &url, ToolErrorKind::Transient).await;
    assert!(
        message.starts_with(&format!("GET {url} failed: ")),
        "{message}"
    );
}

#[tokio::test]
async fn tls_to_a_plain_http_server_fails_for_good() {
    let server = serve().await;
    let url = format!("https://127.0.0.1:{}/echo", server.port);
    let message = fails(&tool(), &url, ToolErrorKind::Failed).await;
    assert!(message.contains("TLS handshake failed"), "{message}");
}

#[tokio::test]
async fn only_http_and_https_urls_are_fetched() {
    for url in ["ftp://example.com/file.txt", "file:///etc/passwd"] {
        let message = fails(&tool(), url, ToolErrorKind::InvalidArguments).await;
        assert!(
            message.contains("only http and https URLs are supported"),
            "{message}"
        );
    }
    let message = fails(&tool(), "example.com", ToolErrorKind::InvalidArguments).await;
    assert!(message.contains("not a valid URL"), "{message}");
}

#[tokio::test]
async fn hosts_outside_the_allow_list_are_denied_also_after_a_redirect() {
    let server = serve().await;
    let guarded = HttpGet::new(HttpGetConfig {
        allowed_hosts: vec!["127.0.0.1".into(), "example.com".into()],
        ..local()
    });
    assert!(fetch(&guarded, &server.url("/echo")).await.is_ok());

    let message = fails(&guarded, "https://evil.example.net/", ToolErrorKind::Denied).await;
    assert!(
        message.contains("evil.example.net is not allowed"),
        "{message}"
    );
    assert!(message.contains("127.0.0.1, example.com"), "{message}");

    let message = fails(&guarded, &server.url("/away"), ToolErrorKind::Denied).await;
    assert!(message.contains("localhost is not allowed"), "{message}");
    assert!(message.contains("redirected there"), "{message}");
}

fn registry() -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for tool in http_tools(local()) {
        registry.register(tool).unwrap();
    }
    registry
}

fn call(arguments: &str) -> ToolCall {
    ToolCall {
        id: "c".into(),
        name: "http_get".into(),
        arguments: arguments.into(),
    }
}

#[test]
fn the_spec_is_an_idempotent_closed_schema() {
    let specs = registry().specs();
    assert_eq!(specs.len(), 1);
    let spec = &specs[0];
    assert_eq!(spec.name, "http_get");
    assert!(spec.idempotent && !spec.interactive);
    assert_eq!(spec.module.as_deref(), Some(HTTP_MODULE));
    let schema = &spec.parameters;
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["required"], json!(["url"]));
    assert_eq!(schema["properties"]["url"]["type"], "string");
    assert_eq!(
        schema["properties"]["headers"]["additionalProperties"]["type"],
        "string"
    );
    assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
}

#[test]
fn the_registry_rejects_wrong_arguments() {
    let registry = registry();
    for (arguments, mentions) in [
        ("{}", "url"),
        (r#"{"url": 3}"#, "/url"),
        (r#"{"url": "http://a", "headers": {"X": 1}}"#, "/headers"),
        (r#"{"url": "http://a", "method": "POST"}"#, "method"),
    ] {
        let err = registry.prepare(&call(arguments)).err().unwrap();
        assert!(err.contains(mentions), "{arguments}: {err}");
    }
}

#[tokio::test]
async fn a_prepared_call_runs() {
    let server = serve().await;
    let registry = registry();
    let arguments = json!({ "url": server.url("/echo"), "headers": null }).to_string();
    let prepared = registry.prepare(&call(&arguments)).ok().unwrap();
    let out = prepared.tool.call(prepared.args, &ctx()).await.unwrap();
    assert!(out.content.starts_with("HTTP 200 OK\n"), "{}", out.content);
}
