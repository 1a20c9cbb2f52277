//! The whole HTTP API: the routes of each part, the OpenAPI document made from them at
//! `/openapi.json`, and the health checks.

use axum::Router;
use axum::routing::get;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

/// The OpenAPI document's fixed parts; the paths come from the routes.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "keel",
        description = "keel serve: conversations, runs and their live events."
    ),
    components(schemas(crate::error::ErrorBody, crate::error::ErrorDetail))
)]
pub struct ApiDoc;

/// The router of the whole API on `state`.
pub fn router(state: AppState) -> Router {
    let (api, document) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(crate::control::routes())
        .merge(crate::api::routes())
        .merge(crate::platform::routes())
        .merge(crate::schedules::routes())
        .split_for_parts();
    let mut document = document;
    crate::openapi::describe_responses(&mut document);
    let document = std::sync::Arc::new(document);
    let limit = state.max_request_bytes;
    api.route(
        "/openapi.json",
        get(move || {
            let document = document.clone();
            async move { axum::Json(document.as_ref().clone()) }
        }),
    )
    .route("/healthz", get(|| async { "ok" }))
    .merge(crate::metrics::route::routes())
    .fallback(|| async { crate::ApiError::not_found("this path") })
    .method_not_allowed_fallback(|| async {
        crate::ApiError::new(
            axum::http::StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request",
            "this method is not allowed on this path",
        )
    })
    .layer(axum::extract::DefaultBodyLimit::max(limit))
    .with_state(state)
}
