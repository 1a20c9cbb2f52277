//! Session lanes on SQL (`migrations/0006_session_lanes.sql`): a claim is one write transaction
//! on the writer, so claims from any number of processes are serialized by SQLite's write lock.
//! The rules for when a holder's claim lapses are keel-core's [`keel_core::lane`], written here
//! in SQL with the same meaning.

use keel_core::{LaneClaim, LaneOutcome, StoreError};

use crate::OrBackend;
use crate::batch::{Batch, ENSURE_SESSION};
use crate::codec::{self, timestamp};
use crate::connections::Connections;

/// Takes the lane of session `$1` for run `$3` of worker `$4` at `$2`, unless another run holds
/// it: a run not stored yet whose claim is newer than `$5` (now minus the staleness), a paused
/// run nobody asked to stop, or a running one seen (claim, heartbeat, commit) after `$5`.
/// Timestamps are fixed-width text, so text order is time order.
const CLAIM: &str = "INSERT INTO session_lanes (session_id, run_id, worker, claimed_at) \
     VALUES ($1, $3, $4, $2) ON CONFLICT (session_id) DO UPDATE SET \
         run_id = excluded.run_id, worker = excluded.worker, claimed_at = excluded.claimed_at \
     WHERE session_lanes.run_id = excluded.run_id OR NOT ( \
         (NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = session_lanes.run_id) \
             AND session_lanes.claimed_at > $5) \
         OR EXISTS (SELECT 1 FROM runs r WHERE r.id = session_lanes.run_id AND ( \
             (r.state = 'waiting_on_human' AND r.cancel_requested_at IS NULL) \
             OR (r.state NOT IN ('completed', 'cancelled', 'timed_out', 'max_steps', \
                     'budget_exceeded', 'error', 'waiting_on_human') \
                 AND max(session_lanes.claimed_at, COALESCE(r.heartbeat_at, ''), r.updated_at) \
                     > $5))))";

/// Whether run `$3` holds the lane of session `$1` now.
const HOLDS: &str = "SELECT run_id = $3 FROM session_lanes WHERE session_id = $1";

/// The holder of a session's lane, and whether its run waits for a human.
const SELECT_HOLDER: &str = "SELECT l.run_id, l.worker, l.claimed_at, \
     r.state = 'waiting_on_human' AS paused \
     FROM session_lanes l LEFT JOIN runs r ON r.id = l.run_id WHERE l.session_id = $1";

/// Deletes the lane of session `$1` if run `$2` holds it; returns a row when it did.
const RELEASE: &str = "DELETE FROM session_lanes WHERE session_id = $1 AND run_id = $2 RETURNING 1";

/// Releases the lane of the commit's session (`$1`) held by its run (`$5`): added to a terminal
/// commit, so the lane is free exactly when the run's end is stored.
pub(crate) const RELEASE_IN_COMMIT: &str =
    "DELETE FROM session_lanes WHERE session_id = $1 AND run_id = $5";

/// How many times a claim that lost a race to a release is tried again before it reports the
/// lane busy anyway.
const ATTEMPTS: usize = 3;

/// Claims the lane (see [`keel_core::Store::claim_session`]).
pub(crate) async fn claim(
    conns: &Connections,
    claim: &LaneClaim<'_>,
) -> Result<LaneOutcome, StoreError> {
    let session_id = claim.session_id;
    let doing = || {
        format!(
            "cannot claim session `{session_id}` for run `{}`",
            claim.run_id
        )
    };
    let mut holder = None;
    for _ in 0..ATTEMPTS {
        let mut batch = Batch::of(ENSURE_SESSION);
        batch.end_statement().sql(CLAIM).end_statement().sql(HOLDS);
        let batch = batch
            .bind(session_id)
            .bind(timestamp(claim.at))
            .bind(claim.run_id)
            .bind(claim.worker)
            .bind(timestamp(claim.at - claim.stale_after));
        let claimed = conns.transaction(vec![batch]).await.or_backend(doing)?;
        if claimed == Some(true) {
            return Ok(LaneOutcome::Claimed);
        }
        let row = sqlx::query(SELECT_HOLDER)
            .bind(session_id)
            .fetch_optional(&mut *conns.reader().await?)
            .await
            .or_backend(doing)?;
        // No row: the holder released the lane between the claim and this read.
        if let Some(row) = row {
            holder = Some(codec::decode_lane_holder(&row)?);
            break;
        }
    }
    match holder {
        Some(holder) => Ok(LaneOutcome::Busy(holder)),
        None => Err(StoreError::Backend(format!(
            "{}: the lane kept changing hands",
            doing()
        ))),
    }
}

/// Releases the lane if `run_id` holds it (see [`keel_core::Store::release_session`]).
pub(crate) async fn release(
    conns: &Connections,
    session_id: &str,
    run_id: &str,
) -> Result<bool, StoreError> {
    let batch = Batch::of(RELEASE).bind(session_id).bind(run_id);
    let released = conns
        .transaction(vec![batch])
        .await
        .or_backend(|| format!("cannot release session `{session_id}`"))?;
    Ok(released.is_some())
}

/// Why a write of `messages` by `run_id` failed when the session's lane is held by another run:
/// the lane fence of its commit refused it (`migrations/0024_lane_fence_in_the_commit.sql`).
/// `None` when that is not the reason.
pub(crate) async fn lost(
    conns: &Connections,
    session_id: &str,
    run_id: Option<&str>,
    messages: &[keel_core::Message],
) -> Option<StoreError> {
    let run_id = run_id.filter(|_| !messages.is_empty())?;
    let holder: String =
        sqlx::query_scalar("SELECT run_id FROM session_lanes WHERE session_id = $1")
            .bind(session_id)
            .fetch_optional(&mut *conns.reader().await.ok()?)
            .await
            .ok()??;
    (holder != run_id).then(|| StoreError::LaneLost {
        run_id: run_id.to_string(),
        session_id: session_id.to_string(),
        holder,
    })
}
