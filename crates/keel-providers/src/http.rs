//! HTTP plumbing shared by the adapters: building the client (TLS included), sending a request
//! and classifying a failed status, reading a body, and describing transport failures.

use std::error::Error as StdError;
use std::io;
use std::sync::Once;
use std::time::Duration;

use bytes::Bytes;
use keel_core::{ProviderError, ProviderErrorKind};
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use reqwest::{RequestBuilder, Response, Url};

use crate::classify::{classify_http_error, describe_text_body};

/// Why an adapter could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The base URL does not parse or is not http(s).
    #[error("invalid base URL {url:?}: {reason}")]
    InvalidBaseUrl {
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// reqwest refused to build a client.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// Installs rustls's `ring` crypto provider as the process default, once. reqwest is built
/// without a provider of its own, so this must run before the first client is built (any
/// reqwest client of the process, keel's own or another crate's).
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // An error only means another provider was installed first, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client with the given connect timeout and per-read timeout (a stalled connection fails
/// after `read_timeout` without data, however long a healthy stream runs).
pub fn build_client(
    connect_timeout: Duration,
    read_timeout: Duration,
) -> Result<reqwest::Client, ConfigError> {
    install_crypto_provider();
    let builder = reqwest::Client::builder()
        .user_agent(concat!("keel/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(connect_timeout)
        .read_timeout(read_timeout);
    // The root certificates load on the first https connection, not here (see `tls`).
    let builder = match crate::tls::client_config() {
        Some(tls) => builder.tls_backend_preconfigured(tls),
        None => builder,
    };
    builder.build().map_err(ConfigError::Client)
}

/// The base URL without trailing slashes, checked to be an http(s) URL.
pub(crate) fn checked_base_url(raw: &str) -> Result<(String, Url), ConfigError> {
    let trimmed = raw.trim().trim_end_matches('/');
    let invalid = |reason: String| ConfigError::InvalidBaseUrl {
        url: raw.to_string(),
        reason,
    };
    let url = Url::parse(trimmed).map_err(|err| invalid(err.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("only http and https are supported".to_string()));
    }
    Ok((trimmed.to_string(), url))
}

/// The URL requests go to: `path` under the checked base URL `origin`, parsed here once
/// (reqwest would parse a URL given as text again for every request).
pub(crate) fn endpoint(origin: &str, path: &str) -> Result<Url, ConfigError> {
    Url::parse(&format!("{origin}{path}")).map_err(|err| ConfigError::InvalidBaseUrl {
        url: origin.to_string(),
        reason: err.to_string(),
    })
}

/// Where a transport failure happened.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stage {
    /// Connecting, sending, waiting for the status line.
    Send,
    /// Reading a whole body.
    Body,
    /// Reading an event stream.
    Stream,
}

/// `request` with `body` (already serialized JSON) as its body, marked `application/json`:
/// what `RequestBuilder::json` does, without serializing again.
pub(crate) fn with_json_body(request: RequestBuilder, body: Vec<u8>) -> RequestBuilder {
    request
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .body(body)
}

/// Sends `request`; a non-success status becomes a classified error (its body read in full).
/// `origin` is the base URL, named in transport error messages.
pub(crate) async fn send(request: RequestBuilder, origin: &str) -> Result<Response, ProviderError> {
    let response = request
        .send()
        .await
        .map_err(|err| transport_error(&err, origin, Stage::Send))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let headers = response.headers().clone();
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(err) => {
            tracing::debug!(%status, error = %err, "could not read the error body");
            Bytes::new()
        }
    };
    Err(classify_http_error(status.as_u16(), &headers, &body))
}

/// Whether the answer says it is JSON (a whole answer, also from a server that ignored
/// `stream: true`).
pub(crate) fn is_json(response: &Response) -> bool {
    content_type(response).starts_with("application/json")
}

fn content_type(response: &Response) -> String {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .trim_start()
        .to_ascii_lowercase()
}

/// Passes a streamed answer on, unless it is an HTML page (a proxy's or a login portal's, sent
/// with status 200): that is a malformed answer that says so, not an empty event stream.
pub(crate) async fn expect_event_stream(
    response: Response,
    origin: &str,
) -> Result<Response, ProviderError> {
    if !content_type(&response).starts_with("text/html") {
        return Ok(response);
    }
    let body = read_body(response, origin).await?;
    Err(ProviderError::new(
        ProviderErrorKind::MalformedResponse,
        format!(
            "{origin} answered with an HTML page instead of an event stream: {}",
            describe_text_body(&String::from_utf8_lossy(&body))
        ),
    ))
}

/// Reads a whole response body.
pub(crate) async fn read_body(response: Response, origin: &str) -> Result<Bytes, ProviderError> {
    response
        .bytes()
        .await
        .map_err(|err| transport_error(&err, origin, Stage::Body))
}

/// Describes a failure below HTTP: refused, reset, DNS, timeouts, broken streams.
pub(crate) fn transport_error(
    err: &(dyn StdError + 'static),
    origin: &str,
    stage: Stage,
) -> ProviderError {
    let (kind, message) = if is_timeout(err) {
        let message = match stage {
            Stage::Send if is_connect(err) => format!("cannot reach {origin}: connect timed out"),
            Stage::Send => format!("request to {origin} timed out"),
            Stage::Body => format!("reading the answer from {origin} timed out"),
            Stage::Stream => format!("the stream from {origin} stalled past the read timeout"),
        };
        (ProviderErrorKind::Timeout, message)
    } else {
        let cause = describe_cause(err);
        let message = match stage {
            Stage::Send if is_connect(err) => format!("cannot reach {origin}: {cause}"),
            Stage::Send => format!("request to {origin} failed: {cause}"),
            Stage::Body => format!("the answer from {origin} broke off: {cause}"),
            Stage::Stream => format!("the stream from {origin} broke mid-way: {cause}"),
        };
        (ProviderErrorKind::Network, message)
    };
    ProviderError::new(kind, message)
}

fn error_chain<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(err), |&err| err.source())
}

fn is_timeout(err: &(dyn StdError + 'static)) -> bool {
    error_chain(err).any(|err| {
        err.downcast_ref::<reqwest::Error>()
            .is_some_and(reqwest::Error::is_timeout)
            || err
                .downcast_ref::<io::Error>()
                .is_some_and(|io| io.kind() == io::ErrorKind::TimedOut)
    })
}

fn is_connect(err: &(dyn StdError + 'static)) -> bool {
    error_chain(err).any(|err| {
        err.downcast_ref::<reqwest::Error>()
            .is_some_and(reqwest::Error::is_connect)
    })
}

/// The most telling cause of a transport failure, in a few words.
fn describe_cause(err: &(dyn StdError + 'static)) -> String {
    for layer in error_chain(err) {
        if let Some(phrase) = layer.downcast_ref::<io::Error>().and_then(io_phrase) {
            return phrase.to_string();
        }
    }
    let innermost = error_chain(err)
        .last()
        .map(ToString::to_string)
        .unwrap_or_default();
    if error_chain(err).any(|layer| layer.to_string().starts_with("dns error")) {
        format!("DNS lookup failed: {innermost}")
    } else {
        innermost
    }
}

fn io_phrase(err: &io::Error) -> Option<&'static str> {
    Some(match err.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused",
        io::ErrorKind::ConnectionReset => "connection reset",
        io::ErrorKind::ConnectionAborted => "connection aborted",
        io::ErrorKind::BrokenPipe => "broken pipe",
        io::ErrorKind::UnexpectedEof => "connection closed early",
        io::ErrorKind::TimedOut => "timed out",
        _ => return None,
    })
}
