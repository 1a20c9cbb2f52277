//! Session lanes on PostgreSQL, shared by many workers (DESIGN.md section 13). A claim is one
//! transaction that takes the lane's row or locks it (one statement, so a release between the
//! two cannot make it fail), so claims of one session from any number of workers are decided
//! one after another, and commits of the session's runs take the same lock for their fence. A claim of session S for run R by worker W succeeds when:
//!
//! - a) nobody holds the lane;
//! - b) R holds it for W already (a renewal);
//! - c) R holds it for another worker but nobody drives R: it is paused or ended and nobody
//!   claimed it since it stopped (`claimed_at < updated_at`), it is not stored and its claim is
//!   stale, or nothing of it (claim, heartbeat, commit) was seen within `stale_after`; so an
//!   answer posted to two workers at once continues the run once;
//! - d) another run holds it and lapsed by keel-core's rules ([`keel_core::lane::lane_is_held`],
//!   as on SQLite); a lapsed holder still marked executing is marked `timed_out` here, as the
//!   reconciler would, since `runs_one_executing_per_session` allows one executing run;
//! - e) and, when R is queued, no run of S was queued before it (FIFO across workers).
//!
//! The commit's fence ([`fence`]): a commit of R storing messages fails while another run holds
//! the lane (as on SQLite), and any commit of R fails while R holds it for a worker other than
//! the one R's record names: a stalled worker that wakes up can no longer write.

use chrono::{DateTime, Utc};
use keel_core::checkpoint::Boundary;
use keel_core::{AgentState, LaneClaim, LaneHolder, LaneOutcome, RunRecord, StoreError};
use keel_platform::StoreSignal;
use sqlx::PgConnection;
use sqlx::postgres::{PgPool, PgRow};

use super::durability::notify;
use crate::OrBackend;
use crate::batch::ENSURE_SESSION;
use crate::codec::{Place, column, time_column, timestamp};

/// The lane of session `$1`, locked until the transaction ends.
const LOCK_LANE: &str =
    "SELECT run_id, worker, claimed_at FROM session_lanes WHERE session_id = $1 FOR UPDATE";

/// Takes the lane of `$1` for run `$2` of worker `$3` at `$4` when nobody holds it, or else
/// locks it: one statement, whatever other claims and releases do meanwhile. `taken` tells the
/// row inserted (its `xmax` is 0) from the holder's, locked by the no-op update.
const TAKE_OR_LOCK: &str = "INSERT INTO session_lanes (session_id, run_id, worker, claimed_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (session_id) DO UPDATE SET run_id = session_lanes.run_id \
     RETURNING run_id, worker, claimed_at, xmax = 0 AS taken";

/// Gives the (locked) lane of `$1` to run `$2` of worker `$3` at `$4`.
const TAKE_HELD: &str =
    "UPDATE session_lanes SET run_id = $2, worker = $3, claimed_at = $4 WHERE session_id = $1";

/// The first run queued in session `$1` before run `$2`, when `$2` is queued there.
const QUEUED_BEFORE: &str = "SELECT q2.run_id, q2.enqueued_at FROM run_queue q \
     JOIN run_queue q2 ON q2.session_id = q.session_id AND q2.seq < q.seq \
     WHERE q.run_id = $2 AND q.session_id = $1 ORDER BY q2.seq LIMIT 1";

/// Marks a lapsed executing holder `timed_out` as the reconciler would.
const TIME_OUT: &str = "UPDATE runs SET state = 'timed_out', resume_available = $2, error = $3, \
     updated_at = $4, finished_at = $4 WHERE id = $1 AND state IN ('running', 'waiting_for_tool')";

/// The boundary of the latest checkpoint of `$1`.
const LATEST_BOUNDARY: &str =
    "SELECT boundary FROM checkpoints WHERE run_id = $1 ORDER BY seq DESC LIMIT 1";

const RELEASE: &str = "DELETE FROM session_lanes WHERE session_id = $1 AND run_id = $2 RETURNING 1";

/// The holder of a lane, as read under its lock.
struct Lane {
    run_id: String,
    worker: String,
    claimed_at: DateTime<Utc>,
}

/// Locks the lane of `session_id` for the rest of the transaction; `None` when nobody holds it.
async fn lock(tx: &mut PgConnection, session_id: &str) -> Result<Option<Lane>, StoreError> {
    let row = sqlx::query(LOCK_LANE)
        .bind(session_id)
        .fetch_optional(tx)
        .await
        .or_backend(|| format!("cannot read the lane of session `{session_id}`"))?;
    row.as_ref().map(lane_of).transpose()
}

/// The holder a row of `session_lanes` names.
fn lane_of(row: &PgRow) -> Result<Lane, StoreError> {
    let place = Place::Table("session_lanes");
    Ok(Lane {
        run_id: column(row, "run_id", place)?,
        worker: column(row, "worker", place)?,
        claimed_at: time_column(row, "claimed_at", place)?,
    })
}

