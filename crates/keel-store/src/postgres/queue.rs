//! The lanes' queues on PostgreSQL, shared by every worker: enqueueing (bounded, FIFO, a
//! platform event or schedule slot recorded with its run so that it queues once), cancelling
//! and folding queued runs, and workers taking them ([`claim_queued`]).
//!
//! An enqueue locks its session's row, so the queue's length it counts holds until it commits
//! (two workers enqueueing into one full lane at once cannot both get in). The event's or the
//! slot's key is inserted first, `ON CONFLICT DO NOTHING`: of two workers enqueueing the same
//! event at once, the second waits for the first and finds its run (`Duplicate`). A queued run
//! tells every worker (`Queued(session)`) when its transaction commits.
//!
//! Taking queued runs locks the queue rows it takes, `FOR UPDATE SKIP LOCKED`: workers taking
//! at once take different runs, and each lane claimed is one row whose primary key settles the
//! rest: a worker that finds a lane claimed in the meantime leaves its run. A lane row another
//! transaction has locked is passed over too, never waited for: a commit holds its lane's row
//! (the fence) while it takes its run out of the queue, so waiting for it while holding that
//! queue row could deadlock.

use chrono::{DateTime, Utc};
use keel_core::StoreError;
use keel_platform::{EnqueueOutcome, QueueClaim, QueuedRun, StoreSignal, absorbed_reason};
use sqlx::postgres::{PgConnection, PgPool, PgRow};

use super::durability::notify;
use super::text::{from_column, to_column};
use crate::OrBackend;
use crate::codec::{optional_json, sql_limit, timestamp};
use crate::conversations::INBOUND_RUN;
use crate::lane_policies::{ABSORB_RUN, INTO_STILL_QUEUED, REPLACE_MESSAGE};
use crate::queue::{
    CANCEL_QUEUED_RUN, CLAIM_QUEUED_LANE, DEQUEUE, QUEUE_LENGTH, QUEUED_RUNS, QUEUED_SESSIONS,
    SLOT_RUN, decode_queued, holder_lapsed, queue_heads,
};

/// Records platform event `$1`/`$2` as run `$3`'s, received at `$4`, unless it was received
/// before; returns a row when it recorded it.
const RECORD_INBOUND: &str = "INSERT INTO inbound_events (source, event_id, run_id, received_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING 1";

/// Records schedule `$1`'s slot `$2` fired as run `$3` at `$4`, unless the slot was recorded
/// before; returns a row when it recorded it.
const RECORD_SLOT_FIRED: &str = "INSERT INTO schedule_slots \
     (schedule_id, slot, outcome, run_id, at) VALUES ($1, $2, 'fired', $3, $4) \
     ON CONFLICT DO NOTHING RETURNING 1";

/// Locks session `$1`'s row until the transaction ends (enqueues into it take turns).
const LOCK_SESSION: &str = "SELECT 1 FROM sessions WHERE id = $1 FOR NO KEY UPDATE";

/// The queue row of run `$1`.
const INSERT_QUEUE_ROW: &str = "INSERT INTO run_queue \
     (run_id, session_id, user_id, message, enqueued_at, provider, model, options) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// The record of queued run `$1`, started at `$3`.
const INSERT_QUEUED_RUN: &str = "INSERT INTO runs (id, session_id, state, provider, model, \
     iterations, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, started_at, \
     updated_at, cost, resume_available, event_count) \
     VALUES ($1, $2, 'queued', $4, $5, 0, 0, 0, 0, 0, $3, $3, 0, FALSE, 0)";

/// Each session's oldest queued run whose lane is free or lapsed as of `$1`, oldest first, at
/// most `$2`, locked; rows another worker has locked are passed over.
const CLAIMABLE: &str = concat!(
    queue_heads!(),
    " AND NOT EXISTS (SELECT 1 FROM session_lanes l WHERE l.session_id = q.session_id \
     AND NOT ",
    holder_lapsed!("$1"),
    ") ORDER BY q.seq LIMIT $2 FOR UPDATE OF q SKIP LOCKED"
);

/// Locks lane `$1`'s row, unless another transaction holds it; a row when it did.
const LOCK_LANE: &str = "SELECT 1 FROM session_lanes WHERE session_id = $1 FOR UPDATE SKIP LOCKED";

/// Whether session `$1` has a lane row.
const HAS_LANE: &str = "SELECT EXISTS (SELECT 1 FROM session_lanes WHERE session_id = $1)";

/// A queued run as read back: its message as it was given.
fn queued(row: &PgRow) -> Result<QueuedRun, StoreError> {
    let mut run = decode_queued(row)?;
    run.message = from_column(run.message);
    Ok(run)
}

