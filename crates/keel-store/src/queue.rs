//! The lanes' queues on SQL (`migrations/0008_daemon.sql`): accepted messages waiting for their
//! conversation's lane, oldest first ([`keel_platform::ConversationStore::enqueue_run`] and the
//! methods after it). An enqueue is one transaction that counts the lane's queue, so its limit
//! holds across processes. Many workers take queued runs with
//! [`keel_platform::ConversationStore::claim_queued`]: each session's oldest queued run whose
//! lane is free, its lane claimed for the worker in the transaction that checks it. The SQL
//! here is what SQLite runs; the PostgreSQL store (`postgres/queue.rs`) reuses the texts both
//! databases read alike.

use chrono::{DateTime, Utc};
use keel_core::StoreError;
use keel_platform::{EnqueueOutcome, QueueClaim, QueuedRun};
use sqlx::Row;

use crate::OrBackend;
use crate::batch::Batch;
use crate::codec::{
    Columns, Place, column, json_column, optional_json, sql_limit, time_column, timestamp,
};
use crate::connections::Connections;

/// Queues run `$1` of session `$2` unless the session's queue holds `$6` rows already (or the
/// session does not exist).
const ENQUEUE: &str = "INSERT INTO run_queue \
     (run_id, session_id, user_id, message, enqueued_at, provider, model, options) \
     SELECT $1, $2, $3, $4, $5, $7, $8, $9 \
     WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $2) \
     AND (SELECT count(*) FROM run_queue WHERE session_id = $2) < $6 \
     AND NOT EXISTS (SELECT 1 FROM inbound_events WHERE source = $10 AND event_id = $11) \
     AND NOT EXISTS (SELECT 1 FROM schedule_slots WHERE schedule_id = $12 AND slot = $13)";

/// The platform event the queued run came from (`$10`, `$11`), recorded with its queue row.
const RECORD_INBOUND: &str = "INSERT INTO inbound_events (source, event_id, run_id, received_at) \
     SELECT $10, $11, $1, $5 WHERE $10 IS NOT NULL \
     AND EXISTS (SELECT 1 FROM run_queue WHERE run_id = $1)";

/// The schedule slot the queued run fires (`$12`, `$13`), recorded `fired` with its queue row
/// (`migrations/0030_schedules.sql`).
const RECORD_SLOT_FIRED: &str = "INSERT INTO schedule_slots \
     (schedule_id, slot, outcome, run_id, at) SELECT $12, $13, 'fired', $1, $5 \
     WHERE $12 IS NOT NULL AND EXISTS (SELECT 1 FROM run_queue WHERE run_id = $1)";

/// The run a recorded schedule slot became ('' for one recorded without a run).
pub(crate) const SLOT_RUN: &str =
    "SELECT COALESCE(run_id, '') FROM schedule_slots WHERE schedule_id = $1 AND slot = $2";

/// The queued run's record, when its queue row was written.
const INSERT_QUEUED_RUN: &str = "INSERT INTO runs (id, session_id, state, provider, model, \
     iterations, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, started_at, \
     updated_at, cost, resume_available, event_count) \
     SELECT $1, $2, 'queued', $7, $8, 0, 0, 0, 0, 0, $5, $5, 0, 0, 0 \
     WHERE EXISTS (SELECT 1 FROM run_queue WHERE run_id = $1)";

/// Whether the run was queued.
const WAS_QUEUED: &str = "SELECT EXISTS (SELECT 1 FROM run_queue WHERE run_id = $1)";

/// How many runs session `$1` has queued.
pub(crate) const QUEUE_LENGTH: &str = "SELECT count(*) AS n FROM run_queue WHERE session_id = $1";

/// Queued runs of a session before `$2` (by arrival).
const QUEUED_AHEAD: &str = "SELECT count(*) AS n FROM run_queue \
     WHERE session_id = $1 AND seq < (SELECT seq FROM run_queue WHERE run_id = $2)";

/// Session `$1`'s queued runs, oldest first.
pub(crate) const QUEUED_RUNS: &str = "SELECT run_id, session_id, user_id, message, enqueued_at, provider, \
     model, options FROM run_queue WHERE session_id = $1 ORDER BY seq";

/// Sessions with queued runs, the one with the oldest first.
pub(crate) const QUEUED_SESSIONS: &str =
    "SELECT session_id FROM run_queue GROUP BY session_id ORDER BY min(seq)";

/// Takes run `$1` out of the queue; returns a row when it was there.
pub(crate) const DEQUEUE: &str = "DELETE FROM run_queue WHERE run_id = $1 RETURNING 1";

/// Marks queued run `$1` cancelled at `$2`, when it is still queued (its queue row and its
/// state say so).
pub(crate) const CANCEL_QUEUED_RUN: &str = "UPDATE runs SET state = 'cancelled', \
     updated_at = $2, finished_at = $2, cancel_requested_at = COALESCE(cancel_requested_at, $2) \
     WHERE id = $1 AND EXISTS (SELECT 1 FROM run_queue WHERE run_id = $1) AND state = 'queued'";

