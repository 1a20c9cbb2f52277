//! Approvals for the rest of a session on SQL (`migrations/0013_approvals.sql`).

use chrono::{DateTime, Utc};
use keel_core::StoreError;

use crate::OrBackend;
use crate::batch::Batch;
use crate::codec::timestamp;
use crate::connections::Connections;

/// Keeps approval `$2` for session `$1` at `$3`, once.
pub(crate) const INSERT: &str = "INSERT INTO session_approvals (session_id, approval, created_at) \
     VALUES ($1, $2, $3) ON CONFLICT (session_id, approval) DO NOTHING";

/// The approvals of session `$1`, oldest first.
pub(crate) const OF_SESSION: &str =
    "SELECT approval FROM session_approvals WHERE session_id = $1 ORDER BY created_at, approval";

/// Keeps an approval (see [`keel_core::Store::approve_for_session`]).
pub(crate) async fn approve(
    conns: &Connections,
    session_id: &str,
    key: &str,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let batch = Batch::of(INSERT)
        .bind(session_id)
        .bind(key)
        .bind(timestamp(at));
    conns.transaction(vec![batch]).await.map(drop).map_err(|e| {
        if e.contains("FOREIGN KEY") {
            StoreError::NotFound(format!("session `{session_id}`"))
        } else {
            StoreError::Backend(format!(
                "cannot keep an approval for session `{session_id}`: {e}"
            ))
        }
    })
}

/// The approvals of a session (see [`keel_core::Store::session_approvals`]).
pub(crate) async fn of_session(
    conns: &Connections,
    session_id: &str,
) -> Result<Vec<String>, StoreError> {
    sqlx::query_scalar(OF_SESSION)
        .bind(session_id)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read the approvals of session `{session_id}`"))
}
