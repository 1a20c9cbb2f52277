//! Known facts on SQL (`migrations/0017_known_facts.sql`): a table per fact, an FTS5 index
//! over their text searched with BM25, and embeddings as BLOBs of little-endian `f32`s.

use keel_core::StoreError;
use keel_platform::known_facts::{Fact, FactHit, fts_match};

use crate::OrBackend;
use crate::batch::Batch;
use crate::codec::{Columns, Place, column, time_column, timestamp};
use crate::connections::Connections;

/// The current fact the new one (`$1`, of user `$2`, key `$3`, at `$4`) supersedes.
const SUPERSEDE: &str = "UPDATE facts SET superseded_by = $1, updated_at = $4 \
     WHERE user_id = $2 AND key = $3 AND superseded_by IS NULL";

/// Its parameters follow [`SUPERSEDE`]'s in one batch (the PostgreSQL store's too).
pub(crate) const INSERT: &str = "INSERT INTO facts (id, user_id, key, created_at, text, source_session, \
     source_seq, confidence, importance, updated_at, embedding) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $4, $10)";

/// A user's facts, oldest first; the superseded ones too when `$2`.
pub(crate) const LIST: &str = "SELECT id, user_id, text, key, source_session, source_seq, confidence, \
     importance, created_at, updated_at, superseded_by, embedding FROM facts \
     WHERE user_id = $1 AND ($2 OR superseded_by IS NULL) ORDER BY n";

const CURRENT_WITH_KEY: &str =
    "SELECT id FROM facts WHERE user_id = $1 AND key = $2 AND superseded_by IS NULL";

/// What the fact `$2` of user `$1` superseded goes with it (on both stores)...
pub(crate) const FORGET_SUPERSEDED: &str =
    "DELETE FROM facts WHERE user_id = $1 AND superseded_by = $2";
/// ...then the fact itself.
pub(crate) const FORGET: &str = "DELETE FROM facts WHERE user_id = $1 AND id = $2 RETURNING 1";

/// The best matches among a user's current facts: FTS5's `bm25()` is lower for better
/// matches, so it is negated into a score. `CROSS JOIN` makes the index the outer loop: left
/// to itself the planner walks every fact of the user through `facts_by_user` and asks the
/// index about each (100,000 lookups for a user with 100,000 facts).
const SEARCH: &str = "SELECT f.id AS id, -bm25(facts_fts) AS score FROM facts_fts \
     CROSS JOIN facts f ON f.n = facts_fts.rowid \
     WHERE facts_fts MATCH $1 AND f.user_id = $2 AND f.superseded_by IS NULL \
     ORDER BY bm25(facts_fts), f.n LIMIT $3";

/// Stores a fact (see [`keel_core::Store::save_fact`]).
pub(crate) async fn save(conns: &Connections, fact: &Fact) -> Result<Option<String>, StoreError> {
    let key = fact.key.as_deref().filter(|key| !key.is_empty());
    let superseded: Option<String> = match key {
        Some(key) => sqlx::query_scalar(CURRENT_WITH_KEY)
            .bind(&fact.user_id)
            .bind(key)
            .fetch_optional(&mut *conns.reader().await?)
            .await
            .or_backend(|| format!("cannot read the facts of `{}`", fact.user_id))?,
        None => None,
    };
    let source_seq = fact
        .source_seq
        .map(|seq| i64::try_from(seq).unwrap_or(i64::MAX));
    let mut batch = Batch::of(SUPERSEDE)
        .bind(&fact.id)
        .bind(&fact.user_id)
        .bind(key)
        .bind(timestamp(fact.created_at));
    batch.end_statement().sql(INSERT);
    batch.param(&fact.text);
    batch.param(fact.source_session.as_deref());
    batch.param(source_seq);
    batch.param(f64::from(fact.confidence));
    batch.param(f64::from(fact.importance));
    batch.param(fact.embedding.as_deref().map(encode_embedding));
    conns.transaction(vec![batch]).await.map_err(|e| {
        if e.contains("UNIQUE") {
            StoreError::Conflict(format!("fact `{}` exists already", fact.id))
        } else {
            StoreError::Backend(format!("cannot keep fact `{}`: {e}", fact.id))
        }
    })?;
    Ok(superseded)
}

/// A user's facts, oldest first (see [`keel_core::Store::facts`]).
pub(crate) async fn list(
    conns: &Connections,
    user_id: &str,
    with_superseded: bool,
) -> Result<Vec<Fact>, StoreError> {
    let rows = sqlx::query(LIST)
        .bind(user_id)
        .bind(with_superseded)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot read the facts of `{user_id}`"))?;
    rows.iter().map(decode).collect()
}

/// Deletes a user's fact (see [`keel_core::Store::forget_fact`]).
pub(crate) async fn forget(
    conns: &Connections,
    user_id: &str,
    fact_id: &str,
) -> Result<bool, StoreError> {
    let mut batch = Batch::of(FORGET_SUPERSEDED).bind(user_id).bind(fact_id);
    batch.end_statement().sql(FORGET);
    let returned = conns
        .transaction(vec![batch])
        .await
        .map_err(|e| StoreError::Backend(format!("cannot forget fact `{fact_id}`: {e}")))?;
    Ok(returned.is_some())
}

/// Full-text search over a user's current facts (see [`keel_core::Store::search_facts`]).
pub(crate) async fn search(
    conns: &Connections,
    user_id: &str,
    text: &str,
    limit: usize,
) -> Result<Vec<FactHit>, StoreError> {
    let Some(query) = fts_match(text) else {
        return Ok(Vec::new());
    };
    let rows = sqlx::query(SEARCH)
        .bind(query)
        .bind(user_id)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| format!("cannot search the facts of `{user_id}`"))?;
    let place = Place::Table("facts");
    rows.iter()
        .map(|row| {
            Ok(FactHit {
                fact_id: column(row, "id", place)?,
                score: column(row, "score", place)?,
            })
        })
        .collect()
}

/// Decodes a row of [`LIST`] (on either store).
pub(crate) fn decode(row: &impl Columns) -> Result<Fact, StoreError> {
    let place = Place::Table("facts");
    let source_seq: Option<i64> = column(row, "source_seq", place)?;
    let confidence: f64 = column(row, "confidence", place)?;
    let importance: f64 = column(row, "importance", place)?;
    let embedding: Option<Vec<u8>> = column(row, "embedding", place)?;
    Ok(Fact {
        id: column(row, "id", place)?,
        user_id: column(row, "user_id", place)?,
        text: column(row, "text", place)?,
        key: column(row, "key", place)?,
        source_session: column(row, "source_session", place)?,
        source_seq: source_seq.and_then(|seq| u64::try_from(seq).ok()),
        confidence: confidence as f32,
        importance: importance as f32,
        created_at: time_column(row, "created_at", place)?,
        updated_at: time_column(row, "updated_at", place)?,
        superseded_by: column(row, "superseded_by", place)?,
        embedding: embedding
            .map(|bytes| decode_embedding(&bytes))
            .transpose()?,
    })
}

/// An embedding as stored: little-endian `f32`s, one after the other.
pub(crate) fn encode_embedding(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn decode_embedding(bytes: &[u8]) -> Result<Vec<f32>, StoreError> {
    if !bytes.len().is_multiple_of(4) {
        return Err(StoreError::Corrupt(format!(
            "an embedding of {} bytes is not a list of f32",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}
