//! The endpoints that act: make a conversation, send a message, cancel, answer, resume, and a
//! run's report.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use keel_core::{AgentState, ApprovalDecision, LanePolicy, ResumeOptions, UnsafeCall};
use keel_platform::NewConversation;
use keel_platform::{MAX_TEXT_BYTES, register_attachments};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Caller;
use crate::attachments::{Attachment, decode_attachments};
use crate::engine::EngineError;
use crate::error::{ApiError, ErrorBody};
use crate::json::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;
use crate::views::ConversationView;

/// The routes of this part.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_conversation))
        .routes(routes!(update_conversation))
        .routes(routes!(send_message))
        .routes(routes!(cancel_run))
        .routes(routes!(answer_run))
        .routes(routes!(approve_run))
        .routes(routes!(resume_run))
        .routes(routes!(run_report))
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::LaneFull { retry_after, .. } => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "lane_full",
                error.to_string(),
            )
            .retry_after(retry_after),
            EngineError::ShuttingDown => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                error.to_string(),
            )
            .retry_after(5),
            EngineError::NotFound(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", error.to_string())
            }
            EngineError::Conflict(message) => ApiError::conflict(message),
            EngineError::Duplicate { .. } => ApiError::conflict(error.to_string()),
            EngineError::Busy { .. } => {
                ApiError::new(StatusCode::CONFLICT, "busy", error.to_string())
            }
            EngineError::InvalidAnswer(message) => ApiError::invalid(message),
            EngineError::Store(store) => store.into(),
        }
    }
}

/// `POST /v1/conversations`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewConversationBody {
    /// `queue`, `interrupt`, `reject`, `steer`, `collect` or `rollback` (default: `[serve]
    /// lane_policy`, or the channel's).
    pub lane_policy: Option<String>,
}

/// Makes a conversation owned by the caller's user.
#[utoipa::path(post, path = "/v1/conversations", request_body = NewConversationBody,
    responses((status = 201, body = ConversationView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn create_conversation(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<NewConversationBody>,
) -> Result<Response, ApiError> {
    let lane_policy = match body.lane_policy.as_deref() {
        None => state.engine.default_lane_policy(),
        Some(name) => lane_policy(name)?,
    };
    let conversation = NewConversation {
        id: uuid::Uuid::now_v7().to_string(),
        owner: caller.user_id.clone(),
        lane_policy,
        at: chrono::Utc::now(),
        place: None,
        trusted: true,
    };
    let made = state
        .store
        .create_conversation(&conversation)
        .await?
        .ok_or_else(|| ApiError::internal("a new conversation id was taken; try again"))?;
    Ok((
        StatusCode::CREATED,
        axum::Json(ConversationView::from(made)),
    )
        .into_response())
}

/// `PATCH /v1/conversations/{id}`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConversationChange {
    /// The conversation's lane policy from now on: `queue`, `interrupt`, `reject`, `steer`,
    /// `collect` or `rollback`.
    pub lane_policy: Option<String>,
}

/// The lane policy named in a request.
fn lane_policy(name: &str) -> Result<LanePolicy, ApiError> {
    LanePolicy::parse(name).ok_or_else(|| {
        ApiError::invalid(format!(
            "lane_policy must be one of {}, not `{name}`",
            LanePolicy::names()
        ))
    })
}

/// Changes a conversation: its lane policy (its owner or an admin only).
#[utoipa::path(patch, path = "/v1/conversations/{id}", request_body = ConversationChange,
    params(("id" = String, Path, description = "The conversation")),
    responses((status = 200, body = ConversationView), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn update_conversation(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<ConversationChange>,
) -> Result<axum::Json<ConversationView>, ApiError> {
    let conversation = caller.conversation(&state, &id).await?;
    let owner = caller.user_id.is_some() && conversation.owner == caller.user_id;
    if !(caller.admin || owner) {
        return Err(ApiError::forbidden(format!(
            "only the owner of conversation `{id}` or an admin may change it"
        )));
    }
    if let Some(name) = body.lane_policy.as_deref() {
        let policy = lane_policy(name)?;
        if !state.store.set_lane_policy(&id, policy).await? {
            return Err(ApiError::not_found(format!("conversation `{id}`")));
        }
    }
    Ok(axum::Json(caller.conversation(&state, &id).await?.into()))
}

/// `POST /v1/conversations/{id}/messages`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageBody {
    /// The message.
    pub text: String,
    /// Files sent with it.
    #[serde(default)]
    pub attachments: Vec<Attachment>,
}

/// `?wait=true`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// Answer with the run's report when it ends.
    #[serde(default)]
    pub wait: bool,
}

