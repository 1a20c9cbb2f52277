//! Known facts on PostgreSQL: the SQLite store's table and statements (`crate::facts`), the
//! supersession made safe for many workers, text with NUL stored escaped ([`super::text`]),
//! and full-text search over the `fts` column (`migrations_postgres/0004_memory_search.sql`)
//! ranked with BM25 ([`super::search`]).

use keel_core::StoreError;
use keel_platform::known_facts::{Fact, FactHit, query_terms};

use super::search::{self, Query, Statistics, Totals, matches_sql};
use super::text;
use crate::OrBackend;
use crate::codec::timestamp;
use crate::facts::{FORGET, FORGET_SUPERSEDED, INSERT, LIST, encode_embedding};

/// Two workers saving facts with one key for one user at once take turns: the second then
/// finds the first's fact current and supersedes it, so one fact per key stays current.
const LOCK_KEY: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(31) || $2, 36))";

/// The current fact of user `$2` with key `$3` is superseded by `$1` at `$4`; its id returned.
const SUPERSEDE: &str = "UPDATE facts SET superseded_by = $1, updated_at = $4 \
     WHERE user_id = $2 AND key = $3 AND superseded_by IS NULL RETURNING id";

/// The matches among user `$3`'s current facts, oldest first.
const MATCHES: &str = matches_sql!(
    "x.n",
    "x.id",
    "facts x",
    "AND x.user_id = $3 AND x.superseded_by IS NULL ORDER BY x.n"
);

/// Stores a fact (see [`keel_platform::MemoryIndex::save_fact`]).
pub(super) async fn save(pool: &sqlx::PgPool, fact: &Fact) -> Result<Option<String>, StoreError> {
    let doing = || format!("cannot keep fact `{}`", fact.id);
    let key = fact.key.as_deref().filter(|key| !key.is_empty());
    let at = timestamp(fact.created_at);
    let mut tx = pool.begin().await.or_backend(doing)?;
    let mut superseded = None;
    if let Some(key) = key {
        sqlx::query(LOCK_KEY)
            .bind(&fact.user_id)
            .bind(key)
            .execute(&mut *tx)
            .await
            .or_backend(doing)?;
        superseded = sqlx::query_scalar(SUPERSEDE)
            .bind(&fact.id)
            .bind(&fact.user_id)
            .bind(key)
            .bind(&at)
            .fetch_optional(&mut *tx)
            .await
            .or_backend(doing)?;
    }
    let inserted = sqlx::query(INSERT)
        .bind(&fact.id)
        .bind(&fact.user_id)
        .bind(key)
        .bind(&at)
        .bind(text::to_column(&fact.text))
        .bind(fact.source_session.as_deref())
        .bind(
            fact.source_seq
                .map(|seq| i64::try_from(seq).unwrap_or(i64::MAX)),
        )
        .bind(f64::from(fact.confidence))
        .bind(f64::from(fact.importance))
        .bind(fact.embedding.as_deref().map(encode_embedding))
        .execute(&mut *tx)
        .await;
    match inserted {
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            return Err(StoreError::Conflict(format!(
                "fact `{}` exists already",
                fact.id
            )));
        }
        other => other.or_backend(doing)?,
    };
    tx.commit().await.or_backend(doing)?;
    Ok(superseded)
}

/// A user's facts, oldest first (see [`keel_platform::MemoryIndex::facts`]).
pub(super) async fn list(
    pool: &sqlx::PgPool,
    user_id: &str,
    with_superseded: bool,
) -> Result<Vec<Fact>, StoreError> {
    let rows = sqlx::query(LIST)
        .bind(user_id)
        .bind(with_superseded)
        .fetch_all(pool)
        .await
        .or_backend(|| format!("cannot read the facts of `{user_id}`"))?;
    rows.iter()
        .map(|row| {
            let mut fact = crate::facts::decode(row)?;
            fact.text = text::from_column(std::mem::take(&mut fact.text));
            Ok(fact)
        })
        .collect()
}

/// Deletes a user's fact and what it superseded (see
/// [`keel_platform::MemoryIndex::forget_fact`]).
pub(super) async fn forget(
    pool: &sqlx::PgPool,
    user_id: &str,
    fact_id: &str,
) -> Result<bool, StoreError> {
    let doing = || format!("cannot forget fact `{fact_id}`");
    let mut tx = pool.begin().await.or_backend(doing)?;
    sqlx::query(FORGET_SUPERSEDED)
        .bind(user_id)
        .bind(fact_id)
        .execute(&mut *tx)
        .await
        .or_backend(doing)?;
    let forgotten = sqlx::query(FORGET)
        .bind(user_id)
        .bind(fact_id)
        .fetch_optional(&mut *tx)
        .await
        .or_backend(doing)?;
    tx.commit().await.or_backend(doing)?;
    Ok(forgotten.is_some())
}

/// Full-text search over a user's current facts, best first (see
/// [`keel_platform::MemoryIndex::search_facts`]).
pub(super) async fn search(
    pool: &sqlx::PgPool,
    totals: &Totals,
    user_id: &str,
    text: &str,
    limit: usize,
) -> Result<Vec<FactHit>, StoreError> {
    let terms = query_terms(text);
    if terms.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let doing = || format!("cannot search the facts of `{user_id}`");
    let mut conn = pool.acquire().await.or_backend(doing)?;
    let Some(query) = Query::of(&mut conn, &terms).await? else {
        return Ok(Vec::new());
    };
    let rows = sqlx::query(MATCHES)
        .persistent(false)
        .bind(&query.tsquery)
        .bind(&query.lexemes)
        .bind(user_id)
        .fetch_all(&mut *conn)
        .await
        .or_backend(doing)?;
    let matches = search::matches(&rows)?;
    if matches.is_empty() {
        return Ok(Vec::new());
    }
    let statistics = Statistics::read(&mut conn, &search::FACTS, totals, &query).await?;
    Ok(search::ranked(&statistics, matches)
        .into_iter()
        .take(limit)
        .map(|(score, found)| FactHit {
            fact_id: found.label,
            score,
        })
        .collect())
}
