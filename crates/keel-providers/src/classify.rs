//! Failed HTTP answers → [`ProviderError`]: the class the recovery policy acts on, the wait the
//! provider asked for, and one line a human can act on.
//!
//! Shared by every adapter: it reads OpenAI's `{"error": {"message", "type", "code"}}`,
//! Anthropic's `{"type": "error", "error": {"type", "message"}}` and the looser shapes of
//! compatible servers (`{"error": "text"}`, `{"detail": "text"}`), plus plain-text and HTML
//! bodies from proxies and gateways. Wait hints come from `retry-after-ms`, `retry-after`,
//! OpenAI's `x-ratelimit-reset-*` and Anthropic's `anthropic-ratelimit-*-reset` headers.

use std::time::{Duration, SystemTime};

use keel_core::{ProviderError, ProviderErrorKind};
use reqwest::header::HeaderMap;
use serde_json::Value;

/// Longest excerpt of a non-JSON body kept in an error message, in characters.
const EXCERPT_CHARS: usize = 200;

/// Classifies a non-success HTTP answer from its status, headers and body.
pub fn classify_http_error(status: u16, headers: &HeaderMap, body: &[u8]) -> ProviderError {
    classify_http_error_at(status, headers, body, SystemTime::now())
}

/// [`classify_http_error`] with the current time given, for `Retry-After` HTTP dates.
pub fn classify_http_error_at(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> ProviderError {
    let details = ErrorDetails::from_body(status, body);
    let mut kind = error_kind(Some(status), &details);
    if kind == ProviderErrorKind::Unknown && header_text(headers, "x-should-retry") == Some("true")
    {
        // The provider says a retry may pass (Anthropic and OpenAI send this on 408/409 and
        // lock timeouts): treat the failure as a transient server one.
        kind = ProviderErrorKind::Server;
    }
    let mut error = ProviderError::new(kind, details.message).with_status(status);
    if let Some(wait) = retry_hint(status, headers, now) {
        error = error.with_retry_after(wait);
    }
    error
}

/// What a provider's error body says, whatever its shape.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorDetails {
    /// One line for a human.
    pub message: String,
    /// The machine-readable code (`context_length_exceeded`, `invalid_api_key`, …), if any.
    pub code: Option<String>,
    /// The error type (`invalid_request_error`, `overloaded_error`, …), if any.
    pub error_type: Option<String>,
}

impl ErrorDetails {
    /// What a failure says of itself: its message, else its code, else "no reason given".
    pub fn reason(&self) -> String {
        if self.message.is_empty() {
            self.code
                .clone()
                .unwrap_or_else(|| "no reason given".to_string())
        } else {
            self.message.clone()
        }
    }

    /// Reads an HTTP error body: JSON when it parses, else text or HTML.
    pub fn from_body(status: u16, body: &[u8]) -> Self {
        let text = String::from_utf8_lossy(body);
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return ErrorDetails {
                message: format!("HTTP {status} with an empty body"),
                ..ErrorDetails::default()
            };
        }
        if let Ok(json) = serde_json::from_str::<Value>(trimmed) {
            let mut details = ErrorDetails::from_json(&json);
            if details.message.is_empty() {
                details.message = excerpt(trimmed);
            }
            return details;
        }
        ErrorDetails {
            message: describe_text_body(trimmed),
            ..ErrorDetails::default()
        }
    }

    /// Reads a JSON error document (an HTTP body, or an error event inside a stream).
    pub fn from_json(json: &Value) -> Self {
        let mut details = match json.get("error") {
            Some(inner) => ErrorDetails::from_error_value(inner),
            None => ErrorDetails::default(),
        };
        if details.message.is_empty() {
            details.message = ["message", "detail"]
                .iter()
                .find_map(|key| json.get(key).and_then(Value::as_str))
                .map(one_line)
                .unwrap_or_default();
        }
        if details.message.is_empty() {
            details.message = details
                .code
                .clone()
                .or_else(|| details.error_type.clone())
                .unwrap_or_default();
        }
        details
    }

    /// Reads the value under `"error"`: an object with message/type/code, or a bare string.
    pub fn from_error_value(value: &Value) -> Self {
        if let Some(text) = value.as_str() {
            return ErrorDetails {
                message: one_line(text),
                ..ErrorDetails::default()
            };
        }
        ErrorDetails {
            message: value
                .get("message")
                .and_then(Value::as_str)
                .map(one_line)
                .unwrap_or_default(),
            code: value.get("code").and_then(scalar_text),
            error_type: value.get("type").and_then(scalar_text),
        }
    }

    fn code_or_type_is(&self, name: &str) -> bool {
        self.code.as_deref() == Some(name) || self.error_type.as_deref() == Some(name)
    }

    fn code_or_type_contains(&self, part: &str) -> bool {
        [&self.code, &self.error_type]
            .into_iter()
            .flatten()
            .any(|value| value.to_ascii_lowercase().contains(part))
    }

    fn says_billing(&self) -> bool {
        self.code_or_type_is("insufficient_quota")
            || self.code_or_type_contains("billing")
            // Anthropic sends an empty balance as a 400 invalid_request_error.
            || self
                .message
                .to_ascii_lowercase()
                .contains("credit balance is too low")
    }

    fn says_context_overflow(&self) -> bool {
        const PHRASES: [&str; 7] = [
            "context length",
            "maximum context",
            "context window",
            "context limit",
            "prompt is too long",
            "too many tokens",
            "context_length_exceeded",
        ];
        let message = self.message.to_ascii_lowercase();
        self.code_or_type_is("context_length_exceeded")
            // Anthropic's 413: the request is over the API's size limit; shrinking it is the
            // cure, as for a prompt over the context window.
            || self.code_or_type_is("request_too_large")
            || PHRASES.iter().any(|phrase| message.contains(phrase))
    }
}

