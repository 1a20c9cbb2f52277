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
    serde_json::json!({"error": {"message": message, "type": error_type, "code": code}}).to_string()
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
fn anthropic_reset_headers_are_measured_from_the_date_header() {
    // The recorded 2024 answer: requests exhausted, reset 7 s after the server's date.
    let h = headers(&[
        ("date", "Tue, 04 Jun 2024 18:39:50 GMT"),
        ("anthropic-ratelimit-requests-remaining", "0"),
        ("anthropic-ratelimit-requests-reset", "2024-06-04T18:39:57Z"),
        ("anthropic-ratelimit-tokens-remaining", "8000"),
        ("anthropic-ratelimit-tokens-reset", "2024-06-04T18:40:30Z"),
    ]);
    // A local clock far off does not matter when the server's date is known.
    let skewed = SystemTime::UNIX_EPOCH;
    assert_eq!(retry_hint(429, &h, skewed), Some(Duration::from_secs(7)));
    assert_eq!(retry_hint(529, &h, skewed), None);
    // Without a date header the reset is measured from `now`; fractions and offsets parse.
    let now = httpdate::parse_http_date("Tue, 04 Jun 2024 18:39:50 GMT").unwrap();
    let h = headers(&[
        (
            "anthropic-ratelimit-input-tokens-reset",
            "2024-06-04T20:39:51.5+02:00",
        ),
        ("anthropic-ratelimit-output-tokens-reset", "not a time"),
    ]);
    assert_eq!(retry_hint(429, &h, now), Some(Duration::from_millis(1500)));
    let past = headers(&[("anthropic-ratelimit-tokens-reset", "2024-06-04T18:00:00Z")]);
    assert_eq!(retry_hint(429, &past, now), Some(Duration::ZERO));
    // retry-after, when sent, wins.
    let both = headers(&[
        ("retry-after", "3"),
        ("anthropic-ratelimit-tokens-reset", "2024-06-04T18:40:30Z"),
    ]);
    assert_eq!(retry_hint(429, &both, now), Some(Duration::from_secs(3)));
}

#[test]
fn anthropic_error_types_map_to_kinds() {
    use ProviderErrorKind as Kind;
    let anthropic = |error_type: &str, message: &str| {
        serde_json::json!({
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": "req_1",
        })
    };
    let cases = [
        ("authentication_error", Kind::Auth),
        ("permission_error", Kind::Auth),
        ("not_found_error", Kind::ModelNotFound),
        ("rate_limit_error", Kind::RateLimit),
        ("overloaded_error", Kind::Overloaded),
        ("api_error", Kind::Server),
        ("timeout_error", Kind::Timeout),
        ("billing_error", Kind::Billing),
        ("invalid_request_error", Kind::InvalidRequest),
        ("request_too_large", Kind::ContextOverflow),
    ];
    for (error_type, kind) in cases {
        // Inside a stream (no status), the type alone decides.
        let details = ErrorDetails::from_json(&anthropic(error_type, "x"));
        assert_eq!(error_kind(None, &details), kind, "{error_type}");
    }
    let http = [
        (
            413,
            "request_too_large",
            "Request exceeds the maximum size",
            Kind::ContextOverflow,
        ),
        (
            400,
            "invalid_request_error",
            "prompt is too long: 208310 tokens > 200000 maximum",
            Kind::ContextOverflow,
        ),
        (
            400,
            "invalid_request_error",
            "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000",
            Kind::ContextOverflow,
        ),
        (
            400,
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic API.",
            Kind::Billing,
        ),
        (
            400,
            "invalid_request_error",
            "messages: roles must alternate",
            Kind::InvalidRequest,
        ),
        (500, "api_error", "Internal server error", Kind::Server),
        (529, "overloaded_error", "Overloaded", Kind::Overloaded),
    ];
    for (status, error_type, message, kind) in http {
        let body = anthropic(error_type, message).to_string();
        let error = classify(status, &body);
        assert_eq!(error.kind, kind, "{status} {message}");
        assert_eq!(error.message, message);
    }
}

#[test]
fn x_should_retry_makes_an_unknown_failure_transient() {
    let retry = headers(&[("x-should-retry", "true")]);
    let error = classify_http_error(409, &retry, b"conflict");
    assert_eq!(error.kind, ProviderErrorKind::Server);
    // It never overrides a known class.
    let error = classify_http_error(401, &retry, b"");
    assert_eq!(error.kind, ProviderErrorKind::Auth);
    let no_retry = headers(&[("x-should-retry", "false")]);
    let error = classify_http_error(409, &no_retry, b"conflict");
    assert_eq!(error.kind, ProviderErrorKind::Unknown);
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

#[test]
fn context_overflow_is_recognised_only_under_the_statuses_that_carry_it() {
    let body = openai_error(
        "context_length_exceeded",
        "invalid_request_error",
        "This model's maximum context length is 8192 tokens; prompt is too long",
    );
    for status in [400, 413, 422] {
        assert_eq!(
            classify(status, &body).kind,
            ProviderErrorKind::ContextOverflow,
            "{status}"
        );
    }
    // A server error that quotes the same words is a server error: retrying it must not prune.
    let expected = [
        (500, ProviderErrorKind::Server),
        (502, ProviderErrorKind::Server),
        (503, ProviderErrorKind::Server),
        (408, ProviderErrorKind::Timeout),
        (504, ProviderErrorKind::Timeout),
        (409, ProviderErrorKind::Unknown),
    ];
    for (status, kind) in expected {
        assert_eq!(classify(status, &body).kind, kind, "{status}");
    }
}