/// What `POST .../messages` answers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AcceptedView {
    /// The run the message became.
    pub run_id: String,
    /// Its conversation.
    pub conversation_id: String,
    /// Runs ahead of it in the conversation's lane (0: it starts now).
    pub position: usize,
}

/// Sends a message: it becomes a run, queued behind the conversation's lane.
#[utoipa::path(post, path = "/v1/conversations/{id}/messages", request_body = MessageBody,
    params(("id" = String, Path, description = "The conversation"),
           ("wait" = Option<bool>, Query, description = "Answer with the report when the run ends")),
    responses((status = 202, body = AcceptedView),
              (status = 200, description = "The run's report (`?wait=true`)", body = Object),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 429, body = ErrorBody),
              (status = 503, body = ErrorBody)))]
async fn send_message(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<WaitQuery>,
    ApiJson(body): ApiJson<MessageBody>,
) -> Result<Response, ApiError> {
    let conversation = caller.conversation(&state, &id).await?;
    if body.text.trim().is_empty() {
        return Err(ApiError::invalid("text must not be empty"));
    }
    if body.text.len() > MAX_TEXT_BYTES {
        return Err(ApiError::invalid(format!(
            "`text` is {} bytes; at most {MAX_TEXT_BYTES}",
            body.text.len()
        )));
    }
    let max_bytes = state.inbox.settings().max_attachment_bytes;
    let attachments = decode_attachments(body.attachments, max_bytes)?;
    // Nothing of a refused message is kept: refused before its files are, or they are
    // forgotten with the refusal (see crate::platform::messages).
    if !state.engine.accepting() {
        return Err(EngineError::ShuttingDown.into());
    }
    let options = state.inbox.options_for(&conversation).await?;
    let (text, files) = register_attachments(
        state.store.as_ref(),
        body.text,
        &attachments,
        &conversation.id,
        caller.user_id.as_deref(),
        Utc::now(),
    )
    .await?;
    let submitted = crate::platform::messages::submit_or_forget(
        &state,
        &conversation,
        text,
        &files,
        caller.user_id.clone(),
        options,
    )
    .await?;
    if query.wait {
        let report = state.engine.wait(&submitted.run_id).await?;
        return Ok(axum::Json(report).into_response());
    }
    let accepted = AcceptedView {
        run_id: submitted.run_id,
        conversation_id: conversation.id,
        position: submitted.position,
    };
    Ok((StatusCode::ACCEPTED, axum::Json(accepted)).into_response())
}

/// What `cancel` answers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CancelView {
    /// The run.
    pub run_id: String,
    /// `cancelled` when it had not started; else its state while it stops.
    pub state: String,
}

/// Cancels a run: a queued one at once, a running one at its next safe point.
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", params(("id" = String, Path, description = "The run")),
    responses((status = 202, body = CancelView), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn cancel_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.run(&state, &id).await?;
    let now = state.engine.cancel(&id).await?;
    let view = CancelView {
        run_id: id,
        state: now.as_str().to_string(),
    };
    Ok((StatusCode::ACCEPTED, axum::Json(view)).into_response())
}

/// `POST /v1/runs/{id}/answer`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    /// The answer to the run's question.
    pub text: String,
}

/// What `answer` and `resume` answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ContinuedView {
    /// The run, going on.
    pub run_id: String,
}

/// Answers the question a run waits on; the run goes on.
#[utoipa::path(post, path = "/v1/runs/{id}/answer", request_body = AnswerBody,
    params(("id" = String, Path, description = "The run")),
    responses((status = 202, body = ContinuedView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn answer_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<AnswerBody>,
) -> Result<Response, ApiError> {
    caller.run(&state, &id).await?;
    state.engine.answer(&id, body.text).await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(ContinuedView { run_id: id }),
    )
        .into_response())
}