impl ErrorDetails {
    /// True when the message says the service is overloaded.
    fn says_overloaded(&self) -> bool {
        self.message.to_ascii_lowercase().contains("overloaded")
    }

    /// The error of an error document sent as a whole answer (no HTTP error status), with its
    /// own message.
    pub(crate) fn into_answer_error(self) -> ProviderError {
        ProviderError::new(error_kind(None, &self), self.message)
    }
}

/// The class of a failure from its HTTP status (`None` for an error reported inside a
/// successful stream) and what the body said.
pub fn error_kind(status: Option<u16>, details: &ErrorDetails) -> ProviderErrorKind {
    use ProviderErrorKind as Kind;
    let overflow_status = matches!(status, None | Some(400 | 413 | 422));
    // Anthropic's error types (authentication_error, not_found_error, rate_limit_error,
    // api_error, …) agree with their statuses; `kind_from_body_only` reads them when there is
    // no status.
    match status {
        Some(402) => Kind::Billing,
        _ if details.says_billing() => Kind::Billing,
        Some(401 | 403) => Kind::Auth,
        Some(529) => Kind::Overloaded,
        _ if details.code_or_type_is("overloaded_error") => Kind::Overloaded,
        // OpenAI has no overload type: it answers 503 `server_error` saying "overloaded".
        Some(500..=599) | None if details.says_overloaded() => Kind::Overloaded,
        Some(429) => Kind::RateLimit,
        Some(404) => Kind::ModelNotFound,
        _ if details.code_or_type_is("model_not_found") => Kind::ModelNotFound,
        _ if overflow_status && details.says_context_overflow() => Kind::ContextOverflow,
        Some(400 | 422) => Kind::InvalidRequest,
        Some(408 | 504 | 524) => Kind::Timeout,
        Some(500..=599) => Kind::Server,
        Some(_) => Kind::Unknown,
        None => kind_from_body_only(details),
    }
}

/// The class of an error that came without a status (inside a stream), from its type or code.
fn kind_from_body_only(details: &ErrorDetails) -> ProviderErrorKind {
    use ProviderErrorKind as Kind;
    let is = |names: &[&str]| names.iter().any(|name| details.code_or_type_is(name));
    if is(&[
        "invalid_api_key",
        "authentication_error",
        "permission_error",
    ]) {
        Kind::Auth
    } else if is(&["rate_limit_exceeded", "rate_limit_error"]) {
        Kind::RateLimit
    } else if is(&["not_found_error"]) {
        Kind::ModelNotFound
    } else if is(&["invalid_request_error"]) {
        Kind::InvalidRequest
    } else if is(&["timeout_error"]) {
        Kind::Timeout
    } else if is(&["server_error", "api_error", "internal_error"]) {
        Kind::Server
    } else {
        Kind::Unknown
    }
}

/// How long the provider asked us to wait: `retry-after-ms`, else `retry-after` (seconds or
/// an HTTP date, measured from `now`), else — on a 429 only — the rate-limit reset headers:
/// OpenAI's `x-ratelimit-reset-requests` / `-tokens` (Go durations) or Anthropic's
/// `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-reset` (RFC 3339 times);
/// the longest of the exhausted limits, or of all of them when none says it is exhausted.
pub fn retry_hint(status: u16, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let millis: Option<f64> =
        header_text(headers, "retry-after-ms").and_then(|text| text.trim().parse().ok());
    if let Some(millis) = millis {
        return Duration::try_from_secs_f64(millis / 1000.0).ok();
    }
    if let Some(value) = header_text(headers, "retry-after") {
        if let Some(wait) = parse_seconds(value) {
            return Some(wait);
        }
        if let Ok(date) = httpdate::parse_http_date(value) {
            return Some(date.duration_since(now).unwrap_or(Duration::ZERO));
        }
    }
    if status != 429 {
        return None;
    }
    let openai: Vec<(Duration, bool)> = ["requests", "tokens"]
        .iter()
        .filter_map(|limit| {
            let reset = header_text(headers, &format!("x-ratelimit-reset-{limit}"))
                .and_then(parse_duration_text)?;
            let remaining = header_text(headers, &format!("x-ratelimit-remaining-{limit}"));
            Some((reset, remaining.map(str::trim) == Some("0")))
        })
        .collect();
    longest_exhausted(openai).or_else(|| anthropic_reset_hint(headers, now))
}

