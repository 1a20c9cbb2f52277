//! Failed HTTP answers → [`ProviderError`]: the class the recovery policy acts on, the wait the
//! provider asked for, and one line a human can act on.
//!
//! Shared by every adapter: it reads OpenAI's `{"error": {"message", "type", "code"}}`,
//! Anthropic's `{"type": "error", "error": {"type", "message"}}` and the looser shapes of
//! compatible servers (`{"error": "text"}`, `{"detail": "text"}`), plus plain-text and HTML
//! bodies from proxies and gateways.

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
    let mut error =
        ProviderError::new(error_kind(Some(status), &details), details.message).with_status(status);
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
        self.code_or_type_is("insufficient_quota") || self.code_or_type_contains("billing")
    }

    fn says_context_overflow(&self) -> bool {
        const PHRASES: [&str; 6] = [
            "context length",
            "maximum context",
            "context window",
            "prompt is too long",
            "too many tokens",
            "context_length_exceeded",
        ];
        let message = self.message.to_ascii_lowercase();
        self.code_or_type_is("context_length_exceeded")
            || PHRASES.iter().any(|phrase| message.contains(phrase))
    }
}

/// The class of a failure from its HTTP status (`None` for an error reported inside a
/// successful stream) and what the body said.
pub fn error_kind(status: Option<u16>, details: &ErrorDetails) -> ProviderErrorKind {
    use ProviderErrorKind as Kind;
    let overflow_status = matches!(status, None | Some(400 | 413 | 422));
    match status {
        Some(402) => Kind::Billing,
        _ if details.says_billing() => Kind::Billing,
        Some(401 | 403) => Kind::Auth,
        Some(529) => Kind::Overloaded,
        _ if details.code_or_type_is("overloaded_error") => Kind::Overloaded,
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
    } else if is(&["invalid_request_error"]) {
        Kind::InvalidRequest
    } else if is(&["server_error", "api_error", "internal_error"]) {
        Kind::Server
    } else {
        Kind::Unknown
    }
}

