//! What a run needs to survive its worker, on PostgreSQL: the boundary's checkpoint (holding its
//! events and envelope rows, as on SQLite: see `crate::durability`), events rows, envelope rows,
//! the journal, written inside a commit's transaction; their reads; heartbeats and cancel
//! requests (the latter tell every worker at once).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use keel_core::{Checkpoint, Event, Journal, StoreError, ToolCallRecord};
use keel_platform::StoreSignal;
use sqlx::PgConnection;
use sqlx::postgres::PgPool;

use super::text;
use crate::OrBackend;
use crate::codec::{self, stored_count, timestamp, to_json};
use crate::durability::{
    HEARTBEAT, REQUEST_CANCEL, SELECT_CHECKPOINTS, SELECT_EVENTS, SELECT_HELD_TOOL_CALLS,
    SELECT_JOURNAL, SELECT_LATEST_CHECKPOINT, SELECT_TOOL_CALLS, keep_latest, select_event_rows,
};

/// A checkpoint of run `$1`, with the events (`$12`… : first number, count, names, payload)
/// and envelope rows (`$16`) it holds, if any.
const INSERT_CHECKPOINT: &str = "INSERT INTO checkpoints (run_id, seq, boundary, iteration, \
     message_cursor, persisted, prompt_hash, completed_calls, state, frame, created_at, \
     first_event, events, event_names, event_payload, tool_calls) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)";

/// A commit's events without a checkpoint, as one row.
const INSERT_EVENTS: &str = "INSERT INTO run_events (run_id, seq, events, name, payload, ts) \
     VALUES ($1, $2, $3, $4, $5, $6)";

/// One envelope row, replacing an earlier one of the same call.
const UPSERT_TOOL_CALL: &str = "INSERT INTO tool_calls (run_id, call_id, name, arguments, \
     idempotent, started_at, completed_at, ok, output) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
     ON CONFLICT (run_id, call_id) DO UPDATE SET \
     name = excluded.name, arguments = excluded.arguments, idempotent = excluded.idempotent, \
     started_at = excluded.started_at, completed_at = excluded.completed_at, ok = excluded.ok, \
     output = excluded.output";

const UPSERT_JOURNAL: &str = "INSERT INTO journals (session_id, journal, updated_at) \
     VALUES ($1, $2, $3) ON CONFLICT (session_id) DO UPDATE SET \
     journal = excluded.journal, updated_at = excluded.updated_at";

/// The rows holding events of `$1` above `$2` (see `crate::pages`), with PostgreSQL's
/// `COALESCE` for SQLite's `IFNULL`.
const EVENTS_AFTER: &str = select_event_rows!(
    " AND seq >= COALESCE((SELECT max(seq) FROM run_events WHERE run_id = $1 AND seq <= $2), 0)",
    " AND (first_event IS NULL OR first_event + events > $2)"
);

/// Sends `signal` to every worker when the transaction on `conn` commits.
pub(super) async fn notify(conn: &mut PgConnection, signal: StoreSignal) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_notify('keel_signals', $1)")
        .bind(signal.payload())
        .execute(conn)
        .await
        .map(drop)
        .or_backend(|| format!("cannot signal {}", signal.payload()))
}

/// The values of `events` (not empty) as a row holds them: how many, their names, their JSON
/// one per line.
fn event_values(events: &[Event]) -> Result<(i64, String, String), StoreError> {
    let names = events
        .iter()
        .map(|event| event.kind.name())
        .collect::<Vec<_>>()
        .join(" ");
    let payload = codec::json_lines(events, "an event")?;
    Ok((
        stored_count(events.len() as u64, "the number of events")?,
        names,
        payload,
    ))
}

