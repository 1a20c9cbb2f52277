//! Session search on SQL (`migrations/0016_session_search.sql`): the FTS5 index over message
//! text, ranked with BM25, grouped by session (see [`keel_core::Store::search_sessions`]). The
//! index takes new messages at the end of each write transaction ([`crate::search_index`]).
//!
//! Two reads: the best sessions (each ranked by its best message), then the best passages of
//! those sessions only, so `snippet()` runs on a handful of rows whatever the index holds. The
//! person's words never reach FTS5 as syntax: [`fts5_query`] quotes every term.

use std::collections::HashMap;

use keel_core::StoreError;
use keel_platform::session_search::{
    MAX_SESSION_HITS, SNIPPETS_PER_SESSION, SessionHit, SessionSearch, fts5_query, search_terms,
};
use sqlx::sqlite::SqliteConnection;

use crate::OrBackend;
use crate::batch::Batch;
use crate::codec::{Place, column, time_column};
use crate::connections::Connections;

/// Every match of `$1` in sessions of owner `$2` (`IS`: no owner when NULL) other than `$3`,
/// with its BM25 rank (lower is better). Materialized: FTS5 computes `bm25()` only in the
/// query that scans the index, never inside an aggregate or a window.
const MATCHES: &str = "WITH hits AS MATERIALIZED ( \
         SELECT m.session_id AS session_id, m.seq AS seq, m.rowid AS id, \
         bm25(messages_fts) AS rank \
         FROM messages_fts JOIN messages m ON m.rowid = messages_fts.rowid \
         JOIN sessions s ON s.id = m.session_id \
         WHERE messages_fts MATCH $1 AND s.owner IS $2 AND s.id IS NOT $3)";

/// The best `$4` sessions, each ranked by its best match.
const BEST_SESSIONS: &str = "SELECT h.session_id AS session_id, min(h.rank) AS best, \
     s.title AS title, s.created_at AS created_at, s.updated_at AS updated_at \
     FROM hits h JOIN sessions s ON s.id = h.session_id \
     GROUP BY h.session_id ORDER BY best, h.session_id LIMIT $4";

/// The best passages (up to `$5`) of each session in the JSON array `$4`, best first: the rows
/// are chosen first, so `snippet()` runs on those rows only.
const PASSAGES: &str = "SELECT m.session_id AS session_id, \
     snippet(messages_fts, 0, '[', ']', '…', 16) AS passage \
     FROM messages_fts JOIN messages m ON m.rowid = messages_fts.rowid \
     WHERE messages_fts MATCH $1 AND messages_fts.rowid IN ( \
         SELECT id FROM (SELECT id, row_number() OVER ( \
             PARTITION BY session_id ORDER BY rank, seq) AS nth \
             FROM hits WHERE session_id IN (SELECT value FROM json_each($4))) \
         WHERE nth <= $5) \
     ORDER BY bm25(messages_fts), m.seq";

/// Searches the index (see [`keel_core::Store::search_sessions`]).
pub(crate) async fn search(
    conn: &mut SqliteConnection,
    search: &SessionSearch,
) -> Result<Vec<SessionHit>, StoreError> {
    let limit = search.limit.min(MAX_SESSION_HITS);
    let Some(query) = fts5_query(&search_terms(&search.query)) else {
        return Ok(Vec::new());
    };
    if limit == 0 {
        return Ok(Vec::new());
    }
    let doing = || "cannot search sessions".to_string();
    let best_sessions = format!("{MATCHES} {BEST_SESSIONS}");
    let rows = sqlx::query(sqlx::AssertSqlSafe(best_sessions))
        .bind(&query)
        .bind(search.owner.as_deref())
        .bind(search.exclude_session.as_deref())
        .bind(limit as i64)
        .fetch_all(&mut *conn)
        .await
        .or_backend(doing)?;
    let place = Place::Table("sessions");
    let mut hits = Vec::with_capacity(rows.len());
    for row in &rows {
        let best: f64 = column(row, "best", place)?;
        hits.push(SessionHit {
            session_id: column(row, "session_id", place)?,
            title: column(row, "title", place)?,
            created_at: time_column(row, "created_at", place)?,
            updated_at: time_column(row, "updated_at", place)?,
            score: -best,
            snippets: Vec::new(),
        });
    }
    if hits.is_empty() {
        return Ok(hits);
    }
    let ids: Vec<&str> = hits.iter().map(|hit| hit.session_id.as_str()).collect();
    let ids = serde_json::to_string(&ids).map_err(|e| StoreError::Backend(e.to_string()))?;
    let passages = format!("{MATCHES} {PASSAGES}");
    let rows = sqlx::query(sqlx::AssertSqlSafe(passages))
        .bind(&query)
        .bind(search.owner.as_deref())
        .bind(search.exclude_session.as_deref())
        .bind(ids)
        .bind(SNIPPETS_PER_SESSION as i64)
        .fetch_all(&mut *conn)
        .await
        .or_backend(doing)?;
    let place = Place::Table("messages");
    let index: HashMap<String, usize> = hits
        .iter()
        .enumerate()
        .map(|(i, hit)| (hit.session_id.clone(), i))
        .collect();
    for row in &rows {
        let session_id: String = column(row, "session_id", place)?;
        let Some(&i) = index.get(&session_id) else {
            continue;
        };
        if hits[i].snippets.len() < SNIPPETS_PER_SESSION {
            hits[i].snippets.push(column(row, "passage", place)?);
        }
    }
    Ok(hits)
}

/// Gives an unowned, empty session its owner; returns a row when it did.
pub(crate) const ADOPT: &str = "UPDATE sessions SET owner = $2 \
     WHERE id = $1 AND owner IS NULL AND message_count = 0 RETURNING 1";

/// Makes `user_id` the owner of a new session (see [`keel_core::Store::adopt_session`]).
pub(crate) async fn adopt(
    conns: &Connections,
    session_id: &str,
    user_id: &str,
) -> Result<bool, StoreError> {
    let batch = Batch::of(ADOPT).bind(session_id).bind(user_id);
    let adopted = conns
        .transaction(vec![batch])
        .await
        .or_backend(|| format!("cannot give session `{session_id}` its owner"))?;
    Ok(adopted.is_some())
}
