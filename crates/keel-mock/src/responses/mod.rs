//! The OpenAI Responses wire format (`POST /v1/responses`), written from the public protocol and
//! the recordings in `shared/fixtures/providers/resp_*` and `err_resp_*`: whole `response`
//! objects, `response.*` SSE streams with sequence numbers, and `{"error": {...}}` bodies.

mod encode;
mod stream;
mod validate;

pub(crate) use validate::check;

use keel_core::ProviderErrorKind;

use crate::answer::{Answer, default_error_message, status_for_kind};
use crate::openai_common::{error_json, error_type_and_code};
use crate::script::StreamError;
use crate::wire::{Events, Invalid, RequestInfo, WireApi};

/// The OpenAI Responses API.
pub(crate) struct Responses;

impl WireApi for Responses {
    fn read_request(body: &[u8]) -> Result<RequestInfo, Invalid> {
        validate::read_request(body)
    }

    fn invalid_request_body(invalid: &Invalid) -> String {
        error_json(
            &invalid.message,
            "invalid_request_error",
            invalid.param.as_deref(),
            None,
        )
    }

    fn status_for(kind: ProviderErrorKind) -> u16 {
        match kind {
            // Unlike chat completions, an unknown model is a 400 here.
            ProviderErrorKind::ModelNotFound => 400,
            ProviderErrorKind::Billing => 429,
            ProviderErrorKind::Overloaded => 503,
            other => status_for_kind(other),
        }
    }

    fn default_message(_status: u16, kind: ProviderErrorKind, request: &RequestInfo) -> String {
        match kind {
            ProviderErrorKind::ModelNotFound => {
                format!("The requested model '{}' does not exist.", request.model)
            }
            ProviderErrorKind::ContextOverflow => {
                "Your input exceeds the context window of this model. Please adjust your input \
                 and try again."
                    .into()
            }
            other => default_error_message(other, &request.model),
        }
    }

    fn error_body(_status: u16, kind: ProviderErrorKind, message: &str) -> String {
        let (error_type, code) = error_type_and_code(kind);
        let param = match kind {
            ProviderErrorKind::ModelNotFound => Some("model"),
            ProviderErrorKind::ContextOverflow => Some("input"),
            _ => None,
        };
        error_json(message, error_type, param, code)
    }

    fn whole_body(answer: &Answer, request: &RequestInfo) -> String {
        encode::whole_body(answer, request)
    }

    fn stream_events(
        answer: &Answer,
        request: &RequestInfo,
        failure: Option<&StreamError>,
    ) -> Events {
        let failure = failure.map(|failure| stream::Failure {
            after: failure.after_chunks,
            code: failure_code(failure.kind),
            message: crate::wire::failure_message::<Self>(failure, request),
            event: failure.responses_event,
        });
        stream::events(answer, request, failure)
    }
}

/// The `code` of a failed response's `error`.
fn failure_code(kind: ProviderErrorKind) -> &'static str {
    match kind {
        ProviderErrorKind::RateLimit => "rate_limit_exceeded",
        ProviderErrorKind::InvalidRequest => "invalid_prompt",
        ProviderErrorKind::ContextOverflow => "context_length_exceeded",
        ProviderErrorKind::Auth => "invalid_api_key",
        ProviderErrorKind::Billing => "insufficient_quota",
        ProviderErrorKind::ModelNotFound => "model_not_found",
        ProviderErrorKind::Overloaded
        | ProviderErrorKind::Server
        | ProviderErrorKind::Timeout
        | ProviderErrorKind::Network
        | ProviderErrorKind::MalformedResponse
        | ProviderErrorKind::Unknown => "server_error",
    }
}
