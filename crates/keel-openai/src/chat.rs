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
use keel_core::{AgentState, RunOptions, SessionInfo, Usage};
use keel_platform::{InboundKey, MAX_TEXT_BYTES, RunFilter};
use keel_server::engine::EngineError;
use keel_server::{ApiError, AppState, Caller};
use serde_json::Value;

use crate::answer::{self, Answer};
use crate::errors::OpenAiError;
use crate::pending::{decision, pending_text};
use crate::stream::{Chunks, Shape, StreamSetup, respond, respond_now};
use crate::turns::{self, Redelivery};
use crate::wire::{self, Turn};
use crate::{OpenAiCaller, OpenAiOptions};

/// The header naming the conversation.
pub const CONVERSATION_HEADER: &str = "x-keel-conversation";

/// The header asking for progress lines.
pub const PROGRESS_HEADER: &str = "x-keel-progress";

/// A turn on its way to an answer.
pub(crate) struct Request {
    /// What the client asks.
    pub turn: Turn,
    /// Who asks.
    pub caller: Caller,
    /// The run's options, from the model named.
    pub options: RunOptions,
    /// When the answer was made (Unix seconds).
    pub created: i64,
    /// The conversation an earlier answer named by the client is in (the Responses API's
    /// `previous_response_id`), and that answer's run.
    pub continues: Option<(SessionInfo, String)>,
}

/// How a route writes its answers: whole, and the shape of its streams.
pub(crate) trait Render: Send + Sync + 'static {
    /// The stream's shape.
    type Shape: Shape;
    /// The whole answer of run `run_id`.
    fn whole(&self, request: &Request, run_id: &str, answer: &Answer, usage: &Usage) -> Value;
    /// The shape of the stream `setup` describes.
    fn shape(&self, request: &Request, setup: &StreamSetup) -> Self::Shape;
}

/// The chat-completions answers: `chat.completion` and its chunks.
struct Completions;

impl Render for Completions {
    type Shape = Chunks;

    fn whole(&self, request: &Request, run_id: &str, answer: &Answer, usage: &Usage) -> Value {
        answer::completion(run_id, &request.turn.model, request.created, answer, usage)
    }

    fn shape(&self, _request: &Request, setup: &StreamSetup) -> Chunks {
        Chunks::new(setup)
    }
}

