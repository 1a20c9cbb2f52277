//! The SQLite store's platform identity: users' platform links, API keys, personas and the
//! token log report ([`PlatformStore`]); the API keys' SQL is here, the links' and personas'
//! in `user_links.rs` and `personas.rs`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::{StoreError, UserRecord};
use keel_platform::{ApiKeyRecord, Persona, PlatformLink, PlatformStore, UsageLine, UsageQuery};

use crate::batch::Batch;
use crate::codec::{
    Columns, Place, column, json_column, optional_json, optional_time_column, time_column,
    timestamp,
};
use crate::connections::Connections;
use crate::{OrBackend, SqliteStore};

/// Stores key `$1` (its hash `$2`).
pub(crate) const SAVE_KEY: &str = "INSERT INTO api_keys \
     (id, hash, user_id, admin, created_at, revoked_at, platforms) VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// The key with hash `$1`.
pub(crate) const KEY_BY_HASH: &str = "SELECT id, hash, user_id, admin, created_at, revoked_at, platforms \
     FROM api_keys WHERE hash = $1";

/// Every key, oldest first.
pub(crate) const LIST_KEYS: &str = "SELECT id, hash, user_id, admin, created_at, revoked_at, platforms \
     FROM api_keys ORDER BY created_at, id";

/// Revokes key `$1` at `$2` unless it was; returns a row when it did.
pub(crate) const REVOKE_KEY: &str =
    "UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL RETURNING 1";

/// Stores a key.
pub(crate) async fn save_key(conns: &Connections, key: &ApiKeyRecord) -> Result<(), StoreError> {
    let batch = Batch::of(SAVE_KEY)
        .bind(&key.id)
        .bind(&key.hash)
        .bind(key.user_id.as_deref())
        .bind(key.admin)
        .bind(timestamp(key.created_at))
        .bind(key.revoked_at.map(timestamp))
        .bind(optional_json(
            (!key.platforms.is_empty()).then_some(&key.platforms),
            "platforms",
        )?);
    conns
        .transaction(vec![batch])
        .await
        .map(drop)
        .or_backend(|| format!("cannot save API key `{}`", key.id))
}

/// The key with this hash.
pub(crate) async fn key_by_hash(
    conns: &Connections,
    hash: &str,
) -> Result<Option<ApiKeyRecord>, StoreError> {
    let row = sqlx::query(KEY_BY_HASH)
        .bind(hash)
        .fetch_optional(&mut *conns.reader().await?)
        .await
        .or_backend(|| "cannot read an API key".into())?;
    row.as_ref().map(decode_key).transpose()
}

/// Every key.
pub(crate) async fn list_keys(conns: &Connections) -> Result<Vec<ApiKeyRecord>, StoreError> {
    let rows = sqlx::query(LIST_KEYS)
        .fetch_all(&mut *conns.reader().await?)
        .await
        .or_backend(|| "cannot list API keys".into())?;
    rows.iter().map(decode_key).collect()
}

/// Revokes a key; false when it does not exist or was revoked already.
pub(crate) async fn revoke_key(
    conns: &Connections,
    id: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let batch = Batch::of(REVOKE_KEY).bind(id).bind(timestamp(at));
    let revoked = conns
        .transaction(vec![batch])
        .await
        .or_backend(|| format!("cannot revoke API key `{id}`"))?;
    Ok(revoked.is_some())
}

/// Decodes a row of [`KEY_BY_HASH`]'s columns.
pub(crate) fn decode_key(row: &impl Columns) -> Result<ApiKeyRecord, StoreError> {
    let place = Place::Table("api_keys");
    Ok(ApiKeyRecord {
        id: column(row, "id", place)?,
        hash: column(row, "hash", place)?,
        user_id: column(row, "user_id", place)?,
        admin: column(row, "admin", place)?,
        platforms: json_column(row, "platforms", place)?.unwrap_or_default(),
        created_at: time_column(row, "created_at", place)?,
        revoked_at: optional_time_column(row, "revoked_at", place)?,
    })
}

#[async_trait]
impl PlatformStore for SqliteStore {
    async fn link_user(&self, link: &PlatformLink) -> Result<(), StoreError> {
        crate::user_links::link(&self.conns, link).await
    }

    async fn user_by_link(
        &self,
        platform: &str,
        platform_user_id: &str,
    ) -> Result<Option<UserRecord>, StoreError> {
        crate::user_links::user_by_link(&self.conns, platform, platform_user_id).await
    }

    async fn user_links(&self, user_id: &str) -> Result<Vec<PlatformLink>, StoreError> {
        crate::user_links::links(&self.conns, user_id).await
    }

    async fn save_api_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        save_key(&self.conns, key).await
    }

    async fn api_key_by_hash(&self, hash: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        key_by_hash(&self.conns, hash).await
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        list_keys(&self.conns).await
    }

    async fn revoke_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        revoke_key(&self.conns, id, at).await
    }

    async fn save_persona(&self, persona: &Persona) -> Result<(), StoreError> {
        crate::personas::save(&self.conns, persona).await
    }

    async fn personas(&self) -> Result<Vec<Persona>, StoreError> {
        crate::personas::list(&self.conns).await
    }

    async fn usage_lines(&self, query: &UsageQuery) -> Result<Vec<UsageLine>, StoreError> {
        crate::token_log::usage_lines(&mut *self.conns.reader().await?, query).await
    }
}
