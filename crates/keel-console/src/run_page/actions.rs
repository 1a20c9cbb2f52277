//! What the run page's forms do: stop, decide about a pending call, answer a question,
//! resume. Each is a POST the console's CSRF check has already let through
//! ([`crate::csrf`]); each checks the viewer's key as the API's handler for the same action
//! does ([`keel_server::Caller::run`], and [`keel_server::Caller::run_to_decide`] for an
//! approval), calls the engine the same way, then sends the browser back to the run's page
//! (POST-redirect-GET). A refusal is an error page with the engine's or the API's words.

use axum::Form;
use axum::extract::{Path, State};
use axum::response::Redirect;
use keel_core::{ApprovalDecision, ResumeOptions, RunRecord, UnsafeCall};
use keel_server::ApiError;
use serde::Deserialize;
use std::time::Duration;
use tokio::time::Instant;

use crate::{ConsoleError, ConsoleState, Viewer};

/// The longest an action waits for the run it continued to show it moved.
const SETTLE: Duration = Duration::from_secs(3);

/// Back to the run's page, as a GET.
fn back(id: &str) -> Redirect {
    Redirect::to(&format!("/runs/{id}"))
}

/// Waits (at most [`SETTLE`]) until the run `before` was, just continued by an answer, an
/// approval or a resume, shows that it moved: the store has it changed, or the hub has events
/// of it newer than the store's. The page the browser is sent back to then follows it, rather
/// than offering again the decision just made.
async fn settle(state: &ConsoleState, before: &RunRecord) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let store = state.app.store.as_ref();
        let Ok(Some(run)) = store.run(&before.id).await else {
            return;
        };
        if run.state != before.state || run.updated_at != before.updated_at {
            return;
        }
        let stored = store
            .events_after(&run.id, 0)
            .await
            .map_or(0, |events| events.last().map_or(0, |(seq, _)| *seq));
        if super::data::moving(&state.app, &run, stored) || Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `POST /runs/{id}/stop`: cancels the run (a queued one at once, a running one at its next
/// safe point), as `POST /v1/runs/{id}/cancel`.
pub async fn stop(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Redirect, ConsoleError> {
    viewer.caller.run(&state.app, &id).await?;
    state.app.engine.cancel(&id).await.map_err(ApiError::from)?;
    Ok(back(&id))
}

/// The approval form's fields (besides `csrf`).
#[derive(Debug, Deserialize)]
pub struct ApprovalForm {
    /// `approve_once`, `approve_session` or `deny`.
    pub decision: String,
    /// The call decided about: the one the page showed.
    pub call_id: String,
}

/// `POST /runs/{id}/approval`: decides about the call the run waits on, as
/// `POST /v1/runs/{id}/approval` (only a viewer who may approve in the conversation lets a
/// call go ahead; anyone who sees it may deny).
pub async fn approve(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<ApprovalForm>,
) -> Result<Redirect, ConsoleError> {
    let (run, _) = viewer
        .caller
        .run_to_decide(&state.app, &id, &form.decision)
        .await?;
    let decision = ApprovalDecision::parse(&form.decision).ok_or_else(|| {
        ConsoleError::invalid(format!(
            "The decision must be approve once, approve for the session or deny, not `{}`.",
            form.decision
        ))
    })?;
    let call_id = form.call_id.trim();
    if call_id.is_empty() {
        return Err(ConsoleError::invalid("The form names no tool call."));
    }
    state
        .app
        .engine
        .approve(&id, call_id, decision)
        .await
        .map_err(ApiError::from)?;
    settle(&state, &run).await;
    Ok(back(&id))
}

/// The answer form's field (besides `csrf`).
#[derive(Debug, Deserialize)]
pub struct AnswerForm {
    /// The answer: free text, or the choice whose button was pressed.
    pub answer: String,
}

/// `POST /runs/{id}/answer`: answers the question the run waits on, as
/// `POST /v1/runs/{id}/answer`.
pub async fn answer(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<AnswerForm>,
) -> Result<Redirect, ConsoleError> {
    let (run, _) = viewer.caller.run(&state.app, &id).await?;
    if form.answer.trim().is_empty() {
        return Err(ConsoleError::invalid("The answer is empty."));
    }
    state
        .app
        .engine
        .answer(&id, form.answer)
        .await
        .map_err(ApiError::from)?;
    settle(&state, &run).await;
    Ok(back(&id))
}

/// The resume form's fields (besides `csrf`).
#[derive(Debug, Default, Deserialize)]
pub struct ResumeForm {
    /// For a run halted before a side-effecting call: `retry` or `skip` it.
    pub unsafe_call: Option<String>,
    /// `true` to go on under a system prompt that changed since the run started.
    pub accept_prompt_change: Option<String>,
}

/// `POST /runs/{id}/resume`: resumes a run halted for a decision or left by a dead worker, as
/// `POST /v1/runs/{id}/resume`.
pub async fn resume(
    State(state): State<ConsoleState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<ResumeForm>,
) -> Result<Redirect, ConsoleError> {
    let (run, _) = viewer.caller.run(&state.app, &id).await?;
    let unsafe_call = match form.unsafe_call.as_deref() {
        None | Some("") => None,
        Some("retry") => Some(UnsafeCall::Retry),
        Some("skip") => Some(UnsafeCall::Skip),
        Some(other) => {
            return Err(ConsoleError::invalid(format!(
                "The unsafe call is retried or skipped, not `{other}`."
            )));
        }
    };
    let options = ResumeOptions {
        accept_prompt_change: form.accept_prompt_change.as_deref() == Some("true"),
        unsafe_call,
        ..ResumeOptions::default()
    };
    state
        .app
        .engine
        .resume(&id, options)
        .await
        .map_err(ApiError::from)?;
    settle(&state, &run).await;
    Ok(back(&id))
}
