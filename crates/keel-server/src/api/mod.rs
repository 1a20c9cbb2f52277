//! The endpoints that read: conversations, transcripts, runs, and their live events; and the
//! readiness check.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use keel_core::AgentState;
use keel_platform::{ConversationFilter, RunFilter};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::hub::{EventId, parse_conversation_id, stream};
use crate::json::{ApiPath, ApiQuery};
use crate::state::AppState;
use crate::views::{ConversationView, MessageView, Page, RunView, page_size};

/// The routes of this part.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_conversations))
        .routes(routes!(get_conversation))
        .routes(routes!(list_messages))
        .routes(routes!(list_runs))
        .routes(routes!(get_run))
        .routes(routes!(run_events))
        .routes(routes!(conversation_events))
        .routes(routes!(ready))
}

/// `?limit=&cursor=`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Items per page (1–200, default 50).
    pub limit: Option<usize>,
    /// The previous page's `next_cursor`.
    pub cursor: Option<String>,
}

/// The caller's conversations (an admin's: all), newest first.
#[utoipa::path(get, path = "/v1/conversations",
    params(("limit" = Option<usize>, Query, description = "1–200, default 50"),
           ("cursor" = Option<String>, Query, description = "The previous page's next_cursor")),
    responses((status = 200, body = Page<ConversationView>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn list_conversations(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<axum::Json<Page<ConversationView>>, ApiError> {
    let limit = page_size(query.limit)?;
    let items = state
        .store
        .list_conversations(&ConversationFilter {
            owner: caller.owner_filter(),
            before: query.cursor,
            limit,
        })
        .await?;
    let next_cursor = (items.len() == limit)
        .then(|| items.last().map(|c| c.id.clone()))
        .flatten();
    Ok(axum::Json(Page {
        items: items.into_iter().map(ConversationView::from).collect(),
        next_cursor,
    }))
}

/// A conversation.
#[utoipa::path(get, path = "/v1/conversations/{id}", params(("id" = String, Path, description = "The conversation")),
    responses((status = 200, body = ConversationView), (status = 404, body = ErrorBody)))]
async fn get_conversation(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<axum::Json<ConversationView>, ApiError> {
    Ok(axum::Json(caller.conversation(&state, &id).await?.into()))
}

/// `?after=&limit=`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessagesQuery {
    /// Messages after this seq (the previous page's next_cursor).
    pub after: Option<u64>,
    /// Also accepted: the previous page's next_cursor.
    pub cursor: Option<u64>,
    /// Items per page (1–200, default 50).
    pub limit: Option<usize>,
}

/// A conversation's transcript, oldest first; compaction summaries are marked, and the
/// messages of rolled-back runs (`hidden`).
#[utoipa::path(get, path = "/v1/conversations/{id}/messages",
    params(("id" = String, Path, description = "The conversation"),
           ("after" = Option<u64>, Query, description = "Messages after this seq"),
           ("limit" = Option<usize>, Query, description = "1–200, default 50")),
    responses((status = 200, body = Page<MessageView>), (status = 404, body = ErrorBody)))]
async fn list_messages(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<MessagesQuery>,
) -> Result<axum::Json<Page<MessageView>>, ApiError> {
    caller.conversation(&state, &id).await?;
    let limit = page_size(query.limit)?;
    let after = query.after.or(query.cursor).unwrap_or(0);
    let items = state.store.messages_page(&id, after, limit).await?;
    let rolled_back = state.store.rolled_back_runs(&id).await?;
    let next_cursor = (items.len() == limit)
        .then(|| items.last().map(|m| m.seq.to_string()))
        .flatten();
    let view = |stored: keel_core::StoredMessage| {
        let hidden = stored
            .run_id
            .as_ref()
            .is_some_and(|run| rolled_back.iter().any(|(rolled, _)| rolled == run));
        MessageView {
            hidden,
            ..MessageView::from(stored)
        }
    };
    Ok(axum::Json(Page {
        items: items.into_iter().map(view).collect(),
        next_cursor,
    }))
}

/// `?conversation=&state=&limit=&cursor=`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    /// Only this conversation's runs.
    pub conversation: Option<String>,
    /// Only runs in this state.
    pub state: Option<String>,
    /// Items per page (1–200, default 50).
    pub limit: Option<usize>,
    /// The previous page's next_cursor.
    pub cursor: Option<String>,
}

