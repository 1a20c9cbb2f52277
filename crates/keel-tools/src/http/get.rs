//! `http_get`: fetch a URL with one GET request and return the response as text.

use std::collections::BTreeMap;
use std::sync::{Once, OnceLock};

use async_trait::async_trait;
use keel_core::{Reach, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::redirect::Policy;
use reqwest::{Client, Url};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::time::{Instant, timeout_at};

use super::address::{AddressRule, GuardedResolver};
use super::failure::{self, MAX_REDIRECTS, RedirectStop};
use super::hosts::AllowedHosts;
use super::{HTTP_MODULE, HttpGetConfig, body};
use crate::schema::{parameters_for, parse_args};

/// The most bytes of an error body read to quote in the error message.
const ERROR_BODY_BYTES: usize = 4096;

/// The arguments of `http_get`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct HttpGetArgs {
    /// The absolute http:// or https:// URL to fetch.
    url: String,
    /// Extra request headers, name to value, for example {"Accept": "application/json"}.
    headers: Option<BTreeMap<String, String>>,
}

/// The `http_get` tool: one GET request per call, idempotent (so keel retries it after a
/// transient failure), limited by an [`HttpGetConfig`].
pub struct HttpGet {
    config: HttpGetConfig,
    hosts: AllowedHosts,
    addresses: AddressRule,
    /// The client, built by the first call (building one loads the system's root
    /// certificates, which a run that never fetches does not need), or why it could not be
    /// built; a call reports the latter as its error.
    client: OnceLock<Result<Client, String>>,
    spec: ToolSpec,
}

impl HttpGet {
    /// An `http_get` tool configured by `config`. The HTTP client is built by the first call,
    /// once; if that fails (an invalid `user_agent`, no usable TLS setup), every call fails
    /// saying why.
    pub fn new(config: HttpGetConfig) -> Self {
        let addresses = AddressRule::new(config.allow_private);
        Self::with_address_rule(config, addresses)
    }

    /// An `http_get` tool held to `addresses` instead of the rule `config` implies.
    pub(super) fn with_address_rule(config: HttpGetConfig, addresses: AddressRule) -> Self {
        let hosts = AllowedHosts::new(&config.allowed_hosts);
        let mut spec = ToolSpec::new(
            "http_get",
            description(&config, &hosts),
            parameters_for::<HttpGetArgs>(),
        )
        .idempotent()
        // What it fetches can carry anything the run has read out in its URL.
        .reach(Reach::Egress);
        spec.module = Some(HTTP_MODULE.to_string());
        HttpGet {
            config,
            hosts,
            addresses,
            client: OnceLock::new(),
            spec,
        }
    }

    /// The client, built now if this is the first call.
    fn client(&self) -> Result<&Client, ToolError> {
        self.client
            .get_or_init(|| {
                build_client(&self.config, self.hosts.clone(), self.addresses.clone())
                    .map_err(|e| format!("http_get cannot build its HTTP client: {e}"))
            })
            .as_ref()
            .map_err(|e| ToolError::failed(e.clone()))
    }

    /// Sends the request and turns the response into the tool's result, all within the
    /// configured timeout.
    async fn fetch(
        &self,
        client: &Client,
        url: Url,
        headers: HeaderMap,
    ) -> Result<ToolOutput, ToolError> {
        let limit = self.config.timeout;
        let deadline = Instant::now() + limit;
        let sent = client.get(url.clone()).headers(headers).send();
        let mut response = timeout_at(deadline, sent)
            .await
            .map_err(|_| failure::timed_out(&url, limit))?
            .map_err(|e| failure::transport(&e, &url, &self.hosts))?;

        if !response.status().is_success() {
            // The status decides the error; a body that cannot be read only loses the excerpt.
            let body = timeout_at(deadline, body::read(&mut response, ERROR_BODY_BYTES))
                .await
                .ok()
                .and_then(Result::ok);
            return Err(failure::status(&response, body.as_ref()));
        }
        let body = timeout_at(deadline, body::read(&mut response, self.config.max_bytes))
            .await
            .map_err(|_| failure::timed_out(&url, limit))?
            .map_err(|e| failure::transport(&e, &url, &self.hosts))?;
        Ok(ToolOutput::text(body::describe(&response, &url, &body)))
    }
}

#[async_trait]
impl Tool for HttpGet {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: HttpGetArgs = parse_args("http_get", args)?;
        let url = parse_url(&args.url)?;
        if !self.hosts.permits(&url) {
            return Err(ToolError::denied(self.hosts.refusal(&url)));
        }
        if let Some(refused) = self.addresses.literal_refusal(&url) {
            return Err(ToolError::denied(format!("cannot fetch {url}: {refused}")));
        }
        let headers = request_headers(args.headers.unwrap_or_default())?;
        let client = self.client()?;
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => Err(ToolError::failed(format!(
                "cancelled: the run was stopped before GET {url} finished"
            ))),
            result = self.fetch(client, url.clone(), headers) => result,
        }
    }
}