/// The stored record of `run_id`.
async fn run(tx: &mut PgConnection, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
    let row = sqlx::query(super::runs::SELECT_RUN)
        .bind(run_id)
        .fetch_optional(tx)
        .await
        .or_backend(|| format!("cannot read run `{run_id}`"))?;
    row.as_ref().map(super::runs::decode_run).transpose()
}

/// Claims the lane (see [`keel_core::Store::claim_session`] and the module's rules).
pub(super) async fn claim(pool: &PgPool, claim: &LaneClaim<'_>) -> Result<LaneOutcome, StoreError> {
    let doing = || {
        format!(
            "cannot claim session `{}` for run `{}`",
            claim.session_id, claim.run_id
        )
    };
    let mut tx = pool.begin().await.or_backend(doing)?;
    sqlx::query(ENSURE_SESSION)
        .bind(claim.session_id)
        .bind(timestamp(claim.at))
        .execute(&mut *tx)
        .await
        .or_backend(doing)?;
    let outcome = claim_in(&mut tx, claim).await?;
    tx.commit().await.or_backend(doing)?;
    Ok(match outcome {
        None => LaneOutcome::Claimed,
        Some(holder) => LaneOutcome::Busy(holder),
    })
}

/// Claims the lane inside the caller's transaction (the session exists): `None` when the lane
/// is the claim's run's now, else who holds it (or the run queued before the claim's).
pub(crate) async fn claim_in(
    tx: &mut PgConnection,
    claim: &LaneClaim<'_>,
) -> Result<Option<LaneHolder>, StoreError> {
    let doing = || {
        format!(
            "cannot claim session `{}` for run `{}`",
            claim.session_id, claim.run_id
        )
    };
    let at = timestamp(claim.at);
    // Rule e first: a run queued before this one leaves the lane to it, even when free.
    let earlier = queued_before(tx, claim).await?;
    let lane = if earlier.is_some() {
        lock(tx, claim.session_id).await?
    } else {
        let row = sqlx::query(TAKE_OR_LOCK)
            .bind(claim.session_id)
            .bind(claim.run_id)
            .bind(claim.worker)
            .bind(&at)
            .fetch_one(&mut *tx)
            .await
            .or_backend(doing)?;
        if column::<bool>(&row, "taken", Place::Table("session_lanes"))? {
            return Ok(None);
        }
        Some(lane_of(&row)?)
    };
    let Some(lane) = lane else {
        return Ok(earlier);
    };
    let holder = run(tx, &lane.run_id).await?;
    let free = if lane.run_id == claim.run_id {
        lane.worker == claim.worker || !driven(&lane, holder.as_ref(), claim)
    } else {
        !awaits_resume(holder.as_ref(), claim)
            && !keel_core::lane::lane_is_held(&lane.run_id, lane.claimed_at, holder.as_ref(), claim)
    };
    if !free {
        return Ok(Some(LaneHolder {
            paused: holder
                .as_ref()
                .is_some_and(|run| run.state == AgentState::WaitingOnHuman),
            run_id: lane.run_id,
            worker: lane.worker,
            claimed_at: lane.claimed_at,
        }));
    }
    if earlier.is_some() {
        return Ok(earlier);
    }
    if let Some(holder) = holder.filter(|run| run.id != claim.run_id) {
        // A lapsed executing holder is timed out here; when it can resume, the lane waits for
        // its resume (any worker's reconciler offers it), so the conversation keeps its order.
        if time_out(tx, &holder, claim).await? {
            return Ok(Some(LaneHolder {
                run_id: lane.run_id,
                worker: lane.worker,
                claimed_at: lane.claimed_at,
                paused: false,
            }));
        }
    }
    sqlx::query(TAKE_HELD)
        .bind(claim.session_id)
        .bind(claim.run_id)
        .bind(claim.worker)
        .bind(&at)
        .execute(&mut *tx)
        .await
        .or_backend(doing)?;
    Ok(None)
}

/// Whether the lane's holder is a run its worker lost that a resume will take up again: timed
/// out, resumable, nobody asked it to stop, within `stale_after` of being timed out (every
/// worker's reconciler offers such runs again well within that). It keeps its lane meanwhile,
/// so the conversation's next message waits for it instead of overtaking it.
fn awaits_resume(holder: Option<&RunRecord>, claim: &LaneClaim<'_>) -> bool {
    holder.is_some_and(|run| {
        run.state == AgentState::TimedOut
            && run.resume_available
            && run.cancel_requested_at.is_none()
            && run.updated_at > claim.at - claim.stale_after
    })
}

