//! Messages as memories on PostgreSQL (the SQLite store's `crate::message_memory`): full-text
//! matches over the messages' `fts` column ranked with BM25 ([`super::search`]), an owner's most
//! important messages through the partial index `messages_important`, model scores written into
//! a message's metadata and its `importance` column together, and embeddings beside the
//! messages.

use std::collections::HashMap;

use keel_core::StoreError;
use keel_platform::known_facts::{MessageMemory, query_terms};
use sqlx::PgPool;
use sqlx::postgres::PgRow;

use super::search::{self, Query, Statistics, Totals, matches_sql};
use super::text;
use crate::OrBackend;
use crate::codec::sql_limit;
use crate::facts::{decode_embedding, encode_embedding};
use crate::message_memory;

/// The matches among the messages of owner `$3`'s sessions (no owner when NULL) other than
/// `$4`, scored at least `$5` (unscored ones count as 0.3), oldest first.
const MATCHES: &str = matches_sql!(
    "x.id",
    "x.session_id",
    "messages x JOIN sessions s ON s.id = x.session_id",
    "AND (s.owner = $3 OR ($3::text IS NULL AND s.owner IS NULL)) \
     AND s.id IS DISTINCT FROM $4 AND coalesce(x.importance, 0.3) >= $5 ORDER BY x.id"
);

/// The messages `$1` (ids), as memories.
const BY_ID: &str = "SELECT id, session_id, seq, content, importance, created_at, \
     0.0::float8 AS score FROM messages WHERE id = ANY($1)";

/// Owner `$1`'s messages scored at least `$2` (and 0.9: the partial index), newest first.
const IMPORTANT: &str = "SELECT m.session_id AS session_id, m.seq AS seq, \
     m.content AS content, m.importance AS importance, m.created_at AS created_at, \
     0.0::float8 AS score FROM messages m JOIN sessions s ON s.id = m.session_id \
     WHERE m.importance >= 0.9 AND m.importance >= $2 AND s.owner IS NOT DISTINCT FROM $1 \
     AND s.id IS DISTINCT FROM $3 ORDER BY m.id DESC LIMIT $4";

/// The metadata of messages `$2` (seqs) of session `$1`, locked until they are rescored.
const METAS: &str = "SELECT seq, meta FROM messages WHERE session_id = $1 AND seq = ANY($2) \
     ORDER BY seq FOR UPDATE";

/// A message's new metadata and the importance read from it, in step.
const SET_IMPORTANCE: &str =
    "UPDATE messages SET meta = $3, importance = $4 WHERE session_id = $1 AND seq = $2";

/// Keeps (or replaces) message `$2` of session `$1`'s embedding.
const SAVE_EMBEDDING: &str = "INSERT INTO message_embeddings (message, model, vector) \
     SELECT id, $3, $4 FROM messages WHERE session_id = $1 AND seq = $2 \
     ON CONFLICT (message) DO UPDATE SET model = excluded.model, vector = excluded.vector";

/// Owner `$1`'s embedded messages, oldest first.
const EMBEDDED: &str = "SELECT m.session_id AS session_id, m.seq AS seq, m.content AS content, \
     m.importance AS importance, m.created_at AS created_at, 0.0::float8 AS score, \
     e.vector AS vector FROM message_embeddings e JOIN messages m ON m.id = e.message \
     JOIN sessions s ON s.id = m.session_id WHERE s.owner IS NOT DISTINCT FROM $1 \
     ORDER BY e.message";

/// Full-text search over an owner's messages (see
/// [`keel_platform::MemoryIndex::search_messages`]).
pub(super) async fn search(
    pool: &PgPool,
    totals: &Totals,
    owner: Option<&str>,
    text: &str,
    exclude_session: Option<&str>,
    min_importance: f32,
    limit: usize,
) -> Result<Vec<MessageMemory>, StoreError> {
    let terms = query_terms(text);
    if terms.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let doing = || "cannot search the messages".to_string();
    let mut conn = pool.acquire().await.or_backend(doing)?;
    let Some(query) = Query::of(&mut conn, &terms).await? else {
        return Ok(Vec::new());
    };
    let rows = sqlx::query(MATCHES)
        .persistent(false)
        .bind(&query.tsquery)
        .bind(&query.lexemes)
        .bind(owner)
        .bind(exclude_session)
        .bind(f64::from(min_importance))
        .fetch_all(&mut *conn)
        .await
        .or_backend(doing)?;
    let matches = search::matches(&rows)?;
    if matches.is_empty() {
        return Ok(Vec::new());
    }
    let statistics = Statistics::read(&mut conn, &search::MESSAGES, totals, &query).await?;
    let best: Vec<(f64, i64)> = search::ranked(&statistics, matches)
        .into_iter()
        .take(limit)
        .map(|(score, found)| (score, found.key))
        .collect();
    let ids: Vec<i64> = best.iter().map(|(_, id)| *id).collect();
    let rows = sqlx::query(BY_ID)
        .bind(&ids)
        .fetch_all(&mut *conn)
        .await
        .or_backend(doing)?;
    let mut by_id = HashMap::new();
    for row in &rows {
        by_id.insert(search::get::<i64>(row, "id")?, decode(row)?);
    }
    Ok(best
        .into_iter()
        .filter_map(|(score, id)| {
            let mut memory = by_id.remove(&id)?;
            memory.score = score;
            Some(memory)
        })
        .collect())
}

