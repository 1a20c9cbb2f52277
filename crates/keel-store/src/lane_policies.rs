//! The SQLite store's share of the double-texting policies: rolled-back runs
//! (`migrations/0029_lane_policies.sql`), and the folding of queued runs into another run
//! (`steer` and `collect`, see [`keel_platform::ConversationStore::absorb_queued`]): one
//! transaction through the writer, like every write. The writer answers a transaction with one
//! value only, so which runs it took is read back after it: those that were queued before and
//! are now cancelled with this absorption's reason.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use keel_core::StoreError;
use keel_platform::absorbed_reason;

use crate::OrBackend;
use crate::batch::Batch;
use crate::codec::timestamp;
use crate::connections::Connections;

/// Ends queued run `$1` cancelled at `$2` with error `$3`, when it is still queued in the
/// conversation of run `$4` (and is not `$4`). Writes no outbox row: only a commit does.
pub(crate) const ABSORB_RUN: &str = "UPDATE runs SET state = 'cancelled', error = $3, updated_at = $2, \
     finished_at = $2, cancel_requested_at = COALESCE(cancel_requested_at, $2) \
     WHERE id = $1 AND id <> $4 AND state = 'queued' \
     AND EXISTS (SELECT 1 FROM run_queue WHERE run_id = $1) \
     AND session_id = (SELECT session_id FROM runs WHERE id = $4)";

/// [`ABSORB_RUN`]'s guard when `$4`'s message is replaced: `$4` is still queued.
pub(crate) const INTO_STILL_QUEUED: &str =
    " AND EXISTS (SELECT 1 FROM run_queue WHERE run_id = $4)";

/// Takes run `$1` out of the queue when [`ABSORB_RUN`] ended it.
const DEQUEUE_ABSORBED: &str = "DELETE FROM run_queue WHERE run_id = $1 \
     AND EXISTS (SELECT 1 FROM runs WHERE id = $1 AND state = 'cancelled' AND error = $3)";

/// Replaces the stored message of queued run `$1` with `$2`.
pub(crate) const REPLACE_MESSAGE: &str = "UPDATE run_queue SET message = $2 WHERE run_id = $1";

/// Which of the runs in the JSON array `$1` are queued.
const QUEUED_AMONG: &str =
    "SELECT value FROM json_each($1) WHERE value IN (SELECT run_id FROM run_queue)";

/// Which of the runs in the JSON array `$1` ended with error `$2`, cancelled.
const ABSORBED_AMONG: &str = "SELECT id FROM runs WHERE id IN (SELECT value FROM json_each($1)) \
     AND state = 'cancelled' AND error = $2";

/// Folds the queued runs `absorbed` into run `into` (see
/// [`keel_platform::ConversationStore::absorb_queued`]).
pub(crate) async fn absorb_queued(
    conns: &Connections,
    into: &str,
    absorbed: &[String],
    message: Option<&str>,
    how: &str,
    at: DateTime<Utc>,
) -> Result<Vec<String>, StoreError> {
    let doing = || format!("cannot fold queued runs into run `{into}`");
    let reason = absorbed_reason(how, into);
    let ids = serde_json::to_string(absorbed).or_backend(doing)?;
    let queued_before: HashSet<String> = sqlx::query_scalar(QUEUED_AMONG)
        .bind(&ids)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(doing)?
        .into_iter()
        .collect();
    let absorb = match message {
        Some(_) => format!("{ABSORB_RUN}{INTO_STILL_QUEUED}"),
        None => ABSORB_RUN.to_string(),
    };
    let mut batches = Vec::with_capacity(absorbed.len() + 1);
    for run_id in absorbed.iter().filter(|id| queued_before.contains(*id)) {
        let mut batch = Batch::of(&absorb)
            .bind(run_id.as_str())
            .bind(timestamp(at))
            .bind(reason.as_str())
            .bind(into);
        batch.end_statement().sql(DEQUEUE_ABSORBED);
        batches.push(batch);
    }
    if let Some(message) = message {
        batches.push(Batch::of(REPLACE_MESSAGE).bind(into).bind(message));
    }
    conns.transaction(batches).await.or_backend(doing)?;
    let ended: HashSet<String> = sqlx::query_scalar(ABSORBED_AMONG)
        .bind(&ids)
        .bind(&reason)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(doing)?
        .into_iter()
        .collect();
    let mut taken = HashSet::new();
    Ok(absorbed
        .iter()
        .filter(|id| queued_before.contains(*id) && ended.contains(*id))
        .filter(|id| taken.insert(id.as_str()))
        .cloned()
        .collect())
}

/// Marks run `$1` rolled back by `$2`, unless it was.
pub(crate) const ROLL_BACK: &str = "UPDATE runs SET rolled_back_by = $2 WHERE id = $1 \
     AND rolled_back_by IS NULL RETURNING 1";

/// The rolled-back runs of session `$1`.
pub(crate) const ROLLED_BACK: &str = "SELECT id, rolled_back_by FROM runs \
     WHERE session_id = $1 AND rolled_back_by IS NOT NULL ORDER BY id";

/// Marks a run rolled back (see [`keel_platform::ConversationStore::roll_back_run`]).
pub(crate) async fn roll_back_run(
    conns: &Connections,
    run_id: &str,
    by: &str,
) -> Result<bool, StoreError> {
    let marked = conns
        .transaction(vec![Batch::of(ROLL_BACK).bind(run_id).bind(by)])
        .await
        .or_backend(|| format!("cannot roll back run `{run_id}`"))?;
    Ok(marked.is_some())
}

/// The rolled-back runs of a session, with the runs that replaced them.
pub(crate) async fn rolled_back_runs(
    conns: &Connections,
    session_id: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    let rows: Vec<(String, String)> = sqlx::query_as(ROLLED_BACK)
        .bind(session_id)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read the rolled-back runs of `{session_id}`"))?;
    Ok(rows)
}

/// Sets session `$1`'s lane policy to `$2`.
pub(crate) const SET_POLICY: &str =
    "UPDATE sessions SET lane_policy = $2 WHERE id = $1 RETURNING 1";

/// Sets a conversation's lane policy (see [`keel_platform::ConversationStore::set_lane_policy`]).
pub(crate) async fn set_lane_policy(
    conns: &Connections,
    session_id: &str,
    policy: keel_core::LanePolicy,
) -> Result<bool, StoreError> {
    let set = conns
        .transaction(vec![
            Batch::of(SET_POLICY).bind(session_id).bind(policy.as_str()),
        ])
        .await
        .or_backend(|| format!("cannot set the lane policy of `{session_id}`"))?;
    Ok(set.is_some())
}