/// Rule c: whether run `R`, holding its lane for another worker, is driven by that worker
/// still.
fn driven(lane: &Lane, run: Option<&RunRecord>, claim: &LaneClaim<'_>) -> bool {
    let stale = claim.at - claim.stale_after;
    let Some(run) = run else {
        return lane.claimed_at > stale;
    };
    let stopped = run.state == AgentState::WaitingOnHuman || run.state.is_terminal();
    if stopped && lane.claimed_at < run.updated_at {
        return false;
    }
    let seen = [
        Some(lane.claimed_at),
        run.heartbeat_at,
        Some(run.updated_at),
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(lane.claimed_at);
    seen > stale
}

/// Rule e: the first run queued in the claim's session before its run, as the lane's holder
/// for the caller, when its run is queued and one was.
async fn queued_before(
    tx: &mut PgConnection,
    claim: &LaneClaim<'_>,
) -> Result<Option<LaneHolder>, StoreError> {
    let row = sqlx::query(QUEUED_BEFORE)
        .bind(claim.session_id)
        .bind(claim.run_id)
        .fetch_optional(tx)
        .await
        .or_backend(|| format!("cannot read the queue of session `{}`", claim.session_id))?;
    let Some(row) = row else { return Ok(None) };
    let place = Place::Table("run_queue");
    Ok(Some(LaneHolder {
        run_id: column(&row, "run_id", place)?,
        worker: String::new(),
        claimed_at: time_column(&row, "enqueued_at", place)?,
        paused: false,
    }))
}

/// Marks `holder`, whose lane lapsed, `timed_out` if it is still marked executing, with the
/// reconciler's words and resume offer, and tells its conversation's channel; whether it can
/// be resumed (then it keeps its lane: see [`awaits_resume`]).
async fn time_out(
    tx: &mut PgConnection,
    holder: &RunRecord,
    claim: &LaneClaim<'_>,
) -> Result<bool, StoreError> {
    if !matches!(
        holder.state,
        AgentState::Running | AgentState::WaitingForTool
    ) {
        return Ok(false);
    }
    let doing = || format!("cannot mark run `{}` timed out", holder.id);
    let boundary: Option<String> = sqlx::query_scalar(LATEST_BOUNDARY)
        .bind(&holder.id)
        .fetch_optional(&mut *tx)
        .await
        .or_backend(doing)?;
    let resumable = boundary
        .and_then(|boundary| boundary.parse::<Boundary>().ok())
        .is_some_and(Boundary::resumable);
    let error = format!(
        "its worker stopped responding (no heartbeat for more than {} s){}",
        claim.stale_after.num_seconds(),
        if resumable {
            "; resume it with `keel resume`"
        } else {
            ""
        }
    );
    let at = timestamp(claim.at);
    super::commit::outbox_row(tx, &holder.session_id, &holder.id, "timed_out", &at, &at).await?;
    sqlx::query(TIME_OUT)
        .bind(&holder.id)
        .bind(resumable)
        .bind(error)
        .bind(&at)
        .execute(&mut *tx)
        .await
        .or_backend(doing)?;
    Ok(resumable)
}

/// Releases the lane if `run_id` holds it, telling every worker; whether it did.
pub(super) async fn release(
    pool: &PgPool,
    session_id: &str,
    run_id: &str,
) -> Result<bool, StoreError> {
    let doing = || format!("cannot release session `{session_id}`");
    let mut tx = pool.begin().await.or_backend(doing)?;
    let released = release_in(&mut tx, session_id, run_id).await?;
    tx.commit().await.or_backend(doing)?;
    Ok(released)
}

/// Releases the lane inside the caller's transaction, with the `Freed` signal; whether it did.
pub(super) async fn release_in(
    tx: &mut PgConnection,
    session_id: &str,
    run_id: &str,
) -> Result<bool, StoreError> {
    let released: Option<i32> = sqlx::query_scalar(RELEASE)
        .bind(session_id)
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await
        .or_backend(|| format!("cannot release session `{session_id}`"))?;
    if released.is_some() {
        notify(tx, StoreSignal::Freed(session_id.to_string())).await?;
    }
    Ok(released.is_some())
}

/// The commit's fence, inside its transaction (the lane stays locked until it ends): refuses a
/// write of `run_id` that stores messages or marks it executing (`holds_lane`) to a lane
/// another run holds — a worker that lost the lane while stalled must not mark its run running
/// beside the run that took it — and any write of `run_id` while it holds the lane for a worker
/// other than `worker` (its record's).
pub(super) async fn fence(
    tx: &mut PgConnection,
    session_id: &str,
    run_id: &str,
    worker: Option<&str>,
    holds_lane: bool,
) -> Result<(), StoreError> {
    let Some(lane) = lock(tx, session_id).await? else {
        return Ok(());
    };
    let lost = if lane.run_id == run_id {
        worker.is_some_and(|worker| worker != lane.worker)
    } else {
        holds_lane
    };
    if lost {
        return Err(StoreError::LaneLost {
            run_id: run_id.to_string(),
            session_id: session_id.to_string(),
            holder: lane.run_id,
        });
    }
    Ok(())
}
