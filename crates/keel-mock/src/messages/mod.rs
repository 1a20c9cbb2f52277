//! The Anthropic Messages wire format (`POST /v1/messages`), written from the public protocol
//! and the recordings in `shared/fixtures/providers/anth_*` and `err_anth_*`: whole `message`
//! bodies, named-event SSE streams (`message_start` … `message_stop`), and
//! `{"type": "error", "error": {...}, "request_id": ...}` bodies. Requests must carry the
//! `anthropic-version` header.

mod encode;
mod turns;
mod validate;

pub(crate) use validate::check;

use axum::http::HeaderMap;
use keel_core::ProviderErrorKind;
use serde::Serialize;

use crate::answer::{Answer, estimate_tokens, status_for_kind};
use crate::script::StreamError;
use crate::wire::{Events, Invalid, RequestInfo, WireApi, fresh_id, to_json};

/// The context window the mock's "prompt is too long" message reports.
const CONTEXT_WINDOW: u64 = 200_000;

/// The Anthropic Messages API.
pub(crate) struct Messages;

impl WireApi for Messages {
    const CALL_ID_PREFIX: &'static str = "toolu";

    fn check_headers(headers: &HeaderMap) -> Result<(), Invalid> {
        match headers.get("anthropic-version") {
            Some(version) if !version.is_empty() => Ok(()),
            _ => Err(Invalid::new("anthropic-version: header is required", None)),
        }
    }

    fn read_request(body: &[u8]) -> Result<RequestInfo, Invalid> {
        validate::read_request(body)
    }

    fn invalid_request_body(invalid: &Invalid) -> String {
        error_json("invalid_request_error", &invalid.message, true)
    }

    fn status_for(kind: ProviderErrorKind) -> u16 {
        match kind {
            // Anthropic reports an empty credit balance as a plain invalid request.
            ProviderErrorKind::Billing => 400,
            ProviderErrorKind::Timeout => 504,
            other => status_for_kind(other),
        }
    }

    fn default_message(status: u16, kind: ProviderErrorKind, request: &RequestInfo) -> String {
        match kind {
            ProviderErrorKind::Auth if status == 403 => {
                "Your API key does not have permission to use the specified resource.".into()
            }
            ProviderErrorKind::Auth => "invalid x-api-key".into(),
            ProviderErrorKind::Billing => {
                "Your credit balance is too low to access the Anthropic API. Please go to Plans \
                 & Billing to upgrade or purchase credits."
                    .into()
            }
            ProviderErrorKind::RateLimit => {
                "Number of requests has exceeded your per-minute rate limit \
                 (https://docs.anthropic.com/en/api/rate-limits); see the response headers for \
                 current usage. Please try again later or contact sales at \
                 https://www.anthropic.com/contact-sales to discuss your options for a rate \
                 limit increase."
                    .into()
            }
            ProviderErrorKind::Overloaded => "Overloaded".into(),
            ProviderErrorKind::Server => "Internal server error".into(),
            ProviderErrorKind::Timeout => "Request timed out".into(),
            ProviderErrorKind::ModelNotFound => format!("model: {}", request.model),
            ProviderErrorKind::ContextOverflow => format!(
                "prompt is too long: {} tokens > {CONTEXT_WINDOW} maximum",
                CONTEXT_WINDOW + estimate_tokens(request.size)
            ),
            ProviderErrorKind::InvalidRequest => {
                "Invalid request (keel-mock scripted error).".into()
            }
            ProviderErrorKind::Network
            | ProviderErrorKind::MalformedResponse
            | ProviderErrorKind::Unknown => format!("keel-mock scripted {kind} error."),
        }
    }

    fn error_body(status: u16, kind: ProviderErrorKind, message: &str) -> String {
        error_json(error_type(status, kind), message, true)
    }

    fn whole_body(answer: &Answer, _request: &RequestInfo) -> String {
        encode::whole_body(answer)
    }

    fn stream_events(
        answer: &Answer,
        request: &RequestInfo,
        failure: Option<&StreamError>,
    ) -> Events {
        let events = encode::stream_events(answer);
        match failure {
            Some(failure) => events.fail_after(failure.after_chunks, |_| {
                let message = crate::wire::failure_message::<Self>(failure, request);
                let kind = error_type(Self::status_for(failure.kind), failure.kind);
                crate::wire::named_frame("error", &error_json(kind, &message, false))
            }),
            None => events,
        }
    }
}

/// The `error.type` fitting an HTTP status and error class.
fn error_type(status: u16, kind: ProviderErrorKind) -> &'static str {
    match (kind, status) {
        (ProviderErrorKind::Auth, 403) => "permission_error",
        (ProviderErrorKind::Auth, _) => "authentication_error",
        (ProviderErrorKind::Billing, 402) => "billing_error",
        (ProviderErrorKind::Billing, _) => "invalid_request_error",
        (ProviderErrorKind::RateLimit, _) => "rate_limit_error",
        (ProviderErrorKind::Overloaded, _) => "overloaded_error",
        (ProviderErrorKind::Timeout, _) => "timeout_error",
        (ProviderErrorKind::ModelNotFound, _) => "not_found_error",
        (ProviderErrorKind::ContextOverflow | ProviderErrorKind::InvalidRequest, 413) => {
            "request_too_large"
        }
        (ProviderErrorKind::ContextOverflow | ProviderErrorKind::InvalidRequest, _) => {
            "invalid_request_error"
        }
        (_, 400) => "invalid_request_error",
        (_, 401) => "authentication_error",
        (_, 403) => "permission_error",
        (_, 404) => "not_found_error",
        (_, 413) => "request_too_large",
        (_, 429) => "rate_limit_error",
        (_, 529) => "overloaded_error",
        _ => "api_error",
    }
}

/// An Anthropic error body; an HTTP answer carries a `request_id`, an SSE error event does not.
fn error_json(error_type: &str, message: &str, with_request_id: bool) -> String {
    to_json(&ErrorEnvelope {
        kind: "error",
        error: ErrorObject {
            kind: error_type,
            message,
        },
        request_id: with_request_id.then(|| fresh_id("req_")),
    })
}

#[derive(Serialize)]
struct ErrorEnvelope<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: ErrorObject<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<String>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    message: &'a str,
}
