//! Pages of the kernel's records for the daemon's API: a conversation's messages after a seq
//! ([`keel_core::Store::messages_page`]) and a run's events after a seq
//! ([`keel_core::Store::events_after`]).

use crate::codec::sql_limit;
use keel_core::{Event, StoreError, StoredMessage};

use crate::OrBackend;
use crate::codec;
use crate::connections::Connections;

const MESSAGES_PAGE: &str = "SELECT seq, run_id, role, content, tool_calls, tool_call_id, \
     reasoning, meta, created_at FROM messages WHERE session_id = $1 AND seq > $2 ORDER BY seq \
     LIMIT $3";

/// The rows holding events above `$2` (a row holds a commit's events, see
/// `migrations/0020_events_per_commit.sql`): of `run_events`, from the last row that starts at
/// or below `$2`, which may hold some of them, both found through the primary key; of the run's
/// checkpoints (`migrations/0023_events_with_their_checkpoint.sql`), those whose last event is
/// above `$2`, and any without a number, which the decoder reports as corrupt rather than
/// skip.
const EVENTS_AFTER: &str = crate::durability::select_event_rows!(
    " AND seq >= IFNULL((SELECT max(seq) FROM run_events WHERE run_id = $1 AND seq <= $2), 0)",
    " AND (first_event IS NULL OR first_event + events > $2)"
);

/// Up to `limit` messages of a session after seq `after`.
pub(crate) async fn messages_page(
    conns: &Connections,
    session_id: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<StoredMessage>, StoreError> {
    let rows = sqlx::query(MESSAGES_PAGE)
        .bind(session_id)
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(sql_limit(limit))
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read messages of session `{session_id}`"))?;
    rows.iter()
        .map(|row| codec::decode_message(row, session_id))
        .collect()
}

/// The run's events after seq `after`, with their seqs.
pub(crate) async fn events_after(
    conns: &Connections,
    run_id: &str,
    after: u64,
) -> Result<Vec<(u64, Event)>, StoreError> {
    let rows = sqlx::query(EVENTS_AFTER)
        .bind(run_id)
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read the events of run `{run_id}`"))?;
    codec::decode_events(&rows, run_id, i64::try_from(after).unwrap_or(i64::MAX))
}
