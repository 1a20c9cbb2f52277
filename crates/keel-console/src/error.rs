//! The console's error pages: a status and a sentence, never a stack trace or a secret.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use keel_server::ApiError;
use maud::html;

/// An error a console page answers with, as an HTML page.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsoleError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, for people.
    pub message: String,
}

impl ConsoleError {
    /// An error with this status and message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ConsoleError {
            status,
            message: message.into(),
        }
    }

    /// 404: no such thing, or one the viewer may not see (the same answer).
    pub fn not_found(what: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::NOT_FOUND, format!("{what} not found"))
    }

    /// 400: a malformed request.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 403: a refused form (CSRF) or action.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }
}

impl From<ApiError> for ConsoleError {
    fn from(error: ApiError) -> Self {
        ConsoleError::new(error.status, error.message)
    }
}

impl From<keel_core::StoreError> for ConsoleError {
    fn from(error: keel_core::StoreError) -> Self {
        ApiError::from(error).into()
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let title = self
            .status
            .canonical_reason()
            .unwrap_or("Error")
            .to_string();
        let body = html! {
            h1 { (title) }
            p { (self.message) }
            p { a href="/" { "Back to the console" } }
        };
        (self.status, crate::layout::page(&title, None, body)).into_response()
    }
}
