//! `POST /v1/chat/completions`: a client's turn becomes a durable keel run (or answers the
//! run waiting on a person in its conversation), answered whole or streamed.
//!
//! In order: the caller's key (401), the body (413, 400), the model (404), whether keel takes
//! runs (503), the conversation ([`crate::turns`]), whether the same request came before (then
//! it is answered from the run it became), a run waiting on a person there (the message is
//! its answer), else a new run through the conversation's lane (429 when full).

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use keel_core::{AgentState, RunOptions, SessionInfo};
use keel_platform::{InboundKey, MAX_TEXT_BYTES, RunFilter};
use keel_server::engine::EngineError;
use keel_server::{ApiError, AppState, Caller};

use crate::answer::{self, Answer};
use crate::errors::OpenAiError;
use crate::pending::{decision, pending_text};
use crate::stream::{StreamSetup, respond, respond_now};
use crate::turns::{self, Redelivery};
use crate::wire::{self, Turn};
use crate::{OpenAiCaller, OpenAiOptions};

/// The header naming the conversation.
pub const CONVERSATION_HEADER: &str = "x-keel-conversation";

/// The header asking for progress lines.
pub const PROGRESS_HEADER: &str = "x-keel-progress";

/// A turn on its way to an answer.
struct Request {
    turn: Turn,
    caller: Caller,
    options: RunOptions,
    created: i64,
}

/// `POST /v1/chat/completions`.
pub async fn completions(
    State(state): State<AppState>,
    axum::Extension(settings): axum::Extension<OpenAiOptions>,
    OpenAiCaller(caller): OpenAiCaller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, OpenAiError> {
    if caller.user_id.is_none() && !caller.admin {
        // A channel's key speaks for its platforms' senders, not for a user of its own: the
        // conversations it would make here would be no one's.
        return Err(ApiError::forbidden(
            "this key speaks for platforms only: use a key of a user (`keel keys create --user`)",
        )
        .into());
    }
    let limit = state.max_request_bytes;
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| OpenAiError::too_large(limit))?;
    let mut turn = wire::parse(&bytes, MAX_TEXT_BYTES)?;
    if let Some(name) = header(&headers, CONVERSATION_HEADER)? {
        turn.conversation = Some(name);
    }
    if let Some(progress) = header(&headers, PROGRESS_HEADER)? {
        turn.progress = progress.eq_ignore_ascii_case("true");
    }
    if let Some(name) = &turn.conversation {
        wire::check_name(name)?;
    }
    let options = crate::models::options_for(&state, &turn.model).await?;
    if !state.engine.accepting() {
        return Err(EngineError::ShuttingDown.into());
    }
    let request = Request {
        turn,
        caller,
        options,
        created: Utc::now().timestamp(),
    };
    // On a task of its own: once anything of the turn is stored, the rest of its bookkeeping
    // (the run queued and its turn key kept, a reply recorded and applied) is done whether or
    // not the client still waits.
    tokio::spawn(handle(state, settings, request))
        .await
        .map_err(|error| OpenAiError::internal(format!("answering the turn failed: {error}")))?
}

/// The turn, checked, to its answer.
async fn handle(
    state: AppState,
    settings: OpenAiOptions,
    request: Request,
) -> Result<Response, OpenAiError> {
    let identity = turns::identity(&request.caller);
    let (found, named) = match &request.turn.conversation {
        Some(name) => (
            Some(turns::named(&state, &request.caller, name).await?),
            true,
        ),
        None => (
            turns::by_history(&state, &request.caller, &request.turn).await?,
            false,
        ),
    };
    let key = turns::turn_key(&identity, &request.turn.model, &request.turn.history);
    let named_id = found.as_ref().filter(|_| named).map(|c| c.id.clone());
    let inbound = match turns::redelivery(
        &state,
        &key,
        named_id.as_deref(),
        settings.redelivery_window,
        Utc::now(),
    )
    .await?
    {
        Redelivery::Of(run_id) => return answer_from(&state, &request, run_id, None, true).await,
        Redelivery::New(inbound) => inbound,
    };
    let conversation = match found {
        Some(conversation) => conversation,
        None => turns::new_conversation(&state, &request.caller).await?,
    };
    if let Some(waiting) = waiting_run(&state, &conversation).await? {
        if !named {
            // The turn after this one continues here, whatever this reply does.
            turns::remember(&state, &key, &conversation.id, &waiting.id).await?;
        }
        return reply_to_waiting(&state, &request, &conversation, waiting, inbound).await;
    }
    let following = state.hub.follow_conversation(&conversation.id);
    let submitted = state
        .engine
        .submit_inbound(
            &conversation,
            request.turn.text.clone(),
            request.caller.user_id.clone(),
            request.options.clone(),
            Some(inbound),
        )
        .await;
    let run_id = match submitted {
        Ok(submitted) => submitted.run_id,
        Err(EngineError::Duplicate { run_id }) => run_id,
        Err(other) => return Err(other.into()),
    };
    if !named {
        turns::remember(&state, &key, &conversation.id, &run_id).await?;
    }
    answer_from(&state, &request, run_id, Some(following), true).await
}

