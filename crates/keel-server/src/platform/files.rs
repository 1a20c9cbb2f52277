//! `GET /v1/files/{id}` and `GET /v1/files/{id}/content`: the files kept for a conversation —
//! its attachments and the files its runs produced (returned with a run's report). A caller
//! sees a file only when it may see the file's conversation; any other id is a 404.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use keel_core::files::FileRecord;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::ApiPath;
use crate::state::AppState;

/// The routes of this part.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(file))
        .routes(routes!(file_content))
}

/// The file `id`, when the caller may see its conversation.
async fn visible_file(state: &AppState, caller: &Caller, id: &str) -> Result<FileRecord, ApiError> {
    let missing = || ApiError::not_found(format!("file `{id}`"));
    let record = state.store.file(id).await?.ok_or_else(missing)?;
    caller
        .conversation(state, &record.session_id)
        .await
        .map_err(|_| missing())?;
    Ok(record)
}

/// A file's record: name, media type, size, SHA-256, conversation, run and origin.
#[utoipa::path(get, path = "/v1/files/{id}", params(("id" = String, Path, description = "The file")),
    responses((status = 200, body = Object), (status = 404, body = ErrorBody)))]
async fn file(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let record = visible_file(&state, &caller, &id).await?;
    Ok(axum::Json(record).into_response())
}

/// A file's bytes, with its media type, as a download.
#[utoipa::path(get, path = "/v1/files/{id}/content", params(("id" = String, Path, description = "The file")),
    responses((status = 200, description = "The file's bytes"), (status = 404, body = ErrorBody)))]
async fn file_content(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let record = visible_file(&state, &caller, &id).await?;
    let content = state
        .store
        .file_content(&record.sha256)
        .await?
        .ok_or_else(|| ApiError::internal(format!("the content of file `{id}` is gone")))?;
    // The name came from outside: only a plain ASCII rendering goes into the header.
    let shown: String = record
        .name
        .rsplit('/')
        .next()
        .unwrap_or("file")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-_ ".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    Ok((
        [
            (header::CONTENT_TYPE, record.media_type.clone()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{shown}\""),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
        ],
        content,
    )
        .into_response())
}
