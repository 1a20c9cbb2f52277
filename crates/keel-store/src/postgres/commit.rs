//! A safe boundary's commit on PostgreSQL, in one transaction (the SQLite store's order and
//! meaning, see `crate::batch` and `crate::durability`): the lane fence
//! ([`super::lanes::fence`]), the run's messages, its conversation's outbox row when it ends
//! or waits for a person, the run upsert (which numbers the boundary's events from its
//! `event_count`), its queue row removed, its lane released when it ends, the checkpoint
//! holding the events and envelope rows (or an events row and envelope rows of their own), the
//! journal, the token log rows with their users' month totals, and the `Events` and `Freed`
//! signals, heard once the transaction is committed.

use chrono::Utc;
use keel_core::store::{Commit, CommitOutcome};
use keel_core::token_log::{TokenCharge, usage_month};
use keel_core::{AgentState, StoreError};
use keel_platform::StoreSignal;
use sqlx::PgConnection;
use sqlx::postgres::PgPool;

use super::durability::{self, notify};
use super::{lanes, messages, text};
use crate::OrBackend;
use crate::codec::{RunCounts, stored_count, timestamp, worker_column};

/// Every column of a run but `cancel_requested_at` (only `request_cancel` sets it); a
/// boundary's events (`$21`) are added to `event_count`. Answers the new count and whether the
/// run was asked to stop.
const UPSERT_RUN: &str = "INSERT INTO runs (id, session_id, state, reason, provider, model, \
     model_used, iterations, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, \
     final_text, error, started_at, updated_at, finished_at, cost, heartbeat_at, \
     resume_available, event_count, launch, worker) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, \
     $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23) \
     ON CONFLICT (id) DO UPDATE SET session_id = excluded.session_id, state = excluded.state, \
     reason = excluded.reason, provider = excluded.provider, \
     model = excluded.model, model_used = excluded.model_used, \
     iterations = excluded.iterations, input_tokens = excluded.input_tokens, \
     output_tokens = excluded.output_tokens, cache_read_tokens = excluded.cache_read_tokens, \
     cache_write_tokens = excluded.cache_write_tokens, final_text = excluded.final_text, \
     error = excluded.error, started_at = excluded.started_at, \
     updated_at = excluded.updated_at, finished_at = excluded.finished_at, \
     cost = excluded.cost, heartbeat_at = excluded.heartbeat_at, \
     resume_available = excluded.resume_available, launch = excluded.launch, \
     worker = excluded.worker, event_count = runs.event_count + excluded.event_count \
     RETURNING event_count, cancel_requested_at IS NOT NULL AS cancel_requested";

/// The outbox row of run `$2` of session `$1` entering state `$3` (marker and `created_at`
/// `$4`, due `$5`), when its conversation has a delivery route and the run was not in that
/// state already (`crate::channels::OUTBOX_IN_COMMIT`, numbered for one statement).
const OUTBOX_ROW: &str = "INSERT INTO outbox (channel, target, session_id, run_id, run_state, \
     marker, created_at, next_attempt_at) \
     SELECT d.channel, d.target, $1, $2, $3, $4, $4, $5 FROM deliveries d \
     WHERE d.session_id = $1 \
     AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = $2 AND r.state = $3) \
     ON CONFLICT DO NOTHING";

/// A run that came from its lane's queue leaves it in its first commit.
const DEQUEUE: &str = "DELETE FROM run_queue WHERE run_id = $1";

/// A token log row.
const INSERT_CHARGE: &str = "INSERT INTO token_log (session_id, run_id, user_id, model, month, \
     input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

/// Adds a token log row's usage to its user's month.
const ADD_TO_MONTH: &str = "INSERT INTO usage_log (user_id, month, input_tokens, output_tokens, \
     cache_read_tokens, cache_write_tokens) VALUES ($1, $2, $3, $4, $5, $6) \
     ON CONFLICT (user_id, month) DO UPDATE SET \
     input_tokens = usage_log.input_tokens + excluded.input_tokens, \
     output_tokens = usage_log.output_tokens + excluded.output_tokens, \
     cache_read_tokens = usage_log.cache_read_tokens + excluded.cache_read_tokens, \
     cache_write_tokens = usage_log.cache_write_tokens + excluded.cache_write_tokens";