/// The tool's description for the model, with the configured limits.
fn description(config: &HttpGetConfig, hosts: &AllowedHosts) -> String {
    let mut text = format!(
        "Fetch a URL with an HTTP GET request and return the response as text. `url` must be an \
         absolute http:// or https:// URL; `headers` adds request headers (for example Accept). \
         The result starts with the status line (`HTTP 200 OK`) and the content type, then a \
         blank line and the body. Bodies over {} are cut with a note; binary content (images, \
         archives, PDFs) is described, not shown. Redirects are followed. A 4xx status is an \
         error to fix, not to retry; 429, 5xx, network failures and timeouts ({} s) are \
         temporary.",
        body::size(config.max_bytes),
        config.timeout.as_secs_f64()
    );
    if !hosts.is_open() {
        text.push_str(&format!(
            " Only these hosts and their subdomains may be fetched: {}.",
            hosts.names().join(", ")
        ));
    }
    text
}

/// The URL to fetch, which must be absolute http or https.
fn parse_url(raw: &str) -> Result<Url, ToolError> {
    let url = Url::parse(raw.trim()).map_err(|e| {
        ToolError::invalid_arguments(format!(
            "`{raw}` is not a valid URL ({e}); give an absolute http:// or https:// URL"
        ))
    })?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        scheme => Err(ToolError::invalid_arguments(format!(
            "cannot fetch `{raw}`: only http and https URLs are supported, not `{scheme}:`"
        ))),
    }
}

/// The call's extra headers, checked to be valid HTTP.
fn request_headers(given: BTreeMap<String, String>) -> Result<HeaderMap, ToolError> {
    let mut headers = HeaderMap::new();
    for (name, value) in given {
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            ToolError::invalid_arguments(format!("`{name}` is not a valid HTTP header name"))
        })?;
        let value = HeaderValue::from_str(&value).map_err(|_| {
            ToolError::invalid_arguments(format!(
                "the value of header `{name}` is not a valid HTTP header value (no line breaks \
                 or control characters)"
            ))
        })?;
        headers.insert(header, value);
    }
    Ok(headers)
}

/// The client for all calls: the configured user agent, redirects followed (at most
/// [`MAX_REDIRECTS`]) only to allowed hosts, and connections only to addresses `addresses`
/// permits (checked on IP literals by the redirect policy, on host names by the resolver).
/// Timeouts are applied per call, not here.
fn build_client(
    config: &HttpGetConfig,
    hosts: AllowedHosts,
    addresses: AddressRule,
) -> Result<Client, reqwest::Error> {
    install_crypto_provider();
    let guard = (!addresses.allows_private()).then(|| GuardedResolver {
        rule: addresses.clone(),
    });
    let redirects = Policy::custom(move |attempt| {
        if !hosts.permits(attempt.url()) {
            let target = attempt.url().clone();
            attempt.error(RedirectStop::Denied(target))
        } else if let Some(refused) = addresses.literal_refusal(attempt.url()) {
            attempt.error(refused)
        } else if attempt.previous().len() > MAX_REDIRECTS {
            // `previous` holds the first URL too, so this allows exactly MAX_REDIRECTS hops.
            attempt.error(RedirectStop::TooMany)
        } else {
            attempt.follow()
        }
    });
    let builder = Client::builder()
        .user_agent(config.user_agent.as_str())
        .redirect(redirects);
    match guard {
        Some(resolver) => builder.dns_resolver(resolver).build(),
        None => builder.build(),
    }
}

/// Installs rustls's `ring` crypto provider as the process default, once. The workspace's
/// reqwest has no provider of its own, so this runs before the first client is built.
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // An error only means another provider was installed first, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use keel_core::ToolErrorKind;

    use super::*;

    #[test]
    fn only_absolute_http_urls_are_accepted() {
        assert!(parse_url("https://example.com/a?b=c").is_ok());
        assert!(parse_url(" http://127.0.0.1:8080 ").is_ok());
        for (raw, says) in [
            ("ftp://example.com/file", "only http and https"),
            ("file:///etc/passwd", "only http and https"),
            ("example.com/page", "not a valid URL"),
            ("", "not a valid URL"),
        ] {
            let err = parse_url(raw).unwrap_err();
            assert_eq!(err.kind, ToolErrorKind::InvalidArguments, "{raw}");
            assert!(err.message.contains(says), "{raw}: {}", err.message);
        }
    }

    #[test]
    fn bad_headers_are_invalid_arguments() {
        let one = |name: &str, value: &str| {
            request_headers(BTreeMap::from([(name.to_string(), value.to_string())]))
        };
        assert!(one("Accept", "text/plain").is_ok());
        let err = one("bad name", "x").unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::InvalidArguments);
        assert!(err.message.contains("`bad name`"), "{}", err.message);
        let err = one("X-Ok", "line\nbreak").unwrap_err();
        assert!(err.message.contains("header `X-Ok`"), "{}", err.message);
    }

    #[test]
    fn the_description_states_the_limits() {
        let config = HttpGetConfig {
            allowed_hosts: vec!["docs.rs".into(), " ".into()],
            ..HttpGetConfig::default()
        };
        let text = description(&config, &AllowedHosts::new(&config.allowed_hosts));
        assert!(text.contains("over 1 MiB"), "{text}");
        assert!(text.contains("(30 s)"), "{text}");
        assert!(text.ends_with("may be fetched: docs.rs."), "{text}");
    }
}