/// Queues a run (see [`keel_core::Store::enqueue_run`]).
pub(crate) async fn enqueue(
    conns: &Connections,
    run: &QueuedRun,
    limit: usize,
) -> Result<EnqueueOutcome, StoreError> {
    let doing = || format!("cannot queue run `{}`", run.run_id);
    let mut batch = Batch::of(ENQUEUE)
        .bind(&run.run_id)
        .bind(&run.session_id)
        .bind(run.user_id.as_deref())
        .bind(&run.message)
        .bind(timestamp(run.enqueued_at))
        .bind(sql_limit(limit))
        .bind(&run.provider)
        .bind(&run.model)
        .bind(optional_json(
            (run.options != Default::default()).then_some(&run.options),
            "run options",
        )?)
        .bind(run.inbound.as_ref().map(|key| key.source.as_str()))
        .bind(run.inbound.as_ref().map(|key| key.event_id.as_str()))
        .bind(run.slot.as_ref().map(|key| key.schedule_id.as_str()))
        .bind(run.slot.as_ref().map(|key| timestamp(key.slot)));
    batch.end_statement().sql(INSERT_QUEUED_RUN).end_statement();
    batch.sql(RECORD_INBOUND).end_statement();
    batch.sql(RECORD_SLOT_FIRED).end_statement();
    batch.sql(WAS_QUEUED);
    let queued = conns
        .transaction(vec![batch])
        .await
        .or_backend(doing)?
        .unwrap_or(false);
    let mut reader = conns.reader().await?;
    if queued {
        let ahead: i64 = sqlx::query(QUEUED_AHEAD)
            .bind(&run.session_id)
            .bind(&run.run_id)
            .fetch_one(&mut *reader)
            .await
            .or_backend(doing)?
            .try_get("n")
            .or_backend(doing)?;
        return Ok(EnqueueOutcome::Queued {
            ahead: usize::try_from(ahead).unwrap_or(0),
        });
    }
    if let Some(key) = &run.inbound
        && let Some(first) = crate::conversations::inbound_run(conns, key).await?
    {
        return Ok(EnqueueOutcome::Duplicate { run_id: first });
    }
    if let Some(key) = &run.slot {
        let first: Option<String> = sqlx::query_scalar(SLOT_RUN)
            .bind(&key.schedule_id)
            .bind(timestamp(key.slot))
            .fetch_optional(&mut *reader)
            .await
            .or_backend(doing)?;
        if let Some(run_id) = first {
            return Ok(EnqueueOutcome::Duplicate { run_id });
        }
    }
    let exists = sqlx::query("SELECT 1 FROM sessions WHERE id = $1")
        .bind(&run.session_id)
        .fetch_optional(&mut *reader)
        .await
        .or_backend(doing)?;
    if exists.is_none() {
        return Err(StoreError::NotFound(format!(
            "session `{}`",
            run.session_id
        )));
    }
    let queued: i64 = sqlx::query(QUEUE_LENGTH)
        .bind(&run.session_id)
        .fetch_one(&mut *reader)
        .await
        .or_backend(doing)?
        .try_get("n")
        .or_backend(doing)?;
    Ok(EnqueueOutcome::Full {
        queued: usize::try_from(queued).unwrap_or(0),
    })
}

/// The session's queued runs, oldest first.
pub(crate) async fn queued_runs(
    conns: &Connections,
    session_id: &str,
) -> Result<Vec<QueuedRun>, StoreError> {
    let rows = sqlx::query(QUEUED_RUNS)
        .bind(session_id)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read the queue of session `{session_id}`"))?;
    rows.iter().map(decode_queued).collect()
}

/// Sessions with queued runs, oldest queued first.
pub(crate) async fn queued_sessions(conns: &Connections) -> Result<Vec<String>, StoreError> {
    let rows = sqlx::query(QUEUED_SESSIONS)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| "cannot read the run queue".into())?;
    rows.iter()
        .map(|row| column(row, "session_id", Place::Table("run_queue")))
        .collect()
}

/// Cancels a queued run: out of the queue, its record cancelled, in one transaction.
pub(crate) async fn cancel_queued(
    conns: &Connections,
    run_id: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    // The update first, guarded by the queue row; the delete's returned row is the answer.
    let mut batch = Batch::of(CANCEL_QUEUED_RUN)
        .bind(run_id)
        .bind(timestamp(at));
    batch.end_statement().sql(DEQUEUE);
    let cancelled = conns
        .transaction(vec![batch])
        .await
        .or_backend(|| format!("cannot cancel queued run `{run_id}`"))?;
    Ok(cancelled.is_some())
}

/// Decodes a row of [`QUEUED_RUNS`]' columns.
pub(crate) fn decode_queued(row: &impl Columns) -> Result<QueuedRun, StoreError> {
    let place = Place::Table("run_queue");
    Ok(QueuedRun {
        run_id: column(row, "run_id", place)?,
        session_id: column(row, "session_id", place)?,
        user_id: column(row, "user_id", place)?,
        message: column(row, "message", place)?,
        enqueued_at: time_column(row, "enqueued_at", place)?,
        provider: column(row, "provider", place)?,
        model: column(row, "model", place)?,
        options: json_column::<keel_core::RunOptions>(row, "options", place)?.unwrap_or_default(),
        // Recorded in `inbound_events` and `schedule_slots` when it was queued; not needed again.
        inbound: None,
        slot: None,
    })
}