/// A header's value; 400 when it is not text.
fn header(headers: &HeaderMap, name: &str) -> Result<Option<String>, OpenAiError> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(|v| Some(v.trim().to_string()))
            .map_err(|_| OpenAiError::invalid(None, format!("the `{name}` header is not text"))),
    }
}

/// The run of `conversation` waiting on a person's answer or approval, if one does.
async fn waiting_run(
    state: &AppState,
    conversation: &SessionInfo,
) -> Result<Option<keel_core::RunRecord>, OpenAiError> {
    let runs = state
        .store
        .find_runs(&RunFilter {
            session_id: Some(conversation.id.clone()),
            state: Some(AgentState::WaitingOnHuman),
            limit: 1,
            ..RunFilter::default()
        })
        .await?;
    Ok(runs.into_iter().find(|run| run.reason.is_none()))
}

/// The user's message answers the run waiting in its conversation: a decision about the call
/// it waits to have approved, or the answer to its question. A reply that is neither is
/// answered with what is pending again (nothing is recorded, nothing goes on).
async fn reply_to_waiting(
    state: &AppState,
    request: &Request,
    conversation: &SessionInfo,
    run: keel_core::RunRecord,
    inbound: InboundKey,
) -> Result<Response, OpenAiError> {
    let report = state.engine.report(&run.id).await?;
    let text = request.turn.text.trim().to_string();
    let following = state.hub.follow_conversation(&conversation.id);
    if let Some(approval) = &report.approval {
        let Some(decided) = decision(&text) else {
            let again = format!("I did not understand that. {}", pending_text(&report));
            return Ok(say(request, &run.id, again));
        };
        if decided != keel_core::ApprovalDecision::Deny
            && !request.caller.may_approve_in(conversation)
        {
            return Err(ApiError::forbidden(
                "this key may not approve calls in this conversation; it may deny",
            )
            .into());
        }
        if !record(state, &inbound, &run.id).await? {
            return answer_from(state, request, run.id, None, true).await;
        }
        state
            .engine
            .approve(&run.id, &approval.call_id, decided)
            .await?;
    } else {
        let choices = &report.choices;
        if let Err(reason) = keel_core::human::resolve(&text, choices) {
            let again = format!("{reason}\n\n{}", pending_text(&report));
            return Ok(say(request, &run.id, again));
        }
        if !record(state, &inbound, &run.id).await? {
            return answer_from(state, request, run.id, None, true).await;
        }
        state.engine.answer(&run.id, text).await?;
    }
    answer_from(state, request, run.id, Some(following), false).await
}

/// Records the reply as handled by `run_id`; false when it was recorded before (the same
/// reply arrived twice at once).
async fn record(state: &AppState, inbound: &InboundKey, run_id: &str) -> Result<bool, OpenAiError> {
    Ok(state
        .store
        .record_inbound(inbound, run_id, Utc::now())
        .await?)
}

/// An answer that is no run's doing (a reply that answered nothing).
fn say(request: &Request, run_id: &str, content: String) -> Response {
    let answer = Answer {
        content,
        finish_reason: "stop",
    };
    let setup = setup(request, run_id, false);
    if request.turn.stream {
        respond_now(setup, answer, keel_core::Usage::default()).into_response()
    } else {
        let body = answer::completion(
            run_id,
            &request.turn.model,
            request.created,
            &answer,
            &keel_core::Usage::default(),
        );
        axum::Json(body).into_response()
    }
}

fn setup(request: &Request, run_id: &str, catch_up: bool) -> StreamSetup {
    StreamSetup {
        run_id: run_id.to_string(),
        model: request.turn.model.clone(),
        created: request.created,
        include_usage: request.turn.include_usage,
        progress: request.turn.progress,
        catch_up,
        preface: None,
    }
}

/// Answers from run `run_id`: streamed (following its conversation, since before it started
/// or went on when `following` is given), or whole when it ends or waits on a person.
async fn answer_from(
    state: &AppState,
    request: &Request,
    run_id: String,
    following: Option<keel_server::hub::Following>,
    catch_up: bool,
) -> Result<Response, OpenAiError> {
    if request.turn.stream {
        let following = match following {
            Some(following) => following,
            None => {
                let run = state
                    .store
                    .run(&run_id)
                    .await?
                    .ok_or_else(|| OpenAiError::internal(format!("run `{run_id}` is gone")))?;
                state.hub.follow_conversation(&run.session_id)
            }
        };
        let setup = setup(request, &run_id, catch_up);
        return Ok(respond(state.clone(), following, setup).into_response());
    }
    drop(following);
    let report = state.engine.wait(&run_id).await?;
    let mut answer = answer::of(&report);
    if request.turn.progress {
        answer.content = format!("{}{}", answer::progress_of(&report), answer.content);
    }
    let body = answer::completion(
        &report.run_id,
        &request.turn.model,
        request.created,
        &answer,
        &report.usage,
    );
    Ok(axum::Json(body).into_response())
}
