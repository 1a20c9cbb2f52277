//! The API's errors: a status and a JSON body `{"error": {"code", "message"}}`, never a stack
//! trace, never a secret.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use keel_core::StoreError;
use serde::Serialize;
use utoipa::ToSchema;

/// An error the API answers with.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code, e.g. `not_found`.
    pub code: &'static str,
    /// What went wrong, for people.
    pub message: String,
    /// Seconds to wait before trying again (`Retry-After`), for 429 and 503.
    pub retry_after: Option<u64>,
}

/// The JSON body of every error.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What [`ErrorBody`] holds.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code: `unauthorized`, `not_found`, `invalid_request`,
    /// `payload_too_large`, `conflict`, `lane_full`, `shutting_down`, `internal`.
    pub code: String,
    /// What went wrong.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 401: no key, a malformed header, an unknown or revoked key.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 404: no such thing, or one the caller may not see (the same answer, so ids of other
    /// users' things cannot be probed).
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{} not found", what.into()),
        )
    }

    /// 400: the request is malformed.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 403: the caller is known but may not do this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 409: the request is valid but the thing is not in a state that allows it.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 500: keel failed; the message says what, without secrets.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// The same error, telling the client to retry after `seconds`.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        if let StoreError::Conflict(message) = &error {
            return ApiError::conflict(message.clone());
        }
        tracing::error!(error = %error, "store error answering a request");
        ApiError::internal(error.to_string())
    }
}

impl From<keel_platform::InboxError> for ApiError {
    fn from(error: keel_platform::InboxError) -> Self {
        match error {
            keel_platform::InboxError::Invalid(message) => ApiError::invalid(message),
            keel_platform::InboxError::Store(error) => error.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