/// `POST /v1/chat/completions`.
pub async fn completions(
    State(state): State<AppState>,
    axum::Extension(settings): axum::Extension<OpenAiOptions>,
    OpenAiCaller(caller): OpenAiCaller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, OpenAiError> {
    let turn = |bytes: &[u8]| wire::parse(bytes, MAX_TEXT_BYTES);
    let request = checked(&state, caller, &headers, body, turn).await?;
    take(state, settings, request, Completions).await
}

/// The request checked, in order: the caller (a channel's key is refused), the body's size
/// (413), the body (400, `parse` reads it), the headers, the conversation name, the model
/// (404), whether keel takes runs (503). Nothing is stored.
pub(crate) async fn checked(
    state: &AppState,
    caller: Caller,
    headers: &HeaderMap,
    body: Body,
    parse: impl FnOnce(&[u8]) -> Result<Turn, OpenAiError>,
) -> Result<Request, OpenAiError> {
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
    let mut turn = parse(&bytes)?;
    if let Some(name) = header(headers, CONVERSATION_HEADER)? {
        turn.conversation = Some(name);
    }
    if let Some(progress) = header(headers, PROGRESS_HEADER)? {
        turn.progress = progress.eq_ignore_ascii_case("true");
    }
    if let Some(name) = &turn.conversation {
        wire::check_name(name)?;
    }
    let options = crate::models::options_for(state, &turn.model).await?;
    if !state.engine.accepting() {
        return Err(EngineError::ShuttingDown.into());
    }
    Ok(Request {
        turn,
        caller,
        options,
        created: Utc::now().timestamp(),
        continues: None,
    })
}

/// Takes a checked turn to its answer, written by `render`.
pub(crate) async fn take<R: Render>(
    state: AppState,
    settings: OpenAiOptions,
    request: Request,
    render: R,
) -> Result<Response, OpenAiError> {
    // On a task of its own: once anything of the turn is stored, the rest of its bookkeeping
    // (the run queued and its turn key kept, a reply recorded and applied) is done whether or
    // not the client still waits.
    tokio::spawn(async move {
        let outcome = handle(&state, &settings, &request).await?;
        deliver(&state, &request, outcome, &render).await
    })
    .await
    .map_err(|error| OpenAiError::internal(format!("answering the turn failed: {error}")))?
}

/// What a turn comes to.
enum Outcome {
    /// An answer that is no run's doing (a reply that answered nothing), about run `run_id`.
    Said { run_id: String, content: String },
    /// The answer of run `run_id`: streamed following its conversation (since before it
    /// started or went on, when `following` is given), from its events kept so far when
    /// `catch_up`.
    Run {
        run_id: String,
        following: Option<keel_server::hub::Following>,
        catch_up: bool,
    },
}

impl Outcome {
    fn run(run_id: String, following: Option<keel_server::hub::Following>, catch_up: bool) -> Self {
        Outcome::Run {
            run_id,
            following,
            catch_up,
        }
    }
}

/// The turn, checked, to what it comes to: its conversation found (continued, named, by
/// history, or new), a redelivery answered from its run, a waiting run answered, else a new
/// run.
async fn handle(
    state: &AppState,
    settings: &OpenAiOptions,
    request: &Request,
) -> Result<Outcome, OpenAiError> {
    let identity = turns::identity(&request.caller);
    // `scope`: what the turn's inbound key is hashed with, for a turn in a conversation the
    // client names (its id) or continues from an earlier answer (that answer's run); such
    // turns are not remembered by history.
    let (found, scope) = match (&request.continues, &request.turn.conversation) {
        (Some((conversation, previous)), _) => (
            Some(conversation.clone()),
            Some(format!("previous:{previous}")),
        ),
        (None, Some(name)) => {
            let conversation = turns::named(state, &request.caller, name).await?;
            let id = conversation.id.clone();
            (Some(conversation), Some(id))
        }
        (None, None) => (
            turns::by_history(state, &request.caller, &request.turn).await?,
            None,
        ),
    };
    let key = turns::turn_key(&identity, &request.turn.model, &request.turn.history);
    let inbound = match turns::redelivery(
        state,
        &key,
        scope.as_deref(),
        settings.redelivery_window,
        Utc::now(),
    )
    .await?
    {
        Redelivery::Of(run_id) => return Ok(Outcome::run(run_id, None, true)),
        Redelivery::New(inbound) => inbound,
    };
    let conversation = match found {
        Some(conversation) => conversation,
        None => turns::new_conversation(state, &request.caller).await?,
    };
    if let Some(waiting) = waiting_run(state, &conversation).await? {
        if scope.is_none() {
            // The turn after this one continues here, whatever this reply does.
            turns::remember(state, &key, &conversation.id, &waiting.id).await?;
        }
        return reply_to_waiting(state, request, &conversation, waiting, inbound).await;
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
    if scope.is_none() {
        turns::remember(state, &key, &conversation.id, &run_id).await?;
    }
    Ok(Outcome::run(run_id, Some(following), true))
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
) -> Result<Outcome, OpenAiError> {
    let report = state.engine.report(&run.id).await?;
    let text = request.turn.text.trim().to_string();
    let following = state.hub.follow_conversation(&conversation.id);
    if let Some(approval) = &report.approval {
        let Some(decided) = decision(&text) else {
            let again = format!("I did not understand that. {}", pending_text(&report));
            return Ok(Outcome::Said {
                run_id: run.id,
                content: again,
            });
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
            return Ok(Outcome::run(run.id, None, true));
        }
        state
            .engine
            .approve(&run.id, &approval.call_id, decided)
            .await?;
    } else {
        let choices = &report.choices;
        if let Err(reason) = keel_core::human::resolve(&text, choices) {
            let again = format!("{reason}\n\n{}", pending_text(&report));
            return Ok(Outcome::Said {
                run_id: run.id,
                content: again,
            });
        }
        if !record(state, &inbound, &run.id).await? {
            return Ok(Outcome::run(run.id, None, true));
        }
        state.engine.answer(&run.id, text).await?;
    }
    Ok(Outcome::run(run.id, Some(following), false))
}

/// Records the reply as handled by `run_id`; false when it was recorded before (the same
/// reply arrived twice at once).
async fn record(state: &AppState, inbound: &InboundKey, run_id: &str) -> Result<bool, OpenAiError> {
    Ok(state
        .store
        .record_inbound(inbound, run_id, Utc::now())
        .await?)
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

/// The answer `outcome` is, written by `render`: whole (when the run ends or waits on a
/// person) or streamed.
async fn deliver<R: Render>(
    state: &AppState,
    request: &Request,
    outcome: Outcome,
    render: &R,
) -> Result<Response, OpenAiError> {
    let (run_id, following, catch_up) = match outcome {
        Outcome::Said { run_id, content } => {
            let answer = Answer {
                content,
                finish_reason: "stop",
            };
            let usage = Usage::default();
            if request.turn.stream {
                let shape = render.shape(request, &setup(request, &run_id, false));
                return Ok(respond_now(shape, answer, usage).into_response());
            }
            let body = render.whole(request, &run_id, &answer, &usage);
            return Ok(axum::Json(body).into_response());
        }
        Outcome::Run {
            run_id,
            following,
            catch_up,
        } => (run_id, following, catch_up),
    };
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
        let shape = render.shape(request, &setup);
        return Ok(respond(state.clone(), following, setup, shape).into_response());
    }
    drop(following);
    let report = state.engine.wait(&run_id).await?;
    let mut answer = answer::of(&report);
    if request.turn.progress {
        answer.content = format!("{}{}", answer::progress_of(&report), answer.content);
    }
    let body = render.whole(request, &report.run_id, &answer, &report.usage);
    Ok(axum::Json(body).into_response())
}