/// `POST /v1/runs/{id}/approval`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalBody {
    /// `approve_once`, `approve_session` or `deny`.
    pub decision: String,
    /// The id of the tool call decided: the run report's `approval.call_id` (or the
    /// `agent.approval.requested` event's `call_id`). Required: a decision about any other
    /// call than the one the run waits on — a stale one — is refused with 409.
    #[schema(required = true, nullable = false)]
    pub call_id: Option<String>,
}

/// Decides about the tool call a run waits to have approved, named by its `call_id`; the run
/// goes on.
#[utoipa::path(post, path = "/v1/runs/{id}/approval", request_body = ApprovalBody,
    params(("id" = String, Path, description = "The run")),
    responses((status = 202, body = ContinuedView),
              (status = 400, description = "An unknown decision, or no `call_id`", body = ErrorBody),
              (status = 403, description = "An approval of a call of an untrusted conversation (an email, an event) by a key that sees it only as its platform's", body = ErrorBody),
              (status = 404, body = ErrorBody),
              (status = 409, description = "The run waits for no approval, or for that of another call than `call_id`", body = ErrorBody)))]
async fn approve_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<ApprovalBody>,
) -> Result<Response, ApiError> {
    caller.run_to_decide(&state, &id, &body.decision).await?;
    let decision = match body.decision.as_str() {
        "approve_once" => ApprovalDecision::ApproveOnce,
        "approve_session" => ApprovalDecision::ApproveSession,
        "deny" => ApprovalDecision::Deny,
        other => {
            return Err(ApiError::invalid(format!(
                "decision must be `approve_once`, `approve_session` or `deny`, not `{other}`"
            )));
        }
    };
    let call_id = match body.call_id.as_deref().map(str::trim) {
        Some(call_id) if !call_id.is_empty() => call_id.to_string(),
        _ => {
            return Err(ApiError::invalid(
                "call_id is required: the id of the tool call this decision is about, as the \
                 run's report names it (`approval.call_id`); a decision is never applied to \
                 whatever call the run waits on when it arrives",
            ));
        }
    };
    state.engine.approve(&id, &call_id, decision).await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(ContinuedView { run_id: id }),
    )
        .into_response())
}

/// `POST /v1/runs/{id}/resume`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeBody {
    /// For a run halted before a side-effecting call a crash interrupted: `retry` or `skip` it.
    pub unsafe_call: Option<String>,
    /// Go on under the current system prompt although it changed since the run started.
    #[serde(default)]
    pub accept_prompt_change: bool,
}

/// Resumes a run its worker left, or one halted for a decision.
#[utoipa::path(post, path = "/v1/runs/{id}/resume", request_body = ResumeBody,
    params(("id" = String, Path, description = "The run")),
    responses((status = 202, body = ContinuedView), (status = 400, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn resume_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<ResumeBody>,
) -> Result<Response, ApiError> {
    caller.run(&state, &id).await?;
    let unsafe_call = match body.unsafe_call.as_deref() {
        None => None,
        Some("retry") => Some(UnsafeCall::Retry),
        Some("skip") => Some(UnsafeCall::Skip),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "unsafe_call must be `retry` or `skip`, not `{other}`"
            )));
        }
    };
    let options = ResumeOptions {
        accept_prompt_change: body.accept_prompt_change,
        unsafe_call,
        ..ResumeOptions::default()
    };
    state.engine.resume(&id, options).await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(ContinuedView { run_id: id }),
    )
        .into_response())
}

/// The report of a run that ended or waits for a human (the `keel run --json` object).
#[utoipa::path(get, path = "/v1/runs/{id}/report", params(("id" = String, Path, description = "The run")),
    responses((status = 200, description = "The report", body = Object),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn run_report(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let (run, _) = caller.run(&state, &id).await?;
    if !(run.state.is_terminal() || run.state == AgentState::WaitingOnHuman) {
        return Err(ApiError::conflict(format!(
            "run `{id}` is {}: its report comes when it ends",
            run.state
        )));
    }
    Ok(axum::Json(state.engine.report(&id).await?).into_response())
}