/// Whether checkpoint `$2` of run `$1` is stored.
const CHECKPOINT_STORED: &str = "SELECT 1 FROM checkpoints WHERE run_id = $1 AND seq = $2";

/// Writes the boundary (see [`keel_core::Store::commit`]). A failure because another worker
/// stored the same checkpoint first is [`StoreError::Superseded`].
pub(super) async fn commit(
    pool: &PgPool,
    commit: &Commit<'_>,
) -> Result<CommitOutcome, StoreError> {
    match write(pool, commit).await {
        Ok(outcome) => Ok(outcome),
        Err(error @ StoreError::LaneLost { .. }) => Err(error),
        Err(error) => Err(superseded(pool, commit).await.unwrap_or(error)),
    }
}

/// The commit's transaction.
async fn write(pool: &PgPool, commit: &Commit<'_>) -> Result<CommitOutcome, StoreError> {
    let run = commit.run;
    let doing = || format!("cannot save run `{}`", run.id);
    let counts = RunCounts::of(run)?;
    let worker = run.worker.as_ref().map(ToString::to_string);
    let now = timestamp(Utc::now());
    let mut tx = pool.begin().await.or_backend(doing)?;
    lanes::fence(
        &mut tx,
        &run.session_id,
        &run.id,
        worker.as_deref(),
        !commit.messages.is_empty()
            || matches!(run.state, AgentState::Running | AgentState::WaitingForTool),
    )
    .await?;
    messages::append(
        &mut tx,
        &run.session_id,
        Some(&run.id),
        commit.messages,
        &now,
    )
    .await?;
    if run.state.is_terminal() || run.state == AgentState::WaitingOnHuman {
        let marker = timestamp(run.updated_at);
        outbox_row(
            &mut tx,
            &run.session_id,
            &run.id,
            run.state.as_str(),
            &marker,
            &now,
        )
        .await?;
    }
    let events = i64::try_from(commit.events.len()).unwrap_or(i64::MAX);
    let (event_count, cancel_requested): (i64, bool) = sqlx::query_as(UPSERT_RUN)
        .bind(&run.id)
        .bind(&run.session_id)
        .bind(run.state.as_str())
        .bind(run.reason.map(|reason| reason.as_str()))
        .bind(&run.provider)
        .bind(&run.model)
        .bind(run.model_used.as_deref())
        .bind(counts.iterations)
        .bind(counts.input_tokens)
        .bind(counts.output_tokens)
        .bind(counts.cache_read_tokens)
        .bind(counts.cache_write_tokens)
        .bind(run.final_text.as_deref().map(text::to_column))
        .bind(run.error.as_deref().map(text::to_column))
        .bind(timestamp(run.started_at))
        .bind(timestamp(run.updated_at))
        .bind(run.finished_at.map(timestamp))
        .bind(run.cost)
        .bind(run.heartbeat_at.map(timestamp))
        .bind(run.resume_available)
        .bind(events)
        .bind(run.launch.as_deref())
        .bind(worker_column(run)?)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| executing_conflict(e, commit))?;
    sqlx::query(DEQUEUE)
        .bind(&run.id)
        .execute(&mut *tx)
        .await
        .or_backend(doing)?;
    // A run its worker lost that can resume keeps its lane for that resume (any worker's
    // reconciler offers it): the conversation's next run must not overtake it. The lane lets go
    // by itself `stale_after` later if nobody resumes it (see lanes.rs).
    let awaits_resume = run.state == AgentState::TimedOut && run.resume_available;
    if run.state.is_terminal() && !awaits_resume {
        lanes::release_in(&mut tx, &run.session_id, &run.id).await?;
    }
    let first_event = event_count - events + 1;
    // The checkpoint's row holds the envelope rows when they are all of the commit's run.
    let held = commit.checkpoint.is_some()
        && commit
            .tool_calls
            .iter()
            .all(|call| call.run_id == commit.run.id);
    let (held_calls, table_calls) = if held {
        (commit.tool_calls, &[][..])
    } else {
        (&[][..], commit.tool_calls)
    };
    if let Some(checkpoint) = commit.checkpoint {
        durability::insert_checkpoint(
            &mut tx,
            &run.id,
            checkpoint,
            commit.events,
            first_event,
            held_calls,
        )
        .await?;
    } else if !commit.events.is_empty() {
        durability::insert_events(&mut tx, &run.id, commit.events, first_event).await?;
    }
    durability::upsert_tool_calls(&mut tx, table_calls).await?;
    if let Some(journal) = commit.journal {
        durability::upsert_journal(&mut tx, &run.session_id, journal, &now).await?;
    }
    add_charges(&mut tx, &run.session_id, &run.id, commit.charges).await?;
    if !commit.events.is_empty() {
        notify(&mut tx, StoreSignal::Events(run.id.clone())).await?;
    }
    tx.commit().await.or_backend(doing)?;
    Ok(CommitOutcome { cancel_requested })
}