/// Inserts `checkpoint` of `run_id`, holding `events` numbered from `first_event` and the
/// envelope rows `calls`.
pub(super) async fn insert_checkpoint(
    tx: &mut PgConnection,
    run_id: &str,
    checkpoint: &Checkpoint,
    events: &[Event],
    first_event: i64,
    calls: &[ToolCallRecord],
) -> Result<(), StoreError> {
    let (count, names, payload) = if events.is_empty() {
        (0, None, None)
    } else {
        let (count, names, payload) = event_values(events)?;
        (count, Some(names), Some(payload))
    };
    let calls = if calls.is_empty() {
        None
    } else {
        Some(to_json(calls, "the tool-call envelope")?)
    };
    sqlx::query(INSERT_CHECKPOINT)
        .bind(run_id)
        .bind(i64::from(checkpoint.seq))
        .bind(checkpoint.boundary.as_str())
        .bind(i64::from(checkpoint.iteration))
        .bind(stored_count(checkpoint.message_cursor, "message_cursor")?)
        .bind(stored_count(checkpoint.persisted, "persisted")?)
        .bind(checkpoint.prompt_hash.as_str())
        .bind(to_json(&checkpoint.completed_calls, "completed calls")?)
        .bind(checkpoint.state.as_str())
        .bind(checkpoint.frame.as_deref())
        .bind(timestamp(checkpoint.created_at))
        .bind((count > 0).then_some(first_event))
        .bind(count)
        .bind(names)
        .bind(payload)
        .bind(calls)
        .execute(tx)
        .await
        .map(drop)
        .or_backend(|| {
            format!(
                "cannot save checkpoint {} of run `{run_id}`",
                checkpoint.seq
            )
        })
}

/// Inserts `events` (not empty) of `run_id`, numbered from `first_event`, as one row.
pub(super) async fn insert_events(
    tx: &mut PgConnection,
    run_id: &str,
    events: &[Event],
    first_event: i64,
) -> Result<(), StoreError> {
    let (count, names, payload) = event_values(events)?;
    sqlx::query(INSERT_EVENTS)
        .bind(run_id)
        .bind(first_event)
        .bind(count)
        .bind(names)
        .bind(payload)
        .bind(timestamp(events[0].ts))
        .execute(tx)
        .await
        .map(drop)
        .or_backend(|| format!("cannot save the events of run `{run_id}`"))
}

/// Inserts or replaces envelope rows, in order (a later row of a call replaces an earlier one).
pub(super) async fn upsert_tool_calls(
    tx: &mut PgConnection,
    calls: &[ToolCallRecord],
) -> Result<(), StoreError> {
    for call in calls {
        sqlx::query(UPSERT_TOOL_CALL)
            .bind(call.run_id.as_str())
            .bind(call.call_id.as_str())
            .bind(call.name.as_str())
            .bind(text::to_column(&call.arguments))
            .bind(call.idempotent)
            .bind(timestamp(call.started_at))
            .bind(call.completed_at.map(timestamp))
            .bind(call.ok)
            .bind(call.output.as_deref().map(text::to_column))
            .execute(&mut *tx)
            .await
            .or_backend(|| "cannot record tool calls".into())?;
    }
    Ok(())
}

/// Replaces the journal of `session_id`, updated `now`.
pub(super) async fn upsert_journal(
    tx: &mut PgConnection,
    session_id: &str,
    journal: &Journal,
    now: &str,
) -> Result<(), StoreError> {
    sqlx::query(UPSERT_JOURNAL)
        .bind(session_id)
        .bind(to_json(journal, "the journal")?)
        .bind(now)
        .execute(tx)
        .await
        .map(drop)
        .or_backend(|| format!("cannot save the journal of session `{session_id}`"))
}

/// Inserts or replaces envelope rows outside a boundary, in one transaction.
pub(super) async fn record_tool_calls(
    pool: &PgPool,
    calls: &[ToolCallRecord],
) -> Result<(), StoreError> {
    let doing = || "cannot record tool calls".to_string();
    let mut tx = pool.begin().await.or_backend(doing)?;
    upsert_tool_calls(&mut tx, calls).await?;
    tx.commit().await.or_backend(doing)
}

/// Every checkpoint of `run_id`, oldest first.
pub(super) async fn checkpoints(
    pool: &PgPool,
    run_id: &str,
) -> Result<Vec<Checkpoint>, StoreError> {
    let rows = sqlx::query(SELECT_CHECKPOINTS)
        .bind(run_id)
        .fetch_all(pool)
        .await
        .or_backend(|| format!("cannot read the checkpoints of run `{run_id}`"))?;
    rows.iter().map(codec::decode_checkpoint).collect()
}

/// The latest checkpoint of `run_id`, its frame from the latest that has one.
pub(super) async fn latest_checkpoint(
    pool: &PgPool,
    run_id: &str,
) -> Result<Option<Checkpoint>, StoreError> {
    let row = sqlx::query(SELECT_LATEST_CHECKPOINT)
        .bind(run_id)
        .fetch_optional(pool)
        .await
        .or_backend(|| format!("cannot read the latest checkpoint of run `{run_id}`"))?;
    row.as_ref().map(codec::decode_checkpoint).transpose()
}