/// The wait until Anthropic's rate limits reset. The reset times are measured from the
/// answer's `date` header when it has one (both are the server's clock, so a skewed local
/// clock does not matter), else from `now`.
fn anthropic_reset_hint(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let server_now = header_text(headers, "date")
        .and_then(|date| httpdate::parse_http_date(date).ok())
        .unwrap_or(now);
    let limits = ["requests", "tokens", "input-tokens", "output-tokens"]
        .iter()
        .filter_map(|limit| {
            let reset = header_text(headers, &format!("anthropic-ratelimit-{limit}-reset"))
                .and_then(parse_rfc3339)?;
            let remaining = header_text(headers, &format!("anthropic-ratelimit-{limit}-remaining"));
            let wait = reset.duration_since(server_now).unwrap_or(Duration::ZERO);
            Some((wait, remaining.map(str::trim) == Some("0")))
        })
        .collect();
    longest_exhausted(limits)
}

/// The longest wait among the limits that say they are exhausted, or among all of them when
/// none does.
fn longest_exhausted(limits: Vec<(Duration, bool)>) -> Option<Duration> {
    let any_exhausted = limits.iter().any(|(_, exhausted)| *exhausted);
    limits
        .into_iter()
        .filter(|(_, exhausted)| *exhausted || !any_exhausted)
        .map(|(wait, _)| wait)
        .max()
}

/// An RFC 3339 time (`2024-06-04T18:39:57Z`, `2024-06-04T18:39:57.5+02:00`).
fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .ok()
        .map(SystemTime::from)
}

/// Parses a Go-style duration as OpenAI sends it: `6m0s`, `115ms`, `1.5s`, `1h2m3.5s`.
/// A bare number is taken as seconds.
pub fn parse_duration_text(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Some(seconds) = parse_seconds(text) {
        return Some(seconds);
    }
    let mut rest = text;
    let mut total = 0.0_f64;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let unit_end = rest[number_end..]
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .map_or(rest.len(), |offset| number_end + offset);
        let number: f64 = rest[..number_end].parse().ok()?;
        let seconds_per_unit = match &rest[number_end..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += number * seconds_per_unit;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(total).ok()
}

/// A plain non-negative number of seconds (`20`, `1.5`).
fn parse_seconds(text: &str) -> Option<Duration> {
    Duration::try_from_secs_f64(text.trim().parse().ok()?).ok()
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name)?.to_str().ok()
}

/// A JSON string or number as text (codes are sometimes numbers).
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) if !text.is_empty() => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// A non-JSON body in one line: an HTML page's `<title>` (or "HTML error page"), else a short
/// excerpt of the text.
pub(crate) fn describe_text_body(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let is_html = lower.starts_with("<!doctype html")
        || lower.contains("<html")
        || lower.contains("<title")
        || lower.contains("<body");
    if !is_html {
        return excerpt(text);
    }
    html_title(text, &lower)
        .filter(|title| !title.is_empty())
        .unwrap_or_else(|| "HTML error page".to_string())
}

/// The text of the first `<title>` element. `lower` is `text` in ASCII lowercase, so byte
/// offsets found in it are valid in `text`.
fn html_title(text: &str, lower: &str) -> Option<String> {
    let open = lower.find("<title")?;
    let start = open + lower[open..].find('>')? + 1;
    let end = start + lower[start..].find("</title")?;
    let title = text[start..end]
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'");
    Some(one_line(&title))
}

/// Collapses all whitespace runs (newlines included) into single spaces.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A whole answer's body as a JSON tree; a body that is not JSON is a `MalformedResponse` that
/// quotes the start of it.
pub(crate) fn json_body(body: &[u8]) -> Result<Value, ProviderError> {
    serde_json::from_slice(body).map_err(|err| {
        let text = String::from_utf8_lossy(body);
        ProviderError::new(
            ProviderErrorKind::MalformedResponse,
            format!("the answer is not JSON ({err}): {}", excerpt(&text)),
        )
    })
}

/// One line of at most [`EXCERPT_CHARS`] characters, marked with `…` when cut.
pub(crate) fn excerpt(text: &str) -> String {
    let line = one_line(text);
    match line.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;
