//! HTTP tools: `http_get` fetches a URL and hands the model the response as text.
//!
//! The error kind carries keel's retry decision: timeouts, network failures, 429 and 5xx are
//! [`ToolErrorKind::Transient`](keel_core::ToolErrorKind::Transient), so the loop retries the
//! (idempotent) call; every other failure goes straight back to the model.

mod address;
mod body;
mod failure;
mod get;
mod hosts;
#[cfg(test)]
mod redirect_tests;

use std::sync::Arc;
use std::time::Duration;

use keel_core::Tool;

pub use get::HttpGet;

/// The module name HTTP tools declare in their specs, for persona filtering.
pub const HTTP_MODULE: &str = "http";

/// How `http_get` behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpGetConfig {
    /// The longest a whole request may take, from connecting to the last byte of the body.
    /// Default: 30 s.
    pub timeout: Duration,
    /// The most body bytes shown to the model; a longer body is cut with a note saying how much
    /// was left out. Default: 1 MiB.
    pub max_bytes: usize,
    /// The hosts the tool may fetch from: a URL's host must equal one of them or be a subdomain
    /// of one (`example.com` allows `api.example.com`). Redirects are held to the same rule.
    /// Empty (the default) allows any host.
    pub allowed_hosts: Vec<String>,
    /// Whether loopback, private, link-local, multicast, unspecified and other non-public
    /// addresses may be fetched. Off (the default), they are refused: checked on IP literals in
    /// the URL and in every redirect, and on the addresses a host name resolves to.
    pub allow_private: bool,
    /// The `User-Agent` sent unless the call sets its own. Default: `keel/<version>`.
    pub user_agent: String,
}

impl Default for HttpGetConfig {
    fn default() -> Self {
        HttpGetConfig {
            timeout: Duration::from_secs(30),
            max_bytes: 1024 * 1024,
            allowed_hosts: Vec::new(),
            allow_private: false,
            user_agent: concat!("keel/", env!("CARGO_PKG_VERSION")).to_string(),
        }
    }
}

/// The HTTP tools (today only `http_get`), configured by `config`.
pub fn http_tools(config: HttpGetConfig) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(HttpGet::new(config))]
}
