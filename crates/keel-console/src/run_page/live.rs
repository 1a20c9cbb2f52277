//! The run page's live side: its events over SSE from a cookie-authenticated route (the hub's
//! own run stream, the one `GET /v1/runs/{id}/events` serves), and the download of a run's
//! files. The script that appends the events to the page (with `textContent`, never as HTML)
//! and the page's styles are the console's assets (`assets/run-page.js`, `run-page.css`).

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use keel_server::hub::{EventId, stream};
use serde::Deserialize;

use crate::{ConsoleError, ConsoleState, Viewer};

/// `?after=`: the seq of the last stored event the page already shows.
#[derive(Debug, Default, Deserialize)]
pub struct LiveQuery {
    /// Events after this seq only.
    pub after: Option<u64>,
}

/// `GET /runs/{id}/live`: the run's events after `after` (or after the browser's
/// `Last-Event-ID` when it reconnects), then live ones, then `keel.stream.end`.
pub async fn events(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(query): Query<LiveQuery>,
    headers: HeaderMap,
) -> Result<Response, ConsoleError> {
    let (run, _) = viewer.caller.run(&state.app, &id).await?;
    let reconnected = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(EventId::parse);
    let after = reconnected.unwrap_or(EventId {
        seq: query.after.unwrap_or(0),
        delta: 0,
    });
    Ok(stream::run_events(state.app.hub.clone(), run, after).into_response())
}

/// `GET /runs/{id}/files/{file_id}`: a file of the run, as a download (never shown inline,
/// whatever its type).
pub async fn file(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path((id, file_id)): Path<(String, String)>,
) -> Result<Response, ConsoleError> {
    let (run, _) = viewer.caller.run(&state.app, &id).await?;
    let missing = || ConsoleError::not_found(format!("file `{file_id}`"));
    let store = state.app.store.as_ref();
    let record = store
        .file(&file_id)
        .await?
        .filter(|record| record.run_id.as_deref() == Some(run.id.as_str()))
        .ok_or_else(missing)?;
    let content = store
        .file_content(&record.sha256)
        .await?
        .ok_or_else(missing)?;
    let disposition = format!("attachment; filename=\"{}\"", safe_file_name(&record.name));
    let disposition = HeaderValue::from_str(&disposition)
        .unwrap_or_else(|_| HeaderValue::from_static("attachment"));
    Ok((
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            ),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        content,
    )
        .into_response())
}

/// The last part of `name`, with anything but ASCII letters, digits, `.`, `-` and `_` made
/// `_`: safe inside a quoted header value.
fn safe_file_name(name: &str) -> String {
    let base = name.rsplit('/').next().unwrap_or(name);
    let safe: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe.is_empty() {
        "file".to_string()
    } else {
        safe
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_made_safe_for_the_header() {
        assert_eq!(safe_file_name("out/report \"x\".txt"), "report__x_.txt");
        assert_eq!(safe_file_name(""), "file");
    }

    #[test]
    fn the_script_never_writes_html() {
        const SCRIPT: &str = include_str!("../../assets/run-page.js");
        assert!(!SCRIPT.contains("innerHTML"));
        assert!(!SCRIPT.contains("outerHTML"));
        assert!(!SCRIPT.contains("insertAdjacentHTML"));
        assert!(SCRIPT.contains("textContent"));
    }
}
