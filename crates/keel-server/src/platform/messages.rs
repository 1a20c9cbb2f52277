//! `POST /v1/messages`: a message from a platform, resolved by the incoming-message pipeline
//! (user, persona, conversation, tools, trust) and queued in its conversation's lane.
//!
//! Nothing of a refused message is kept: a daemon shutting down refuses it before anything is
//! stored; a message its lane refuses (full, or the daemon began shutting down meanwhile) has
//! its attachments forgotten again ([`submit_or_forget`]), and the whole of it runs on a task of
//! its own, so a caller hanging up half way does not leave its files behind either.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use keel_core::RunOptions;
use keel_core::SessionInfo;
use keel_core::files::FileRecord;
use keel_platform::{IncomingMessage, Source};
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Caller;
use crate::attachments::{Attachment, decode_attachments};
use crate::control::{AcceptedView, WaitQuery};
use crate::engine::{EngineError, Submitted};
use crate::error::{ApiError, ErrorBody};
use crate::json::{ApiJson, ApiQuery};
use crate::state::AppState;

/// The routes of this part.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(incoming_message))
}

/// `POST /v1/messages`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IncomingBody {
    /// The platform, e.g. `telegram`, `slack`, `discord`: the key must speak for it.
    pub platform: String,
    /// The sender's id there.
    pub platform_user_id: String,
    /// The sender's name there.
    pub platform_username: Option<String>,
    /// The server (Slack workspace, Discord guild).
    pub platform_server_id: Option<String>,
    /// The channel (a Telegram chat id).
    pub platform_channel_id: String,
    /// The thread: a thread is its own conversation.
    pub platform_thread_id: Option<String>,
    /// The message.
    pub text: String,
    /// Files sent with it: kept as files of the conversation, described to the model.
    #[serde(default)]
    pub attachments: Vec<Attachment>,
    /// `chat` (default, trusted), `email_trigger` or `event` (untrusted), or `sub_agent`
    /// (as trusted as `parent_conversation_id`).
    pub source: Option<String>,
    /// The parent conversation of a `sub_agent` message.
    pub parent_conversation_id: Option<String>,
}

/// Accepts a platform's message: it is resolved to a user (an unknown sender becomes a guest),
/// a persona and a conversation, and becomes a run in that conversation's lane.
#[utoipa::path(post, path = "/v1/messages", request_body = IncomingBody,
    params(("wait" = Option<bool>, Query, description = "Answer with the report when the run ends")),
    responses((status = 202, body = AcceptedView),
              (status = 200, description = "The run's report (`?wait=true`)", body = Object),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 429, body = ErrorBody),
              (status = 503, body = ErrorBody)))]
async fn incoming_message(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<WaitQuery>,
    ApiJson(body): ApiJson<IncomingBody>,
) -> Result<Response, ApiError> {
    if !caller.speaks_for(&body.platform) {
        return Err(ApiError::forbidden(format!(
            "this key may not post messages for platform `{}`",
            body.platform
        )));
    }
    let source = match (body.source.as_deref(), body.parent_conversation_id) {
        (None | Some("chat"), None) => Source::Chat,
        (Some("email_trigger"), None) => Source::EmailTrigger,
        (Some("event"), None) => Source::Event,
        (Some("sub_agent"), Some(parent)) => {
            // The parent must be the caller's to see: its trust is inherited.
            caller.conversation(&state, &parent).await?;
            Source::SubAgent { parent }
        }
        (Some("sub_agent"), None) => {
            return Err(ApiError::invalid(
                "a `sub_agent` message needs `parent_conversation_id`",
            ));
        }
        (_, Some(_)) => {
            return Err(ApiError::invalid(
                "`parent_conversation_id` goes only with `source: \"sub_agent\"`",
            ));
        }
        (Some(other), None) => {
            return Err(ApiError::invalid(format!(
                "`source` must be `chat`, `email_trigger`, `event` or `sub_agent`, not `{other}`"
            )));
        }
    };
    // Refused before anything of it is stored (the user, the conversation, the files).
    if !state.engine.accepting() {
        return Err(EngineError::ShuttingDown.into());
    }
    let attachments = decode_attachments(
        body.attachments,
        state.inbox.settings().max_attachment_bytes,
    )?;
    let incoming = IncomingMessage {
        platform: body.platform,
        platform_user_id: body.platform_user_id,
        platform_username: body.platform_username,
        platform_server_id: body.platform_server_id,
        platform_channel_id: body.platform_channel_id,
        platform_thread_id: body.platform_thread_id,
        text: body.text,
        source,
        attachments,
        chat_kind: Default::default(),
    };
    // On a task of its own: once its files are kept, the message is queued or they are
    // forgotten, whether or not the caller still waits.
    let admitting = state.clone();
    let (prepared, submitted) = tokio::spawn(async move {
        let prepared = admitting.inbox.prepare(&incoming).await?;
        let submitted = submit_or_forget(
            &admitting,
            &prepared.conversation,
            prepared.text.clone(),
            &prepared.files,
            Some(prepared.user.id.clone()),
            prepared.options.clone(),
        )
        .await?;
        Ok::<_, ApiError>((prepared, submitted))
    })
    .await
    .map_err(|error| ApiError::internal(format!("accepting the message failed: {error}")))??;
    if query.wait {
        let report = state.engine.wait(&submitted.run_id).await?;
        return Ok(axum::Json(report).into_response());
    }
    let accepted = AcceptedView {
        run_id: submitted.run_id,
        conversation_id: prepared.conversation.id,
        position: submitted.position,
    };
    Ok((StatusCode::ACCEPTED, axum::Json(accepted)).into_response())
}

/// Queues `text` in `conversation`'s lane; when the lane refuses it (full, or the daemon is
/// shutting down), forgets `files`, the attachments kept for it, before answering. (They are
/// kept first so that a run never starts before its files; a refusal then removes them, and
/// only them: content another message kept stays.)
pub(crate) async fn submit_or_forget(
    state: &AppState,
    conversation: &SessionInfo,
    text: String,
    files: &[FileRecord],
    user_id: Option<String>,
    options: RunOptions,
) -> Result<Submitted, ApiError> {
    match state
        .engine
        .submit_with(conversation, text, user_id, options)
        .await
    {
        Ok(submitted) => Ok(submitted),
        Err(
            refused @ (EngineError::LaneFull { .. }
            | EngineError::Busy { .. }
            | EngineError::ShuttingDown),
        ) => {
            if let Err(error) = state.store.forget_attachments(files).await {
                tracing::error!(%error, "cannot forget a refused message's attachments");
            }
            Err(refused.into())
        }
        Err(other) => Err(other.into()),
    }
}
