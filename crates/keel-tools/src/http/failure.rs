//! Failed fetches as the model sees them. The kind decides whether keel retries the call:
//! timeouts, network failures, 429 and 5xx are `Transient`; everything else is final.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::time::Duration;

use keel_core::ToolError;
use reqwest::header::RETRY_AFTER;
use reqwest::{Response, StatusCode, Url};

use super::address::NonPublicAddress;
use super::body::{self, Body};
use super::hosts::AllowedHosts;

/// The most redirects followed for one call, as in reqwest's default policy.
pub(super) const MAX_REDIRECTS: usize = 10;

/// Why the redirect policy stopped following redirects; found again in reqwest's error.
#[derive(Debug)]
pub(super) enum RedirectStop {
    /// The redirect led to a host outside the allow-list.
    Denied(Url),
    /// More than [`MAX_REDIRECTS`] redirects.
    TooMany,
}

impl fmt::Display for RedirectStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedirectStop::Denied(url) => write!(f, "redirect to a host that is not allowed: {url}"),
            RedirectStop::TooMany => write!(f, "more than {MAX_REDIRECTS} redirects"),
        }
    }
}

impl StdError for RedirectStop {}

/// The error for a response that is not a success. 429 and 5xx are transient (naming the host
/// and any `Retry-After`); every other status is final (naming the URL). `body` is the start of
/// the error body, when it could be read.
pub(super) fn status(response: &Response, body: Option<&Body>) -> ToolError {
    let status = response.status();
    let line = body::status_line(status);
    let excerpt = body.and_then(|body| body::excerpt(response, body));
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        let mut message = format!("{line} from {}", host_label(response.url()));
        if let Some(excerpt) = excerpt {
            message.push_str(&format!(": {excerpt}"));
        }
        if let Some(wait) = retry_after(response) {
            message.push_str(&format!(" (Retry-After: {wait})"));
        }
        ToolError::transient(message)
    } else {
        let mut message = format!("{line}: {}", response.url());
        if let Some(excerpt) = excerpt {
            message.push_str(&format!("; the server said: {excerpt}"));
        }
        ToolError::failed(message)
    }
}

/// The error for a request that took longer than `limit`.
pub(super) fn timed_out(url: &Url, limit: Duration) -> ToolError {
    ToolError::transient(format!(
        "GET {url} timed out after {}: {} did not answer in time",
        duration(limit),
        host_label(url)
    ))
}

/// The error for a request reqwest could not complete: network failures are transient; a TLS
/// failure or a refused redirect is not.
pub(super) fn transport(err: &reqwest::Error, url: &Url, hosts: &AllowedHosts) -> ToolError {
    let host = host_label(url);
    if let Some(stop) = chain(err).find_map(|layer| layer.downcast_ref::<RedirectStop>()) {
        return match stop {
            RedirectStop::Denied(target) => ToolError::denied(format!(
                "{} (GET {url} redirected there)",
                hosts.refusal(target)
            )),
            RedirectStop::TooMany => ToolError::failed(format!(
                "GET {url} was redirected more than {MAX_REDIRECTS} times; gave up"
            )),
        };
    }
    if let Some(refused) = chain(err).find_map(|layer| layer.downcast_ref::<NonPublicAddress>()) {
        return ToolError::denied(format!("cannot fetch {url}: {refused}"));
    }
    let cause = cause(err);
    if err.is_timeout() {
        ToolError::transient(format!("GET {url} timed out: {cause}"))
    } else if is_tls(err) {
        ToolError::failed(format!(
            "cannot connect to {host}: the TLS handshake failed: {cause}"
        ))
    } else if err.is_dns() {
        ToolError::transient(format!(
            "cannot connect to {host}: DNS lookup failed: {cause}"
        ))
    } else if err.is_connect() {
        ToolError::transient(format!("cannot connect to {host}: {cause}"))
    } else if err.is_builder() {
        ToolError::failed(format!("cannot send GET {url}: {cause}"))
    } else {
        // The connection broke after it was made: reset, closed early, a body cut off.
        ToolError::transient(format!("GET {url} failed: {cause}"))
    }
}

/// The URL's host, with its port when the URL names one.
fn host_label(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_string(),
        (None, _) => url.to_string(),
    }
}

/// The `Retry-After` header as sent (seconds or a date), when readable and short.
fn retry_after(response: &Response) -> Option<String> {
    let value = response.headers().get(RETRY_AFTER)?.to_str().ok()?.trim();
    (!value.is_empty() && value.len() <= 64).then(|| value.to_string())
}

/// `30 s`, `200 ms` or `1.5 s`.
fn duration(limit: Duration) -> String {
    if limit.subsec_nanos() == 0 {
        format!("{} s", limit.as_secs())
    } else if limit < Duration::from_secs(1) {
        format!("{} ms", limit.as_millis())
    } else {
        format!("{:.1} s", limit.as_secs_f64())
    }
}

/// An error and its causes, innermost last. `io::Error` hides the error it wraps from
/// `source()`, so its inner error is taken from `get_ref()` instead.
fn chain<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(err), |&layer| {
        match layer.downcast_ref::<io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
            None => layer.source(),
        }
    })
}

/// True when the failure came from TLS (a bad certificate, a server that does not speak TLS).
fn is_tls(err: &(dyn StdError + 'static)) -> bool {
    chain(err).any(|layer| layer.is::<rustls::Error>())
}

/// The most telling cause of a transport failure, in a few words.
fn cause(err: &(dyn StdError + 'static)) -> String {
    let phrase = chain(err).find_map(|layer| {
        let io = layer.downcast_ref::<io::Error>()?;
        Some(match io.kind() {
            io::ErrorKind::ConnectionRefused => "connection refused",
            io::ErrorKind::ConnectionReset => "connection reset",
            io::ErrorKind::ConnectionAborted => "connection aborted",
            io::ErrorKind::BrokenPipe => "connection broken",
            io::ErrorKind::UnexpectedEof => "connection closed early",
            io::ErrorKind::TimedOut => "timed out",
            io::ErrorKind::HostUnreachable => "host unreachable",
            io::ErrorKind::NetworkUnreachable => "network unreachable",
            _ => return None,
        })
    });
    match phrase {
        Some(phrase) => phrase.to_string(),
        // The innermost layer says what happened; the outer ones only say where.
        None => chain(err)
            .last()
            .map(ToString::to_string)
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(Duration::from_secs(30)), "30 s");
        assert_eq!(duration(Duration::from_millis(200)), "200 ms");
        assert_eq!(duration(Duration::from_millis(1500)), "1.5 s");
    }

    #[test]
    fn hosts_keep_explicit_ports() {
        let url = |s| Url::parse(s).unwrap();
        assert_eq!(
            host_label(&url("http://127.0.0.1:8080/x")),
            "127.0.0.1:8080"
        );
        assert_eq!(host_label(&url("https://example.com:443/")), "example.com");
    }

    #[test]
    fn wrapped_io_errors_are_looked_through() {
        let inner = io::Error::new(io::ErrorKind::ConnectionRefused, "refused");
        let outer = io::Error::other(inner);
        assert_eq!(cause(&outer), "connection refused");
        let tls = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::General("bad".into()),
        );
        assert!(is_tls(&tls));
        assert!(!is_tls(&outer));
    }
}