/// The outbox row of `run_id` entering `state` (see [`OUTBOX_ROW`]), for the commit and for a
/// claim that times a lapsed run out.
pub(super) async fn outbox_row(
    tx: &mut PgConnection,
    session_id: &str,
    run_id: &str,
    state: &str,
    marker: &str,
    now: &str,
) -> Result<(), StoreError> {
    sqlx::query(OUTBOX_ROW)
        .bind(session_id)
        .bind(run_id)
        .bind(state)
        .bind(marker)
        .bind(now)
        .execute(tx)
        .await
        .map(drop)
        .or_backend(|| format!("cannot tell the channel of run `{run_id}`"))
}

/// The token log rows of the commit's model calls, each added to its user's month.
async fn add_charges(
    tx: &mut PgConnection,
    session_id: &str,
    run_id: &str,
    charges: &[TokenCharge],
) -> Result<(), StoreError> {
    let doing = || format!("cannot log the tokens of run `{run_id}`");
    for charge in charges {
        let month = usage_month(charge.at);
        let usage = &charge.usage;
        let counts = [
            stored_count(usage.input_tokens, "input_tokens")?,
            stored_count(usage.output_tokens, "output_tokens")?,
            stored_count(usage.cache_read_tokens, "cache_read_tokens")?,
            stored_count(usage.cache_write_tokens, "cache_write_tokens")?,
        ];
        sqlx::query(INSERT_CHARGE)
            .bind(session_id)
            .bind(run_id)
            .bind(charge.user_id.as_deref())
            .bind(&charge.model)
            .bind(&month)
            .bind(counts[0])
            .bind(counts[1])
            .bind(counts[2])
            .bind(counts[3])
            .bind(charge.cost)
            .bind(timestamp(charge.at))
            .execute(&mut *tx)
            .await
            .or_backend(doing)?;
        if let Some(user) = &charge.user_id {
            sqlx::query(ADD_TO_MONTH)
                .bind(user)
                .bind(&month)
                .bind(counts[0])
                .bind(counts[1])
                .bind(counts[2])
                .bind(counts[3])
                .execute(&mut *tx)
                .await
                .or_backend(doing)?;
        }
    }
    Ok(())
}

/// The error of a run upsert that `runs_one_executing_per_session` refused: another run of the
/// conversation executes, so this one may not ([`StoreError::Conflict`]); the backend error
/// otherwise.
fn executing_conflict(error: sqlx::Error, commit: &Commit<'_>) -> StoreError {
    let run = commit.run;
    match error.as_database_error().and_then(|e| e.constraint()) {
        Some("runs_one_executing_per_session") => StoreError::Conflict(format!(
            "run `{}` cannot be {}: another run of session `{}` is executing",
            run.id,
            run.state.as_str(),
            run.session_id
        )),
        _ => StoreError::Backend(format!("cannot save run `{}`: {error}", run.id)),
    }
}

/// [`StoreError::Superseded`] when the commit's checkpoint is stored already: another worker
/// wrote that boundary of the run.
async fn superseded(pool: &PgPool, commit: &Commit<'_>) -> Option<StoreError> {
    let checkpoint = commit.checkpoint?;
    let stored: Option<i32> = sqlx::query_scalar(CHECKPOINT_STORED)
        .bind(&commit.run.id)
        .bind(i64::from(checkpoint.seq))
        .fetch_optional(pool)
        .await
        .ok()?;
    stored.map(|_| StoreError::Superseded {
        run_id: commit.run.id.clone(),
        seq: checkpoint.seq,
    })
}
