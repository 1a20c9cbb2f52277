//! Messages as memories on SQL (`migrations/0018_message_memory.sql`): full-text matches over
//! the session-search index with each message's importance, a user's most important messages
//! through a partial index, model scores written into the messages' metadata, and embeddings
//! kept beside the messages (see [`keel_platform::known_facts::MessageMemory`]).

use keel_core::StoreError;
use keel_platform::known_facts::{MessageMemory, fts_match};

use crate::OrBackend;
use crate::batch::Batch;
use crate::codec::{Columns, Place, column, time_column};
use crate::connections::Connections;
use crate::facts::{decode_embedding, encode_embedding};

/// What plain talk scores: the importance of a message stored before scores were kept.
const UNSCORED: f64 = 0.3;

/// The best matches among the messages of owner `$2`'s sessions other than `$3` scored at
/// least `$5`. `CROSS JOIN` makes the index the outer loop (see facts' search).
const SEARCH: &str = "SELECT m.session_id AS session_id, m.seq AS seq, m.content AS content, \
     CAST(m.importance AS REAL) AS importance, m.created_at AS created_at, -bm25(messages_fts) AS score \
     FROM messages_fts CROSS JOIN messages m ON m.rowid = messages_fts.rowid \
     JOIN sessions s ON s.id = m.session_id \
     WHERE messages_fts MATCH $1 AND s.owner IS $2 AND s.id IS NOT $3 \
     AND coalesce(m.importance, 0.3) >= $5 \
     ORDER BY bm25(messages_fts), m.rowid LIMIT $4";

/// Owner `$1`'s messages scored at least `$2`, newest first, through `messages_important`:
/// left to itself the planner walks every message newest first for the order, reading each
/// one's metadata, and a user with no important message costs a scan of all of them.
const IMPORTANT: &str = "SELECT m.session_id AS session_id, m.seq AS seq, \
     m.content AS content, \
     CAST(m.importance AS REAL) AS importance, m.created_at AS created_at, 0.0 AS score \
     FROM messages m INDEXED BY messages_important JOIN sessions s ON s.id = m.session_id \
     WHERE m.importance >= 0.9 AND m.importance >= $2 AND s.owner IS $1 AND s.id IS NOT $3 \
     ORDER BY m.rowid DESC LIMIT $4";

/// A message's new score, kept in its metadata (left alone when that is not JSON).
const SET_IMPORTANCE: &str = "UPDATE messages \
     SET meta = json_set(coalesce(meta, '{}'), '$.importance', $3) \
     WHERE session_id = $1 AND seq = $2 AND (meta IS NULL OR json_valid(meta))";

const SAVE_EMBEDDING: &str = "INSERT OR REPLACE INTO message_embeddings (message, model, vector) \
     SELECT rowid, $3, $4 FROM messages WHERE session_id = $1 AND seq = $2";

/// Owner `$1`'s embedded messages, oldest first.
const EMBEDDED: &str = "SELECT m.session_id AS session_id, m.seq AS seq, m.content AS content, \
     CAST(m.importance AS REAL) AS importance, m.created_at AS created_at, 0.0 AS score, e.vector AS vector \
     FROM message_embeddings e JOIN messages m ON m.rowid = e.message \
     JOIN sessions s ON s.id = m.session_id WHERE s.owner IS $1 ORDER BY e.message";

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Full-text search over an owner's messages (see [`keel_core::Store::search_messages`]).
pub(crate) async fn search(
    conns: &Connections,
    owner: Option<&str>,
    text: &str,
    exclude_session: Option<&str>,
    min_importance: f32,
    limit_to: usize,
) -> Result<Vec<MessageMemory>, StoreError> {
    let Some(query) = fts_match(text) else {
        return Ok(Vec::new());
    };
    if limit_to == 0 {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(SEARCH)
        .bind(query)
        .bind(owner)
        .bind(exclude_session)
        .bind(limit(limit_to))
        .bind(f64::from(min_importance))
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| "cannot search the messages".to_string())?;
    rows.iter().map(decode).collect()
}

/// An owner's most important messages (see [`keel_core::Store::important_messages`]).
pub(crate) async fn important(
    conns: &Connections,
    owner: Option<&str>,
    min_importance: f32,
    exclude_session: Option<&str>,
    limit_to: usize,
) -> Result<Vec<MessageMemory>, StoreError> {
    let rows = sqlx::query(IMPORTANT)
        .bind(owner)
        .bind(f64::from(min_importance))
        .bind(exclude_session)
        .bind(limit(limit_to))
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| "cannot read the important messages".to_string())?;
    rows.iter().map(decode).collect()
}

/// New scores for messages of a session (see [`keel_core::Store::set_message_importance`]).
pub(crate) async fn set_importance(
    conns: &Connections,
    session_id: &str,
    scores: &[(u64, f32)],
) -> Result<(), StoreError> {
    let mut batches = Vec::new();
    for &(seq, score) in scores {
        let score = f64::from(score.clamp(0.0, 1.0));
        batches.push(
            Batch::of(SET_IMPORTANCE)
                .bind(session_id)
                .bind(limit(seq as usize))
                .bind(score),
        );
    }
    conns
        .transaction(batches)
        .await
        .map_err(|e| StoreError::Backend(format!("cannot score the messages: {e}")))?;
    Ok(())
}

/// Keeps message embeddings (see [`keel_core::Store::save_message_embeddings`]).
pub(crate) async fn save_embeddings(
    conns: &Connections,
    session_id: &str,
    model: &str,
    vectors: &[(u64, Vec<f32>)],
) -> Result<(), StoreError> {
    let mut batches = Vec::new();
    for (seq, vector) in vectors {
        batches.push(
            Batch::of(SAVE_EMBEDDING)
                .bind(session_id)
                .bind(limit(*seq as usize))
                .bind(model)
                .bind(encode_embedding(vector)),
        );
    }
    conns
        .transaction(batches)
        .await
        .map_err(|e| StoreError::Backend(format!("cannot keep message embeddings: {e}")))?;
    Ok(())
}

/// An owner's embedded messages (see [`keel_core::Store::message_embeddings`]).
pub(crate) async fn embedded(
    conns: &Connections,
    owner: Option<&str>,
) -> Result<Vec<(MessageMemory, Vec<f32>)>, StoreError> {
    let rows = sqlx::query(EMBEDDED)
        .bind(owner)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| "cannot read the message embeddings".to_string())?;
    rows.iter()
        .map(|row| {
            let vector: Vec<u8> = column(row, "vector", Place::Table("message_embeddings"))?;
            Ok((decode(row)?, decode_embedding(&vector)?))
        })
        .collect()
}

/// Decodes a row of `session_id, seq, content, importance, created_at, score` (on either
/// store): importance as a float, NULL when unscored.
pub(crate) fn decode(row: &impl Columns) -> Result<MessageMemory, StoreError> {
    let place = Place::Table("messages");
    let seq: i64 = column(row, "seq", place)?;
    let importance: Option<f64> = column(row, "importance", place)?;
    Ok(MessageMemory {
        session_id: column(row, "session_id", place)?,
        seq: u64::try_from(seq).unwrap_or_default(),
        text: column(row, "content", place)?,
        importance: importance.unwrap_or(UNSCORED).clamp(0.0, 1.0) as f32,
        at: time_column(row, "created_at", place)?,
        score: column(row, "score", place)?,
    })
}