/// Whether lane row `l`'s holder lapsed for a queued run, as of the cutoff `$c` (now minus the
/// staleness): its run is not stored and was claimed at or before the cutoff; or it ended (a
/// run timed out that can resume keeps the lane until the cutoff passes its time-out, for the
/// resume every worker's reconciler offers: the conversation's next run must not overtake it);
/// or it waits for a human who asked it to stop; or it is a queued run whose claim, heartbeat and
/// last update are all at or before the cutoff (its worker died before starting it). A holder
/// still executing is never taken over here: the reconciler ends it first (PostgreSQL's unique
/// index forbids a second executing run of a conversation). Text order is time order.
macro_rules! holder_lapsed {
    ($c:literal) => {
        concat!(
            "((NOT EXISTS (SELECT 1 FROM runs h WHERE h.id = l.run_id) AND l.claimed_at <= ",
            $c,
            ") OR EXISTS (SELECT 1 FROM runs h WHERE h.id = l.run_id AND (h.state IN \
             ('completed', 'cancelled', 'max_steps', 'budget_exceeded', 'error') \
             OR (h.state = 'timed_out' AND (NOT h.resume_available \
                 OR h.cancel_requested_at IS NOT NULL OR h.updated_at <= ",
            $c,
            ")) \
             OR (h.state = 'waiting_on_human' AND h.cancel_requested_at IS NOT NULL) \
             OR (h.state = 'queued' AND l.claimed_at <= ",
            $c,
            " AND COALESCE(h.heartbeat_at, '') <= ",
            $c,
            " AND h.updated_at <= ",
            $c,
            "))))"
        )
    };
}

/// The queued runs (`run_queue q`) that are the oldest of their session.
macro_rules! queue_heads {
    () => {
        "SELECT q.run_id, q.session_id, q.user_id, q.message, q.enqueued_at, q.provider, \
         q.model, q.options FROM run_queue q WHERE NOT EXISTS (SELECT 1 FROM run_queue e \
         WHERE e.session_id = q.session_id AND e.seq < q.seq)"
    };
}

pub(crate) use {holder_lapsed, queue_heads};

/// Each session's oldest queued run whose lane is free or lapsed as of `$1`, oldest first.
const CLAIMABLE: &str = concat!(
    queue_heads!(),
    " AND NOT EXISTS (SELECT 1 FROM session_lanes l WHERE l.session_id = q.session_id \
     AND NOT ",
    holder_lapsed!("$1"),
    ") ORDER BY q.seq"
);

/// Claims the lane of session `$1` for run `$3` of worker `$4` at `$2` while `$3` is the oldest
/// run in the session's queue and the lane is free or its holder lapsed as of `$5`; returns a
/// row when it did.
pub(crate) const CLAIM_QUEUED_LANE: &str = concat!(
    "INSERT INTO session_lanes AS l (session_id, run_id, worker, claimed_at) \
     SELECT $1, $3, $4, $2 WHERE $3 = (SELECT run_id FROM run_queue WHERE session_id = $1 \
     ORDER BY seq LIMIT 1) ON CONFLICT (session_id) DO UPDATE SET run_id = excluded.run_id, \
     worker = excluded.worker, claimed_at = excluded.claimed_at WHERE ",
    holder_lapsed!("$5"),
    " RETURNING 1"
);

/// Takes queued runs for a worker (see [`keel_platform::ConversationStore::claim_queued`]): the
/// candidates are read first, then each lane is claimed in a transaction of its own that
/// checks again that the run is its queue's oldest and the lane free, so a candidate another
/// worker took meanwhile is passed over.
pub(crate) async fn claim_queued(
    conns: &Connections,
    claim: &QueueClaim<'_>,
) -> Result<Vec<QueuedRun>, StoreError> {
    if claim.limit == 0 {
        return Ok(Vec::new());
    }
    let doing = || format!("cannot take queued runs for `{}`", claim.worker);
    let cutoff = timestamp(claim.at - claim.stale_after);
    let rows = sqlx::query(CLAIMABLE)
        .bind(&cutoff)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(doing)?;
    let mut taken = Vec::new();
    for row in &rows {
        let run = decode_queued(row)?;
        let batch = Batch::of(CLAIM_QUEUED_LANE)
            .bind(run.session_id.as_str())
            .bind(timestamp(claim.at))
            .bind(run.run_id.as_str())
            .bind(claim.worker)
            .bind(cutoff.as_str());
        if conns
            .transaction(vec![batch])
            .await
            .or_backend(doing)?
            .is_some()
        {
            taken.push(run);
            if taken.len() == claim.limit {
                break;
            }
        }
    }
    Ok(taken)
}
