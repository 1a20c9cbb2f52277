//! OpenAI's error shape: every error of these routes is a status and a body
//! `{"error": {"message", "type", "param", "code"}}`, with `Retry-After` on 429 and 503, so
//! OpenAI clients read keel's refusals as they read OpenAI's.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use keel_server::ApiError;
use keel_server::engine::EngineError;
use serde_json::json;

/// An error of the OpenAI-compatible routes.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenAiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, for people.
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `rate_limit_error`, `server_error`.
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<&'static str>,
    /// A stable code: `invalid_api_key`, `model_not_found`, `lane_full`, …
    pub code: Option<&'static str>,
    /// Seconds to wait before trying again (`Retry-After`).
    pub retry_after: Option<u64>,
}

impl OpenAiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        OpenAiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: the request is malformed; `param` names the field at fault.
    pub fn invalid(param: Option<&'static str>, message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        error.param = param;
        error.code = Some("invalid_request_error");
        error
    }

    /// 405: a method the route does not take (e.g. `GET /v1/chat/completions`).
    pub fn method_not_allowed() -> Self {
        let mut error = Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "this method is not allowed on this path",
        );
        error.code = Some("method_not_allowed");
        error
    }

    /// 401: no key, a malformed header, an unknown or revoked key.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::UNAUTHORIZED, "invalid_request_error", message);
        error.code = Some("invalid_api_key");
        error
    }

    /// 404: a model the caller may not use (or that does not exist: the same answer).
    pub fn model_not_found(model: &str) -> Self {
        let mut error = Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "the model `{model}` does not exist or you do not have access to it; \
                 GET /v1/models lists the ones you may use"
            ),
        );
        error.param = Some("model");
        error.code = Some("model_not_found");
        error
    }

    /// 413: the body is larger than the daemon accepts.
    pub fn too_large(limit: usize) -> Self {
        let mut error = Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("the request body is larger than {limit} bytes"),
        );
        error.code = Some("request_too_large");
        error
    }

    /// 500: keel failed; the message says what, without secrets.
    pub fn internal(message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message);
        error.code = Some("internal");
        error
    }

    /// The same error with this code.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The body OpenAI clients read.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl std::fmt::Display for OpenAiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.kind,
            self.message
        )
    }
}

impl From<ApiError> for OpenAiError {
    fn from(error: ApiError) -> Self {
        let (kind, code) = match error.status {
            StatusCode::UNAUTHORIZED => ("invalid_request_error", "invalid_api_key"),
            StatusCode::TOO_MANY_REQUESTS => ("rate_limit_error", error.code),
            status if status.is_server_error() => ("server_error", error.code),
            _ => ("invalid_request_error", error.code),
        };
        OpenAiError {
            status: error.status,
            message: error.message,
            kind,
            param: None,
            code: Some(code),
            retry_after: error.retry_after,
        }
    }
}

impl From<EngineError> for OpenAiError {
    fn from(error: EngineError) -> Self {
        match error {
            // A `reject` lane refusing a message while it works: a clear retry-later.
            EngineError::Busy { .. } => {
                let mut refused = Self::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    error.to_string(),
                );
                refused.code = Some("conversation_busy");
                refused.retry_after = Some(1);
                refused
            }
            other => ApiError::from(other).into(),
        }
    }
}

impl From<keel_core::StoreError> for OpenAiError {
    fn from(error: keel_core::StoreError) -> Self {
        ApiError::from(error).into()
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keel_errors_keep_their_status_and_retry_after_in_openai_shape() {
        let full: OpenAiError = EngineError::LaneFull {
            conversation: "c".into(),
            queued: 16,
            retry_after: 1,
        }
        .into();
        assert_eq!(full.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(full.kind, "rate_limit_error");
        assert_eq!(full.code, Some("lane_full"));
        assert_eq!(full.retry_after, Some(1));
        let closing: OpenAiError = EngineError::ShuttingDown.into();
        assert_eq!(closing.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(closing.retry_after, Some(5));
        let body = OpenAiError::model_not_found("gpt-9").body();
        assert_eq!(body["error"]["code"], "model_not_found");
        assert_eq!(body["error"]["param"], "model");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
}