/// Queues a run (see [`keel_platform::ConversationStore::enqueue_run`]).
pub(super) async fn enqueue(
    pool: &PgPool,
    run: &QueuedRun,
    limit: usize,
) -> Result<EnqueueOutcome, StoreError> {
    let doing = || format!("cannot queue run `{}`", run.run_id);
    let options = optional_json(
        (run.options != Default::default()).then_some(&run.options),
        "run options",
    )?;
    let mut tx = pool.begin().await.or_backend(doing)?;
    let at = timestamp(run.enqueued_at);
    if let Some(first) = record_keys(&mut tx, run, &at).await? {
        tx.rollback().await.or_backend(doing)?;
        return Ok(EnqueueOutcome::Duplicate { run_id: first });
    }
    let exists = sqlx::query(LOCK_SESSION)
        .bind(&run.session_id)
        .fetch_optional(&mut *tx)
        .await
        .or_backend(doing)?;
    if exists.is_none() {
        return Err(StoreError::NotFound(format!(
            "session `{}`",
            run.session_id
        )));
    }
    let queued: i64 = sqlx::query_scalar(QUEUE_LENGTH)
        .bind(&run.session_id)
        .fetch_one(&mut *tx)
        .await
        .or_backend(doing)?;
    let queued_now = usize::try_from(queued).unwrap_or(0);
    if queued >= sql_limit(limit) {
        return Ok(EnqueueOutcome::Full { queued: queued_now });
    }
    sqlx::query(INSERT_QUEUE_ROW)
        .bind(&run.run_id)
        .bind(&run.session_id)
        .bind(run.user_id.as_deref())
        .bind(to_column(&run.message))
        .bind(&at)
        .bind(&run.provider)
        .bind(&run.model)
        .bind(options)
        .execute(&mut *tx)
        .await
        .or_backend(doing)?;
    sqlx::query(INSERT_QUEUED_RUN)
        .bind(&run.run_id)
        .bind(&run.session_id)
        .bind(&at)
        .bind(&run.provider)
        .bind(&run.model)
        .execute(&mut *tx)
        .await
        .or_backend(doing)?;
    notify(&mut tx, StoreSignal::Queued(run.session_id.clone())).await?;
    tx.commit().await.or_backend(doing)?;
    Ok(EnqueueOutcome::Queued { ahead: queued_now })
}

/// Records the run's platform event and schedule slot, if it has them; the run the first of
/// them recorded before became (`''` for a slot recorded without a run), if one was.
async fn record_keys(
    conn: &mut PgConnection,
    run: &QueuedRun,
    at: &str,
) -> Result<Option<String>, StoreError> {
    let doing = || format!("cannot queue run `{}`", run.run_id);
    if let Some(key) = &run.inbound {
        let recorded = sqlx::query(RECORD_INBOUND)
            .bind(&key.source)
            .bind(&key.event_id)
            .bind(&run.run_id)
            .bind(at)
            .fetch_optional(&mut *conn)
            .await
            .or_backend(doing)?;
        if recorded.is_none() {
            // A new statement sees the row the conflict was with: it is committed.
            let first: String = sqlx::query_scalar(INBOUND_RUN)
                .bind(&key.source)
                .bind(&key.event_id)
                .fetch_one(&mut *conn)
                .await
                .or_backend(doing)?;
            return Ok(Some(first));
        }
    }
    if let Some(key) = &run.slot {
        let slot = timestamp(key.slot);
        let recorded = sqlx::query(RECORD_SLOT_FIRED)
            .bind(&key.schedule_id)
            .bind(&slot)
            .bind(&run.run_id)
            .bind(at)
            .fetch_optional(&mut *conn)
            .await
            .or_backend(doing)?;
        if recorded.is_none() {
            let first: String = sqlx::query_scalar(SLOT_RUN)
                .bind(&key.schedule_id)
                .bind(&slot)
                .fetch_one(&mut *conn)
                .await
                .or_backend(doing)?;
            return Ok(Some(first));
        }
    }
    Ok(None)
}

/// The session's queued runs, oldest first.
pub(super) async fn queued_runs(
    pool: &PgPool,
    session_id: &str,
) -> Result<Vec<QueuedRun>, StoreError> {
    let rows = sqlx::query(QUEUED_RUNS)
        .bind(session_id)
        .fetch_all(pool)
        .await
        .or_backend(|| format!("cannot read the queue of session `{session_id}`"))?;
    rows.iter().map(queued).collect()
}

