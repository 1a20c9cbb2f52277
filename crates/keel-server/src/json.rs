//! Request bodies: JSON only, unknown fields refused (the types say `deny_unknown_fields`),
//! and every rejection answered as an [`ApiError`] in JSON, not axum's plain text.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
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

/// A path parameter of type `T`, or a 400 JSON error (an id that is not UTF-8, for one).
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(ApiPath(value)),
            Err(rejection) => Err(path_rejection(rejection)),
        }
    }
}

fn path_rejection(rejection: PathRejection) -> ApiError {
    ApiError::invalid(format!("the path is not valid: {}", rejection.body_text()))
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

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use tower::ServiceExt;

    use super::ApiPath;

    #[tokio::test]
    async fn a_path_id_that_is_not_utf8_is_a_json_400() {
        let app = Router::new().route("/x/{id}", get(|ApiPath(id): ApiPath<String>| async { id }));
        let response = app
            .clone()
            .oneshot(Request::get("/x/%FF%FE").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "application/json"
        );
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["error"]["code"], "invalid_request");
        let fine = app
            .oneshot(Request::get("/x/r%C3%A9").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(fine.status(), StatusCode::OK);
    }
}
