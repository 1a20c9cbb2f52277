//! Redirects are held to the address rule on every hop. The "public" server stands on
//! 127.0.0.2, which these tests' rule counts as public; its redirects lead to loopback.

use std::net::{IpAddr, Ipv4Addr};

use axum::Router;
use axum::response::Redirect;
use axum::routing::get;
use keel_core::{Tool, ToolContext, ToolErrorKind};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::address::AddressRule;
use super::{HttpGet, HttpGetConfig};

const PUBLIC: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A server on 127.0.0.2 whose `/to?url=` redirects to `url`; its base URL.
async fn redirecting_server() -> String {
    let listener = tokio::net::TcpListener::bind((PUBLIC, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = Router::new()
        .route("/ok", get(|| async { "fine" }))
        .route(
            "/to-literal",
            get(move || async move { Redirect::temporary(&format!("http://127.0.0.1:{port}/ok")) }),
        )
        .route(
            "/to-name",
            get(move || async move { Redirect::temporary(&format!("http://localhost:{port}/ok")) }),
        )
        .route(
            "/to-decimal",
            get(
                move || async move { Redirect::temporary(&format!("http://2130706433:{port}/ok")) },
            ),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{PUBLIC}:{port}")
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

#[tokio::test]
async fn a_redirect_to_a_loopback_address_is_refused() {
    let base = redirecting_server().await;
    let rule = AddressRule::new(false).treating_as_public(PUBLIC);
    let tool = HttpGet::with_address_rule(HttpGetConfig::default(), rule);
    let context = ctx();
    let fetch = |path: &str| tool.call(json!({ "url": format!("{base}{path}") }), &context);

    let out = fetch("/ok").await.unwrap();
    assert!(out.content.starts_with("HTTP 200 OK"), "{}", out.content);

    for (path, says) in [
        ("/to-literal", "127.0.0.1 is a loopback address"),
        ("/to-decimal", "127.0.0.1 is a loopback address"),
        (
            "/to-name",
            "localhost resolves to 127.0.0.1, a loopback address",
        ),
    ] {
        let err = fetch(path).await.unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::Denied, "{path}: {}", err.message);
        assert!(err.message.contains(says), "{path}: {}", err.message);
        assert!(
            err.message.contains("http_allow_private = true"),
            "{path}: {}",
            err.message
        );
    }
}
