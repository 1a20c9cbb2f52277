//! The operators' schedules (`/v1/schedules`): list them, add one to a conversation, show one
//! with its recent slots (fired, missed, refused, failed), pause, resume and delete it. Who may:
//! anyone who sees the conversation reads its schedules; its owner or an admin changes them.
//! The model schedules through its own tool (keel-schedules); what it made, an operator may
//! still pause or delete: the operator's word wins.

pub mod plan;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use keel_core::SessionInfo;
use keel_platform::schedule::{Creator, Schedule, ScheduleFilter, SlotEntry};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;
use crate::views::page_size;
use plan::{Change, ScheduleRequest, describe, plan_schedule, state_change};

/// Slots `GET /v1/schedules/{id}` shows, newest first.
pub const SHOWN_SLOTS: usize = 50;

/// The routes of this part.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_schedules, add_schedule))
        .routes(routes!(get_schedule, delete_schedule))
        .routes(routes!(pause_schedule))
        .routes(routes!(resume_schedule))
}

/// A schedule.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ScheduleView {
    /// Its id.
    pub id: String,
    /// The conversation it fires into.
    pub conversation_id: String,
    /// The user its runs are for.
    pub owner: Option<String>,
    /// `model` (the schedule tool) or `operator`.
    pub created_by: String,
    /// `once`, `every` or `cron`.
    pub kind: String,
    /// An RFC 3339 instant, an interval in seconds, or a cron expression.
    pub spec: String,
    /// The IANA time zone of a cron expression.
    pub tz: Option<String>,
    /// Its "when", for people (`every 15m`).
    pub when: String,
    /// The message each fire sends.
    pub text: String,
    /// `skip`, `once` or `all`: what it does with slots missed while no daemon ran.
    pub catch_up: String,
    /// Runs at most of one catch-up under `all`.
    pub catch_up_cap: u32,
    /// `active`, `paused` or `done`.
    pub state: String,
    /// Why it is paused.
    pub paused_reason: Option<String>,
    /// When it fires next.
    pub next_slot: Option<DateTime<Utc>>,
    /// Fires in a row that ended badly.
    pub failures: u32,
    /// Failures in a row that pause it.
    pub max_failures: u32,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// Its recent slots, newest first (`GET /v1/schedules/{id}` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<Vec<SlotView>>,
}

impl From<Schedule> for ScheduleView {
    fn from(s: Schedule) -> Self {
        ScheduleView {
            when: describe(&s),
            created_by: s.created_by.as_str().into(),
            kind: s.kind.as_str().into(),
            catch_up: s.catch_up.as_str().into(),
            state: s.state.as_str().into(),
            id: s.id,
            conversation_id: s.session_id,
            owner: s.owner,
            spec: s.spec,
            tz: s.tz,
            text: s.text,
            catch_up_cap: s.catch_up_cap,
            paused_reason: s.paused_reason,
            next_slot: s.next_slot,
            failures: s.failures,
            max_failures: s.max_failures,
            created_at: s.created_at,
            updated_at: s.updated_at,
            slots: None,
        }
    }
}

/// One slot of a schedule: what became of it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SlotView {
    /// The instant it was due at.
    pub slot: DateTime<Utc>,
    /// `fired`, `missed`, `refused` or `failed`.
    pub outcome: String,
    /// The run it became.
    pub run_id: Option<String>,
    /// That run's state now.
    pub run_state: Option<String>,
    /// Why it was refused or failed.
    pub reason: Option<String>,
    /// When this was recorded.
    pub at: DateTime<Utc>,
}

impl From<SlotEntry> for SlotView {
    fn from(entry: SlotEntry) -> Self {
        SlotView {
            slot: entry.record.slot,
            outcome: entry.record.outcome.as_str().into(),
            run_id: entry.record.run_id,
            run_state: entry.run_state.map(|state| state.as_str().into()),
            reason: entry.record.reason,
            at: entry.record.at,
        }
    }
}

/// What `GET /v1/schedules` answers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ScheduleList {
    /// The schedules, newest first.
    pub items: Vec<ScheduleView>,
}