/// An owner's most important messages (see [`keel_platform::MemoryIndex::important_messages`]).
pub(super) async fn important(
    pool: &PgPool,
    owner: Option<&str>,
    min_importance: f32,
    exclude_session: Option<&str>,
    limit: usize,
) -> Result<Vec<MessageMemory>, StoreError> {
    let rows = sqlx::query(IMPORTANT)
        .bind(owner)
        .bind(f64::from(min_importance))
        .bind(exclude_session)
        .bind(sql_limit(limit))
        .fetch_all(pool)
        .await
        .or_backend(|| "cannot read the important messages".to_string())?;
    rows.iter().map(decode).collect()
}

/// New scores for messages of a session (see
/// [`keel_platform::MemoryIndex::set_message_importance`]): each kept in the message's metadata
/// and its `importance` column in one transaction; metadata that is not a JSON object is left
/// alone, as on SQLite.
pub(super) async fn set_importance(
    pool: &PgPool,
    session_id: &str,
    scores: &[(u64, f32)],
) -> Result<(), StoreError> {
    let doing = || "cannot score the messages".to_string();
    let seqs: Vec<i64> = scores
        .iter()
        .map(|(seq, _)| sql_limit(*seq as usize))
        .collect();
    let mut tx = pool.begin().await.or_backend(doing)?;
    let rows = sqlx::query(METAS)
        .bind(session_id)
        .bind(&seqs)
        .fetch_all(&mut *tx)
        .await
        .or_backend(doing)?;
    let mut metas = HashMap::new();
    for row in &rows {
        let seq: i64 = search::get(row, "seq")?;
        let meta: Option<String> = search::get(row, "meta")?;
        metas.insert(seq, meta);
    }
    for (&seq, &(_, score)) in seqs.iter().zip(scores) {
        let Some(meta) = metas.get(&seq) else {
            continue;
        };
        let score = f64::from(score.clamp(0.0, 1.0));
        let Some(meta) = rescored(meta.as_deref(), score) else {
            continue;
        };
        sqlx::query(SET_IMPORTANCE)
            .bind(session_id)
            .bind(seq)
            .bind(meta)
            .bind(score)
            .execute(&mut *tx)
            .await
            .or_backend(doing)?;
    }
    tx.commit().await.or_backend(doing)
}

/// `meta` with its importance set to `score`; `None` when it is not a JSON object (SQLite's
/// `json_set` changes nothing there, and the store leaves such metadata alone).
fn rescored(meta: Option<&str>, score: f64) -> Option<String> {
    let mut value = match meta {
        None => serde_json::Value::Object(Default::default()),
        Some(text) => serde_json::from_str(text).ok()?,
    };
    value
        .as_object_mut()?
        .insert("importance".into(), serde_json::json!(score));
    Some(value.to_string())
}

/// Keeps message embeddings (see [`keel_platform::MemoryIndex::save_message_embeddings`]).
pub(super) async fn save_embeddings(
    pool: &PgPool,
    session_id: &str,
    model: &str,
    vectors: &[(u64, Vec<f32>)],
) -> Result<(), StoreError> {
    let doing = || "cannot keep message embeddings".to_string();
    // By seq, so two workers keeping embeddings of one session lock its rows in one order.
    let mut vectors: Vec<&(u64, Vec<f32>)> = vectors.iter().collect();
    vectors.sort_by_key(|(seq, _)| *seq);
    let mut tx = pool.begin().await.or_backend(doing)?;
    for (seq, vector) in vectors {
        sqlx::query(SAVE_EMBEDDING)
            .bind(session_id)
            .bind(sql_limit(*seq as usize))
            .bind(model)
            .bind(encode_embedding(vector))
            .execute(&mut *tx)
            .await
            .or_backend(doing)?;
    }
    tx.commit().await.or_backend(doing)
}

/// An owner's embedded messages (see [`keel_platform::MemoryIndex::message_embeddings`]).
pub(super) async fn embedded(
    pool: &PgPool,
    owner: Option<&str>,
) -> Result<Vec<(MessageMemory, Vec<f32>)>, StoreError> {
    let rows = sqlx::query(EMBEDDED)
        .bind(owner)
        .fetch_all(pool)
        .await
        .or_backend(|| "cannot read the message embeddings".to_string())?;
    rows.iter()
        .map(|row| {
            let vector: Vec<u8> = search::get(row, "vector")?;
            Ok((decode(row)?, decode_embedding(&vector)?))
        })
        .collect()
}

/// A row of `session_id, seq, content, importance, created_at, score` as SQLite's decoder reads
/// it, with its text as it was written (see [`super::text`]).
fn decode(row: &PgRow) -> Result<MessageMemory, StoreError> {
    let mut memory = message_memory::decode(row)?;
    memory.text = text::from_column(std::mem::take(&mut memory.text));
    Ok(memory)
}

#[cfg(test)]
mod tests {
    use super::rescored;

    #[test]
    fn a_score_goes_into_json_objects_only() {
        assert_eq!(rescored(None, 0.5).unwrap(), r#"{"importance":0.5}"#);
        let kept = rescored(Some(r#"{"pinned":true,"importance":0.1}"#), 1.0).unwrap();
        assert!(kept.contains(r#""pinned":true"#) && kept.contains(r#""importance":1.0"#));
        assert_eq!(rescored(Some("{broken"), 0.5), None);
        assert_eq!(rescored(Some("[1]"), 0.5), None);
    }
}