/// Runs the caller may see, newest first.
#[utoipa::path(get, path = "/v1/runs",
    params(("conversation" = Option<String>, Query, description = "Only this conversation's runs"),
           ("state" = Option<String>, Query, description = "Only runs in this state"),
           ("limit" = Option<usize>, Query, description = "1–200, default 50"),
           ("cursor" = Option<String>, Query, description = "The previous page's next_cursor")),
    responses((status = 200, body = Page<RunView>), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn list_runs(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<RunsQuery>,
) -> Result<axum::Json<Page<RunView>>, ApiError> {
    let limit = page_size(query.limit)?;
    if let Some(conversation) = &query.conversation {
        caller.conversation(&state, conversation).await?;
    }
    let wanted = match query.state.as_deref() {
        None => None,
        Some(name) => Some(
            name.parse::<AgentState>()
                .map_err(|_| ApiError::invalid(format!("unknown state `{name}`")))?,
        ),
    };
    let items = state
        .store
        .find_runs(&RunFilter {
            session_id: query.conversation,
            state: wanted,
            owner: caller.owner_filter(),
            before: query.cursor,
            limit,
        })
        .await?;
    let next_cursor = (items.len() == limit)
        .then(|| items.last().map(|r| r.id.clone()))
        .flatten();
    Ok(axum::Json(Page {
        items: items
            .into_iter()
            .map(|run| {
                let position = state.engine.position(&run.id);
                RunView::of(run, position)
            })
            .collect(),
        next_cursor,
    }))
}

/// A run.
#[utoipa::path(get, path = "/v1/runs/{id}", params(("id" = String, Path, description = "The run")),
    responses((status = 200, body = RunView), (status = 404, body = ErrorBody)))]
async fn get_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<axum::Json<RunView>, ApiError> {
    let (run, _) = caller.run(&state, &id).await?;
    let position = state.engine.position(&id);
    let rolled_back_by = state
        .store
        .rolled_back_runs(&run.session_id)
        .await?
        .into_iter()
        .find_map(|(rolled, by)| (rolled == id).then_some(by));
    Ok(axum::Json(RunView {
        rolled_back_by,
        ..RunView::of(run, position)
    }))
}

/// The `Last-Event-ID` header, as text.
fn last_event_id(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    headers
        .get("last-event-id")
        .map(|value| {
            value
                .to_str()
                .map_err(|_| ApiError::invalid("Last-Event-ID is not text"))
        })
        .transpose()
}

/// A run's events as Server-Sent Events: stored ones, then live ones, then `keel.stream.end`.
#[utoipa::path(get, path = "/v1/runs/{id}/events",
    params(("id" = String, Path, description = "The run"),
           ("Last-Event-ID" = Option<String>, Header, description = "Go on after this event")),
    responses((status = 200, description = "text/event-stream: id, event (its name), data (the event as JSON)"),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn run_events(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (run, _) = caller.run(&state, &id).await?;
    let after = match last_event_id(&headers)? {
        None => EventId::default(),
        Some(text) => {
            let after = EventId::parse(text).ok_or_else(|| {
                ApiError::invalid(format!(
                    "Last-Event-ID `{text}` is not an event id of this stream"
                ))
            })?;
            let stored = state.store.events_after(&id, 0).await?.len() as u64;
            let live = state.hub.last_id(&id).map_or(0, |last| last.seq);
            if after.seq > stored.max(live) {
                return Err(ApiError::invalid(format!(
                    "Last-Event-ID `{text}` is beyond the events of run `{id}`"
                )));
            }
            after
        }
    };
    Ok(stream::run_events(state.hub.clone(), run, after).into_response())
}

/// A conversation's events, every run's, as Server-Sent Events; stays open.
#[utoipa::path(get, path = "/v1/conversations/{id}/events",
    params(("id" = String, Path, description = "The conversation"),
           ("Last-Event-ID" = Option<String>, Header, description = "Go on after this event (RUN_ID:S[.N])")),
    responses((status = 200, description = "text/event-stream: id (RUN_ID:S[.N]), event, data"),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn conversation_events(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let conversation = caller.conversation(&state, &id).await?;
    let after = match last_event_id(&headers)? {
        None => None,
        Some(text) => {
            let invalid = || {
                ApiError::invalid(format!(
                    "Last-Event-ID `{text}` is not an event id of this conversation"
                ))
            };
            let (run_id, event) = parse_conversation_id(text).ok_or_else(invalid)?;
            match state.store.run(&run_id).await? {
                Some(run) if run.session_id == conversation.id => Some((run_id, event)),
                _ => return Err(invalid()),
            }
        }
    };
    Ok(stream::conversation_events(state.hub.clone(), conversation.id, after).into_response())
}

/// 200 once the engine takes runs; 503 while starting or shutting down.
#[utoipa::path(get, path = "/readyz", responses((status = 200, description = "ready"), (status = 503, body = ErrorBody)))]
async fn ready(State(state): State<AppState>) -> Result<&'static str, ApiError> {
    if state.engine.accepting() {
        Ok("ready")
    } else {
        Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "keel serve is starting or stopping",
        ))
    }
}