/// `?conversation=&limit=`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleQuery {
    /// Only this conversation's schedules.
    pub conversation: Option<String>,
    /// At most this many (1–200, default 50).
    pub limit: Option<usize>,
}

/// `POST /v1/schedules`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewScheduleBody {
    /// The conversation it fires into (its owner's runs, trust, persona and budget).
    pub conversation_id: String,
    /// `once`, `every` or `cron`.
    pub kind: String,
    /// `once`: an RFC 3339 instant; `every`: an interval (`90s`, `15m`, `2h`, `1d`, at least
    /// 60 s); `cron`: a 5-field expression (`0 9 * * 1-5`).
    pub spec: String,
    /// The IANA time zone a cron expression is read in (default UTC).
    pub tz: Option<String>,
    /// The message each fire sends; `{time}` and `{date}` become the slot's, in `tz`.
    pub text: String,
    /// `skip`, `once` (default) or `all`: slots missed while no daemon ran are recorded missed,
    /// run once together, or run each.
    pub catch_up: Option<String>,
    /// Runs at most of one catch-up under `all` (1–100, default 10).
    pub catch_up_cap: Option<u32>,
    /// Failed fires in a row after which it pauses itself (default 3).
    pub max_failures: Option<u32>,
}

impl Caller {
    /// Whether the caller may change `conversation`'s schedules: an admin or its owner.
    pub fn may_schedule_in(&self, conversation: &SessionInfo) -> bool {
        self.admin || (self.user_id.is_some() && conversation.owner == self.user_id)
    }

    /// The schedule `id` and its conversation, when the caller sees that conversation; 404
    /// otherwise. With `change`, 403 when the caller may not change its schedules.
    async fn schedule(
        &self,
        state: &AppState,
        id: &str,
        change: bool,
    ) -> Result<(Schedule, SessionInfo), ApiError> {
        let missing = || ApiError::not_found(format!("schedule `{id}`"));
        let schedule = state.store.schedule(id).await?.ok_or_else(missing)?;
        let conversation = match state.store.session(&schedule.session_id).await? {
            Some(conversation) if self.sees(&conversation) => conversation,
            _ => return Err(missing()),
        };
        if change && !self.may_schedule_in(&conversation) {
            return Err(forbidden(&conversation));
        }
        Ok((schedule, conversation))
    }
}

fn forbidden(conversation: &SessionInfo) -> ApiError {
    ApiError::forbidden(format!(
        "the schedules of conversation `{}` are changed by its owner or an admin",
        conversation.id
    ))
}

/// The schedules of the caller's conversations (an admin's: all; with `conversation`, that
/// conversation's), newest first.
#[utoipa::path(get, path = "/v1/schedules",
    params(("conversation" = Option<String>, Query, description = "Only this conversation's"),
           ("limit" = Option<usize>, Query, description = "1–200, default 50")),
    responses((status = 200, body = ScheduleList), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn list_schedules(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ScheduleQuery>,
) -> Result<axum::Json<ScheduleList>, ApiError> {
    let limit = page_size(query.limit)?;
    let filter = match query.conversation {
        Some(id) => ScheduleFilter {
            session_id: Some(caller.conversation(&state, &id).await?.id),
            owner: None,
            limit,
        },
        None => ScheduleFilter {
            session_id: None,
            owner: caller.owner_filter(),
            limit,
        },
    };
    let items = state.store.list_schedules(&filter).await?;
    Ok(axum::Json(ScheduleList {
        items: items.into_iter().map(ScheduleView::from).collect(),
    }))
}

/// Adds a schedule to a conversation: from its first slot on, each fire sends `text` into it
/// as a run of its owner.
#[utoipa::path(post, path = "/v1/schedules", request_body = NewScheduleBody,
    responses((status = 201, body = ScheduleView),
              (status = 400, description = "A spec, zone, text or policy that cannot be used (the message says why)", body = ErrorBody),
              (status = 401, body = ErrorBody),
              (status = 403, description = "The caller sees the conversation but is neither its owner nor an admin", body = ErrorBody),
              (status = 404, body = ErrorBody)))]