/// Sessions with queued runs, oldest queued first.
pub(super) async fn queued_sessions(pool: &PgPool) -> Result<Vec<String>, StoreError> {
    sqlx::query_scalar(QUEUED_SESSIONS)
        .fetch_all(pool)
        .await
        .or_backend(|| "cannot read the run queue".into())
}

/// Cancels a queued run: its record cancelled and its queue row gone, in one transaction.
pub(super) async fn cancel_queued(
    pool: &PgPool,
    run_id: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let doing = || format!("cannot cancel queued run `{run_id}`");
    let mut tx = pool.begin().await.or_backend(doing)?;
    sqlx::query(CANCEL_QUEUED_RUN)
        .bind(run_id)
        .bind(timestamp(at))
        .execute(&mut *tx)
        .await
        .or_backend(doing)?;
    let dequeued = sqlx::query(DEQUEUE)
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await
        .or_backend(doing)?;
    tx.commit().await.or_backend(doing)?;
    Ok(dequeued.is_some())
}

/// Takes queued runs for a worker, in one transaction (see
/// [`keel_platform::ConversationStore::claim_queued`]).
pub(super) async fn claim_queued(
    pool: &PgPool,
    claim: &QueueClaim<'_>,
) -> Result<Vec<QueuedRun>, StoreError> {
    if claim.limit == 0 {
        return Ok(Vec::new());
    }
    let doing = || format!("cannot take queued runs for `{}`", claim.worker);
    let cutoff = timestamp(claim.at - claim.stale_after);
    let at = timestamp(claim.at);
    let mut tx = pool.begin().await.or_backend(doing)?;
    let rows = sqlx::query(CLAIMABLE)
        .bind(&cutoff)
        .bind(sql_limit(claim.limit))
        .fetch_all(&mut *tx)
        .await
        .or_backend(doing)?;
    let mut taken = Vec::with_capacity(rows.len());
    for row in &rows {
        let run = queued(row)?;
        if !lane_unlocked(&mut tx, &run.session_id)
            .await
            .or_backend(doing)?
        {
            continue;
        }
        let claimed = sqlx::query(CLAIM_QUEUED_LANE)
            .bind(&run.session_id)
            .bind(&at)
            .bind(&run.run_id)
            .bind(claim.worker)
            .bind(&cutoff)
            .fetch_optional(&mut *tx)
            .await
            .or_backend(doing)?;
        if claimed.is_some() {
            taken.push(run);
        }
    }
    tx.commit().await.or_backend(doing)?;
    Ok(taken)
}

/// Locks `session_id`'s lane row if it has one; false when another transaction holds it.
async fn lane_unlocked(conn: &mut PgConnection, session_id: &str) -> Result<bool, sqlx::Error> {
    if sqlx::query(LOCK_LANE)
        .bind(session_id)
        .fetch_optional(&mut *conn)
        .await?
        .is_some()
    {
        return Ok(true);
    }
    let held: bool = sqlx::query_scalar(HAS_LANE)
        .bind(session_id)
        .fetch_one(&mut *conn)
        .await?;
    Ok(!held)
}

/// Folds queued runs into run `into`, in one transaction (see
/// [`keel_platform::ConversationStore::absorb_queued`]).
pub(super) async fn absorb_queued(
    pool: &PgPool,
    into: &str,
    absorbed: &[String],
    message: Option<&str>,
    how: &str,
    at: DateTime<Utc>,
) -> Result<Vec<String>, StoreError> {
    let doing = || format!("cannot fold queued runs into run `{into}`");
    let reason = absorbed_reason(how, into);
    let absorb = match message {
        Some(_) => format!("{ABSORB_RUN}{INTO_STILL_QUEUED}"),
        None => ABSORB_RUN.to_string(),
    };
    let at = timestamp(at);
    let mut tx = pool.begin().await.or_backend(doing)?;
    let mut taken: Vec<String> = Vec::new();
    for run_id in absorbed {
        if taken.contains(run_id) {
            continue;
        }
        // Built from this crate's constants only.
        let ended = sqlx::query(sqlx::AssertSqlSafe(absorb.as_str()))
            .bind(run_id)
            .bind(&at)
            .bind(&reason)
            .bind(into)
            .execute(&mut *tx)
            .await
            .or_backend(doing)?;
        if ended.rows_affected() == 1 {
            sqlx::query(DEQUEUE)
                .bind(run_id)
                .execute(&mut *tx)
                .await
                .or_backend(doing)?;
            taken.push(run_id.clone());
        }
    }
    if let Some(message) = message {
        sqlx::query(REPLACE_MESSAGE)
            .bind(into)
            .bind(to_column(message))
            .execute(&mut *tx)
            .await
            .or_backend(doing)?;
    }
    tx.commit().await.or_backend(doing)?;
    Ok(taken)
}