/// How long the provider asked us to wait: `retry-after-ms`, else `retry-after` (seconds or
/// an HTTP date, measured from `now`), else — on a 429 only — OpenAI's
/// `x-ratelimit-reset-requests` / `x-ratelimit-reset-tokens` (the longest of the exhausted
/// limits, or of both when neither says it is exhausted).
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
    let limits: Vec<(Duration, bool)> = ["requests", "tokens"]
        .iter()
        .filter_map(|limit| {
            let reset = header_text(headers, &format!("x-ratelimit-reset-{limit}"))
                .and_then(parse_duration_text)?;
            let remaining = header_text(headers, &format!("x-ratelimit-remaining-{limit}"));
            Some((reset, remaining.map(str::trim) == Some("0")))
        })
        .collect();
    let any_exhausted = limits.iter().any(|(_, exhausted)| *exhausted);
    limits
        .into_iter()
        .filter(|(_, exhausted)| *exhausted || !any_exhausted)
        .map(|(reset, _)| reset)
        .max()
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
fn describe_text_body(text: &str) -> String {
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

/// One line of at most [`EXCERPT_CHARS`] characters, marked with `…` when cut.
pub(crate) fn excerpt(text: &str) -> String {
    let line = one_line(text);
    match line.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                )
            })
            .collect()
    }

    fn classify(status: u16, body: &str) -> ProviderError {
        classify_http_error(status, &HeaderMap::new(), body.as_bytes())
    }

    fn openai_error(code: &str, error_type: &str, message: &str) -> String {
        serde_json::json!({"error": {"message": message, "type": error_type, "code": code}})
            .to_string()
    }

    #[test]
    fn go_durations_parse() {
        let cases = [
            ("6m0s", 360_000),
            ("115ms", 115),
            ("1.5s", 1_500),
            ("21m36.001s", 1_296_001),
            ("1h2m3s", 3_723_000),
            ("0s", 0),
            ("7", 7_000),
        ];
        for (text, millis) in cases {
            assert_eq!(
                parse_duration_text(text),
                Some(Duration::from_millis(millis)),
                "{text}"
            );
        }
        for bad in ["", "5x", "m", "-1s", "1.2.3s"] {
            assert_eq!(parse_duration_text(bad), None, "{bad}");
        }
    }

    #[test]
    fn retry_after_ms_wins_over_retry_after_and_reset_headers() {
        let h = headers(&[
            ("retry-after-ms", "1500"),
            ("retry-after", "20"),
            ("x-ratelimit-reset-requests", "6m0s"),
        ]);
        assert_eq!(
            retry_hint(429, &h, SystemTime::now()),
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn retry_after_as_http_date_is_measured_from_now() {
        let now = httpdate::parse_http_date("Tue, 02 Apr 2024 14:03:49 GMT").unwrap();
        let h = headers(&[("retry-after", "Tue, 02 Apr 2024 14:04:19 GMT")]);
        assert_eq!(retry_hint(503, &h, now), Some(Duration::from_secs(30)));
        let past = headers(&[("retry-after", "Tue, 02 Apr 2024 14:00:00 GMT")]);
        assert_eq!(retry_hint(503, &past, now), Some(Duration::ZERO));
    }

    #[test]
    fn reset_headers_count_on_429_only_and_prefer_the_exhausted_limit() {
        let h = headers(&[
            ("x-ratelimit-reset-requests", "6m0s"),
            ("x-ratelimit-remaining-requests", "12"),
            ("x-ratelimit-reset-tokens", "1.5s"),
            ("x-ratelimit-remaining-tokens", "0"),
        ]);
        let now = SystemTime::now();
        assert_eq!(retry_hint(429, &h, now), Some(Duration::from_millis(1500)));
        assert_eq!(retry_hint(500, &h, now), None);
        let neither_exhausted = headers(&[
            ("x-ratelimit-reset-requests", "115ms"),
            ("x-ratelimit-reset-tokens", "2s"),
        ]);
        assert_eq!(
            retry_hint(429, &neither_exhausted, now),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn statuses_and_codes_map_to_kinds() {
        use ProviderErrorKind as Kind;
        let cases = [
            (401, openai_error("invalid_api_key", "x", "bad key"), Kind::Auth),
            (403, String::new(), Kind::Auth),
            (402, String::new(), Kind::Billing),
            (
                429,
                openai_error("insufficient_quota", "insufficient_quota", "quota"),
                Kind::Billing,
            ),
            (
                429,
                openai_error("rate_limit_exceeded", "requests", "see /account/billing"),
                Kind::RateLimit,
            ),
            (404, String::new(), Kind::ModelNotFound),
            (
                400,
                openai_error("model_not_found", "invalid_request_error", "no model"),
                Kind::ModelNotFound,
            ),
            (
                400,
                openai_error("context_length_exceeded", "invalid_request_error", "x"),
                Kind::ContextOverflow,
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#.to_string(),
                Kind::ContextOverflow,
            ),
            (400, r#"{"error":"Too many tokens in prompt"}"#.to_string(), Kind::ContextOverflow),
            (400, openai_error("", "invalid_request_error", "bad"), Kind::InvalidRequest),
            (422, String::new(), Kind::InvalidRequest),
            (408, String::new(), Kind::Timeout),
            (504, String::new(), Kind::Timeout),
            (524, String::new(), Kind::Timeout),
            (529, String::new(), Kind::Overloaded),
            (
                500,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.to_string(),
                Kind::Overloaded,
            ),
            (500, String::new(), Kind::Server),
            (503, String::new(), Kind::Server),
            (418, String::new(), Kind::Unknown),
        ];
        for (status, body, kind) in cases {
            let error = classify(status, &body);
            assert_eq!(error.kind, kind, "{status} {body}");
            assert_eq!(error.status, Some(status));
        }
    }

    #[test]
    fn errors_inside_a_stream_are_classified_from_their_type() {
        let details = ErrorDetails::from_json(&serde_json::json!({
            "error": {"message": "The server had an error", "type": "server_error"}
        }));
        assert_eq!(error_kind(None, &details), ProviderErrorKind::Server);
        assert_eq!(details.message, "The server had an error");
    }

    #[test]
    fn messages_are_one_line() {
        assert_eq!(
            classify(400, r#"{"error":{"message":"line one\n  line two"}}"#).message,
            "line one line two"
        );
        assert_eq!(
            classify(
                404,
                r#"{"error":"model \"x\" not found, try pulling it first"}"#
            )
            .message,
            "model \"x\" not found, try pulling it first"
        );
        assert_eq!(
            classify(422, r#"{"detail":"bad field"}"#).message,
            "bad field"
        );
        assert_eq!(classify(502, "").message, "HTTP 502 with an empty body");
        assert_eq!(classify(503, " \n ").message, "HTTP 503 with an empty body");
        let html = "<!DOCTYPE html>\n<html><head><title>502 Bad\n Gateway</title></head>\
                    <body><h1>nginx</h1></body></html>";
        assert_eq!(classify(502, html).message, "502 Bad Gateway");
        assert_eq!(
            classify(502, "<html><body>oops</body></html>").message,
            "HTML error page"
        );
        assert_eq!(
            classify(500, "upstream\nconnect error").message,
            "upstream connect error"
        );
        let long = "x".repeat(500);
        let message = classify(500, &long).message;
        assert_eq!(message.chars().count(), EXCERPT_CHARS + 1);
        assert!(message.ends_with('…'));
    }
}