async fn add_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<NewScheduleBody>,
) -> Result<Response, ApiError> {
    let conversation = caller.conversation(&state, &body.conversation_id).await?;
    if !caller.may_schedule_in(&conversation) {
        return Err(forbidden(&conversation));
    }
    let request = ScheduleRequest {
        kind: body.kind,
        spec: body.spec,
        tz: body.tz,
        text: body.text,
        catch_up: body.catch_up,
        catch_up_cap: body.catch_up_cap,
        max_failures: body.max_failures,
    };
    let schedule = plan_schedule(&conversation, &request, Creator::Operator, Utc::now())
        .map_err(ApiError::invalid)?;
    state.store.create_schedule(&schedule).await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(ScheduleView::from(schedule)),
    )
        .into_response())
}

/// A schedule with its recent slots (fired with their runs' states, missed, refused, failed
/// with their reasons), newest first.
#[utoipa::path(get, path = "/v1/schedules/{id}", params(("id" = String, Path, description = "The schedule")),
    responses((status = 200, body = ScheduleView), (status = 404, body = ErrorBody)))]
async fn get_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<axum::Json<ScheduleView>, ApiError> {
    let (schedule, _) = caller.schedule(&state, &id, false).await?;
    let slots = state.store.slots(&id, SHOWN_SLOTS).await?;
    let mut view = ScheduleView::from(schedule);
    view.slots = Some(slots.into_iter().map(SlotView::from).collect());
    Ok(axum::Json(view))
}

/// Pauses a schedule: it does not fire until resumed.
#[utoipa::path(post, path = "/v1/schedules/{id}/pause", params(("id" = String, Path, description = "The schedule")),
    responses((status = 200, body = ScheduleView), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody),
              (status = 409, description = "It is done: it has no slot left", body = ErrorBody)))]
async fn pause_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<axum::Json<ScheduleView>, ApiError> {
    let by = caller.user_id.clone().unwrap_or_else(|| "an admin".into());
    change_state(&state, &caller, &id, Change::Pause { by: &by }).await
}

/// Resumes a paused schedule from now: its next slot is the first after now (a `once` whose
/// instant passed while it was paused keeps it, and its catch-up policy decides).
#[utoipa::path(post, path = "/v1/schedules/{id}/resume", params(("id" = String, Path, description = "The schedule")),
    responses((status = 200, body = ScheduleView), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody),
              (status = 409, description = "It is done: it has no slot left", body = ErrorBody)))]
async fn resume_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<axum::Json<ScheduleView>, ApiError> {
    change_state(&state, &caller, &id, Change::Resume).await
}

/// Applies an operator's change to a schedule's state and answers with the schedule.
async fn change_state(
    state: &AppState,
    caller: &Caller,
    id: &str,
    change: Change<'_>,
) -> Result<axum::Json<ScheduleView>, ApiError> {
    let (schedule, _) = caller.schedule(state, id, true).await?;
    let now = Utc::now();
    let to = state_change(&schedule, change, now).map_err(ApiError::conflict)?;
    let store = &state.store;
    let missing = || ApiError::not_found(format!("schedule `{id}`"));
    let reason = to.reason.as_deref();
    if !store
        .set_schedule_state(id, to.state, reason, to.next_slot, now)
        .await?
    {
        return Err(missing());
    }
    let schedule = store.schedule(id).await?.ok_or_else(missing)?;
    Ok(axum::Json(schedule.into()))
}

/// Deletes a schedule and its slots' records (runs it fired stay).
#[utoipa::path(delete, path = "/v1/schedules/{id}", params(("id" = String, Path, description = "The schedule")),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn delete_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    caller.schedule(&state, &id, true).await?;
    if !state.store.delete_schedule(&id).await? {
        return Err(ApiError::not_found(format!("schedule `{id}`")));
    }
    Ok(StatusCode::NO_CONTENT)
}
