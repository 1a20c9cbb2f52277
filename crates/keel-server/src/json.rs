//! Request bodies: JSON only, unknown fields refused (the types say `deny_unknown_fields`),
//! and every rejection answered as an [`ApiError`] in JSON, not axum's plain text.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body of type `T`, or a JSON error: 400 malformed or unknown fields, 413 too large,
/// 415 not JSON.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(ApiJson(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// Query parameters of type `T`, or a 400 JSON error.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(ApiQuery(value)),
            Err(rejection) => Err(query_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    let status = rejection.status();
    let text = rejection.body_text();
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            status,
            "payload_too_large",
            "the request body is larger than the server accepts",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
            status,
            "invalid_request",
            "the request body must be JSON (Content-Type: application/json)",
        ),
        _ if text.contains(crate::connections::BODY_TIMED_OUT) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            crate::connections::BODY_TIMED_OUT,
        ),
        _ if text.contains("length limit exceeded") => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the request body is larger than the server accepts",
        ),
        _ => ApiError::invalid(text),
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    ApiError::invalid(rejection.body_text())
}