/// The envelope rows of `run_id`: the table's and those its checkpoints hold, one per call,
/// by start time then call id (as on SQLite).
pub(super) async fn tool_calls(
    pool: &PgPool,
    run_id: &str,
) -> Result<Vec<ToolCallRecord>, StoreError> {
    let cannot_read = || format!("cannot read the tool calls of run `{run_id}`");
    // One snapshot for both reads: a commit moving a call from the table to a checkpoint is
    // seen whole or not at all.
    let mut tx = pool.begin().await.or_backend(cannot_read)?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await
        .or_backend(cannot_read)?;
    let rows = sqlx::query(SELECT_TOOL_CALLS)
        .bind(run_id)
        .fetch_all(&mut *tx)
        .await
        .or_backend(cannot_read)?;
    let held = sqlx::query(SELECT_HELD_TOOL_CALLS)
        .bind(run_id)
        .fetch_all(&mut *tx)
        .await
        .or_backend(cannot_read)?;
    tx.commit().await.or_backend(cannot_read)?;
    let mut calls = rows
        .iter()
        .map(|row| {
            let mut call = codec::decode_tool_call(row)?;
            call.arguments = text::from_column(std::mem::take(&mut call.arguments));
            call.output = call.output.take().map(text::from_column);
            Ok(call)
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    if held.is_empty() {
        return Ok(calls);
    }
    let mut positions: HashMap<String, usize> = calls
        .iter()
        .enumerate()
        .map(|(i, call)| (call.call_id.clone(), i))
        .collect();
    for row in &held {
        for record in codec::decode_held_tool_calls(row, run_id)? {
            keep_latest(&mut calls, &mut positions, record);
        }
    }
    calls.sort_by(|a, b| (a.started_at, &a.call_id).cmp(&(b.started_at, &b.call_id)));
    Ok(calls)
}

/// The events of `run_id`, in order.
pub(super) async fn events(pool: &PgPool, run_id: &str) -> Result<Vec<Event>, StoreError> {
    let rows = sqlx::query(SELECT_EVENTS)
        .bind(run_id)
        .fetch_all(pool)
        .await
        .or_backend(|| format!("cannot read the events of run `{run_id}`"))?;
    let events = codec::decode_events(&rows, run_id, 0)?;
    Ok(events.into_iter().map(|(_, event)| event).collect())
}

/// The events of `run_id` numbered above `after`, with their numbers.
pub(super) async fn events_after(
    pool: &PgPool,
    run_id: &str,
    after: u64,
) -> Result<Vec<(u64, Event)>, StoreError> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let rows = sqlx::query(EVENTS_AFTER)
        .bind(run_id)
        .bind(after)
        .fetch_all(pool)
        .await
        .or_backend(|| format!("cannot read the events of run `{run_id}`"))?;
    codec::decode_events(&rows, run_id, after)
}

/// The journal of `session_id`.
pub(super) async fn journal(
    pool: &PgPool,
    session_id: &str,
) -> Result<Option<Journal>, StoreError> {
    let row = sqlx::query(SELECT_JOURNAL)
        .bind(session_id)
        .fetch_optional(pool)
        .await
        .or_backend(|| format!("cannot read the journal of session `{session_id}`"))?;
    row.as_ref()
        .map(|row| codec::decode_journal(row, session_id))
        .transpose()
}

/// Sets the heartbeat of `run_id`; whether it was asked to stop (false: no such run).
pub(super) async fn heartbeat(
    pool: &PgPool,
    run_id: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let cancel: Option<bool> = sqlx::query_scalar(HEARTBEAT)
        .bind(run_id)
        .bind(timestamp(at))
        .fetch_optional(pool)
        .await
        .or_backend(|| format!("cannot record the heartbeat of run `{run_id}`"))?;
    Ok(cancel.unwrap_or(false))
}

/// Asks `run_id` to stop at `at` unless asked before, and tells every worker; false when there
/// is no such run.
pub(super) async fn request_cancel(
    pool: &PgPool,
    run_id: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let doing = || format!("cannot request run `{run_id}` to stop");
    let mut tx = pool.begin().await.or_backend(doing)?;
    let found: Option<i32> = sqlx::query_scalar(REQUEST_CANCEL)
        .bind(run_id)
        .bind(timestamp(at))
        .fetch_optional(&mut *tx)
        .await
        .or_backend(doing)?;
    if found.is_some() {
        notify(&mut tx, StoreSignal::Cancel(run_id.to_string())).await?;
    }
    tx.commit().await.or_backend(doing)?;
    Ok(found.is_some())
}
