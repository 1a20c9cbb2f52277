//! `http_get` refuses loopback, private and other non-public addresses unless
//! `allow_private` is set: IP literals in every spelling, and host names that resolve to them.
//! A counting server on 127.0.0.1 proves no refused request reached it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use keel_core::{Tool, ToolContext, ToolErrorKind};
use keel_tools::{HttpGet, HttpGetConfig};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// A server on 127.0.0.1 that answers every connection with a 200 and counts them.
async fn counting_server() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            // One small GET fits in one read; answer only after it arrived.
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .await;
        }
    });
    (port, count)
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

async fn fetch(tool: &HttpGet, url: &str) -> Result<String, keel_core::ToolError> {
    tool.call(json!({ "url": url }), &ctx())
        .await
        .map(|out| out.content)
}

/// Fetches `url` with the default configuration, expecting a denial; returns its message.
async fn refused(url: &str) -> String {
    let err = fetch(&HttpGet::new(HttpGetConfig::default()), url)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ToolErrorKind::Denied, "{url}: {}", err.message);
    assert!(
        err.message
            .contains("refuses loopback, private, link-local, multicast and unspecified"),
        "{url}: {}",
        err.message
    );
    assert!(
        err.message.contains("`[tools] http_allow_private = true`"),
        "{url}: {}",
        err.message
    );
    err.message
}

#[tokio::test]
async fn every_spelling_of_a_loopback_address_is_refused() {
    let (port, count) = counting_server().await;
    for (host, says) in [
        ("127.0.0.1", "127.0.0.1 is a loopback address"),
        ("2130706433", "127.0.0.1 is a loopback address"),
        ("0x7f000001", "127.0.0.1 is a loopback address"),
        ("0177.0.0.1", "127.0.0.1 is a loopback address"),
        ("0", "0.0.0.0 is an unspecified address"),
        ("[::1]", "::1 is a loopback address"),
        (
            "[::ffff:127.0.0.1]",
            "::ffff:127.0.0.1 is a loopback address",
        ),
    ] {
        let url = format!("http://{host}:{port}/");
        let message = refused(&url).await;
        assert!(message.contains(says), "{url}: {message}");
    }
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "no request reached the server"
    );
}

#[tokio::test]
async fn private_and_metadata_addresses_are_refused_without_a_connection() {
    for (url, says) in [
        (
            "http://169.254.169.254/latest/meta-data/",
            "169.254.169.254 is a link-local address",
        ),
        ("http://10.0.0.1/", "10.0.0.1 is a private address"),
        ("http://192.168.1.1/", "192.168.1.1 is a private address"),
        (
            "http://[fd00::1]/",
            "fd00::1 is a private (unique local) address",
        ),
        ("http://224.0.0.1/", "224.0.0.1 is a multicast address"),
    ] {
        let message = refused(url).await;
        assert!(message.contains(says), "{url}: {message}");
    }
}

#[tokio::test]
async fn a_name_that_resolves_to_loopback_is_refused_after_dns() {
    let (port, count) = counting_server().await;
    let url = format!("http://localhost:{port}/");
    let message = refused(&url).await;
    assert!(
        message.contains("localhost resolves to") && message.contains("a loopback address"),
        "{message}"
    );
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "no request reached the server"
    );
}

#[tokio::test]
async fn allow_private_opts_in() {
    let (port, count) = counting_server().await;
    let open = HttpGet::new(HttpGetConfig {
        allow_private: true,
        ..HttpGetConfig::default()
    });
    for host in ["127.0.0.1", "2130706433", "localhost"] {
        let out = fetch(&open, &format!("http://{host}:{port}/"))
            .await
            .unwrap();
        assert!(out.starts_with("HTTP 200 OK"), "{host}: {out}");
    }
    assert_eq!(count.load(Ordering::SeqCst), 3);
}
