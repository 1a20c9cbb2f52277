//! Session search on PostgreSQL (the SQLite store's `crate::session_search`): the messages'
//! `fts` column searched through its GIN index and ranked with BM25 ([`super::search`]), grouped
//! by session, each session ranked by its best message; then the best passages of those
//! sessions only are read back and cut into snippets ([`super::search::snippet`]).

use std::collections::HashMap;

use keel_core::StoreError;
use keel_platform::session_search::{
    MAX_SESSION_HITS, SNIPPETS_PER_SESSION, SessionHit, SessionSearch, search_terms,
};
use sqlx::PgPool;

use super::search::{self, Query, Statistics, Totals, matches_sql};
use super::text;
use crate::OrBackend;
use crate::codec::{Place, column, time_column};

/// Every match in the sessions of owner `$3` (no owner when NULL) other than `$4`, oldest
/// first.
const MATCHES: &str = matches_sql!(
    "x.id",
    "x.session_id",
    "messages x JOIN sessions s ON s.id = x.session_id",
    "AND (s.owner = $3 OR ($3::text IS NULL AND s.owner IS NULL)) \
     AND s.id IS DISTINCT FROM $4 ORDER BY x.id"
);

/// The sessions `$1` (ids).
const SESSIONS: &str = "SELECT id, title, created_at, updated_at FROM sessions WHERE id = ANY($1)";

/// The texts of messages `$1` (ids).
const TEXTS: &str = "SELECT id, content FROM messages WHERE id = ANY($1)";

/// Searches the sessions `search` may see (see
/// [`keel_platform::MemoryIndex::search_sessions`]).
pub(super) async fn search(
    pool: &PgPool,
    totals: &Totals,
    search: &SessionSearch,
) -> Result<Vec<SessionHit>, StoreError> {
    let limit = search.limit.min(MAX_SESSION_HITS);
    let terms = search_terms(&search.query);
    if terms.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let doing = || "cannot search sessions".to_string();
    let mut conn = pool.acquire().await.or_backend(doing)?;
    let Some(query) = Query::of(&mut conn, &terms).await? else {
        return Ok(Vec::new());
    };
    let rows = sqlx::query(MATCHES)
        .persistent(false)
        .bind(&query.tsquery)
        .bind(&query.lexemes)
        .bind(search.owner.as_deref())
        .bind(search.exclude_session.as_deref())
        .fetch_all(&mut *conn)
        .await
        .or_backend(doing)?;
    let matches = search::matches(&rows)?;
    if matches.is_empty() {
        return Ok(Vec::new());
    }
    let statistics = Statistics::read(&mut conn, &search::MESSAGES, totals, &query).await?;
    // Best first, so each session's first match is its best and its passages come in order.
    let mut sessions: Vec<(String, f64, Vec<i64>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (score, found) in search::ranked(&statistics, matches) {
        let i = *index.entry(found.label.clone()).or_insert_with(|| {
            sessions.push((found.label, score, Vec::new()));
            sessions.len() - 1
        });
        if sessions[i].2.len() < SNIPPETS_PER_SESSION {
            sessions[i].2.push(found.key);
        }
    }
    sessions.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    sessions.truncate(limit);

    let ids: Vec<&str> = sessions.iter().map(|(id, _, _)| id.as_str()).collect();
    let rows = sqlx::query(SESSIONS)
        .bind(&ids)
        .fetch_all(&mut *conn)
        .await
        .or_backend(doing)?;
    let place = Place::Table("sessions");
    let mut infos = HashMap::new();
    for row in &rows {
        let id: String = column(row, "id", place)?;
        let title: Option<String> = column(row, "title", place)?;
        let times = (
            time_column(row, "created_at", place)?,
            time_column(row, "updated_at", place)?,
        );
        infos.insert(id, (title, times));
    }
    let passages: Vec<i64> = sessions.iter().flat_map(|s| s.2.iter().copied()).collect();
    let rows = sqlx::query(TEXTS)
        .bind(&passages)
        .fetch_all(&mut *conn)
        .await
        .or_backend(doing)?;
    let place = Place::Table("messages");
    let mut texts = HashMap::new();
    for row in &rows {
        let id: i64 = column(row, "id", place)?;
        let content: String = column(row, "content", place)?;
        texts.insert(id, text::from_column(content));
    }
    Ok(sessions
        .into_iter()
        .filter_map(|(session_id, score, passages)| {
            let (title, (created_at, updated_at)) = infos.remove(&session_id)?;
            Some(SessionHit {
                session_id,
                title,
                created_at,
                updated_at,
                score,
                snippets: passages
                    .iter()
                    .filter_map(|id| texts.get(id))
                    .map(|text| search::snippet(text, &terms))
                    .collect(),
            })
        })
        .collect())
}
