//! keel-platform's `PlatformStore` on PostgreSQL: platform links, API keys, personas and the
//! token log report, with the SQLite store's statements and decoders wherever the text is the
//! same. What differs: a persona's default flag is a boolean, and PostgreSQL sums `BIGINT`s
//! into `NUMERIC`, so the report casts its sums back.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::{StoreError, UserRecord};
use keel_platform::{ApiKeyRecord, Persona, PlatformLink, PlatformStore, UsageLine, UsageQuery};
use sqlx::error::ErrorKind;

use super::PgStore;
use crate::OrBackend;
use crate::codec::{self, optional_json, timestamp};
use crate::personas::{LIST as LIST_PERSONAS, SERVING, UPSERT as UPSERT_PERSONA};
use crate::platform::{KEY_BY_HASH, LIST_KEYS, REVOKE_KEY, SAVE_KEY, decode_key};
use crate::user_links::{LINK, LINKED_TO, LINKS, USER_BY_LINK, decode_link};

/// A new default persona takes the flag from the others first (`$1`: whether it is the
/// default).
const CLEAR_DEFAULT: &str = "UPDATE personas SET is_default = FALSE WHERE is_default AND $1";

/// The month `$1`'s token log summed per user and model (`$2`: the user, or NULL for every
/// user): `crate::token_log::SELECT_LINES` with its sums as `BIGINT`.
const SELECT_LINES: &str = "SELECT user_id, model, count(*) AS calls, \
     sum(input_tokens)::BIGINT AS input_tokens, sum(output_tokens)::BIGINT AS output_tokens, \
     sum(cache_read_tokens)::BIGINT AS cache_read_tokens, \
     sum(cache_write_tokens)::BIGINT AS cache_write_tokens, sum(cost) AS cost FROM token_log \
     WHERE month = $1 AND ($2::TEXT IS NULL OR user_id = $2) \
     GROUP BY user_id, model ORDER BY user_id NULLS FIRST, model";

impl PgStore {
    /// Links a platform identity (see [`PlatformStore::link_user`]): in one transaction, the
    /// link unless the identity has one, and whether it is this user's now.
    async fn link(&self, link: &PlatformLink) -> Result<(), StoreError> {
        let doing = || format!("cannot link {}:{}", link.platform, link.platform_user_id);
        let mut tx = self.pool.begin().await.or_backend(doing)?;
        sqlx::query(LINK)
            .bind(&link.platform)
            .bind(&link.platform_user_id)
            .bind(&link.user_id)
            .bind(link.username.as_deref())
            .bind(timestamp(link.created_at))
            .execute(&mut *tx)
            .await
            .or_backend(doing)?;
        let linked: bool = sqlx::query_scalar(LINKED_TO)
            .bind(&link.platform)
            .bind(&link.platform_user_id)
            .bind(&link.user_id)
            .fetch_one(&mut *tx)
            .await
            .or_backend(doing)?;
        tx.commit().await.or_backend(doing)?;
        if linked {
            return Ok(());
        }
        match self
            .user_by_link(&link.platform, &link.platform_user_id)
            .await?
        {
            Some(other) => Err(StoreError::Backend(format!(
                "{}:{} is linked to user `{}` already",
                link.platform, link.platform_user_id, other.id
            ))),
            None => Err(StoreError::NotFound(format!("user `{}`", link.user_id))),
        }
    }

    /// Creates or replaces a persona (see [`PlatformStore::save_persona`]); the unique indexes
    /// decide a race between two saves.
    async fn save_one_persona(&self, persona: &Persona) -> Result<(), StoreError> {
        if let Some(platform) = &persona.platform {
            let other: Option<String> = sqlx::query_scalar(SERVING)
                .bind(platform)
                .bind(persona.platform_server_id.as_deref())
                .bind(&persona.name)
                .fetch_optional(&self.pool)
                .await
                .or_backend(|| format!("cannot read personas serving {platform}"))?;
            if let Some(other) = other {
                return Err(persona.conflict_with(&other));
            }
        }
        let modules = optional_json(persona.allowed_modules.as_ref(), "allowed modules")?;
        let fail = |e: sqlx::Error| match e.as_database_error().map(|e| e.kind()) {
            Some(ErrorKind::UniqueViolation) => persona.conflict_with("another"),
            _ => StoreError::Backend(format!("cannot save persona `{}`: {e}", persona.name)),
        };
        let mut tx = self.pool.begin().await.map_err(fail)?;
        sqlx::query(CLEAR_DEFAULT)
            .bind(persona.is_default)
            .execute(&mut *tx)
            .await
            .map_err(fail)?;
        sqlx::query(UPSERT_PERSONA)
            .bind(&persona.name)
            .bind(&persona.system_prompt)
            .bind(persona.platform.as_deref())
            .bind(persona.platform_server_id.as_deref())
            .bind(persona.model.as_deref())
            .bind(persona.max_tokens.map(i64::from))
            .bind(modules)
            .bind(persona.temperature.map(f64::from))
            .bind(timestamp(persona.updated_at))
            .bind(persona.is_default)
            .execute(&mut *tx)
            .await
            .map_err(fail)?;
        tx.commit().await.map_err(fail)
    }
}

#[async_trait]
impl PlatformStore for PgStore {
    async fn link_user(&self, link: &PlatformLink) -> Result<(), StoreError> {
        self.link(link).await
    }

    async fn user_by_link(
        &self,
        platform: &str,
        platform_user_id: &str,
    ) -> Result<Option<UserRecord>, StoreError> {
        let row = sqlx::query(USER_BY_LINK)
            .bind(platform)
            .bind(platform_user_id)
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| format!("cannot read the link {platform}:{platform_user_id}"))?;
        row.as_ref().map(codec::decode_user).transpose()
    }

    async fn user_links(&self, user_id: &str) -> Result<Vec<PlatformLink>, StoreError> {
        let rows = sqlx::query(LINKS)
            .bind(user_id)
            .fetch_all(&self.pool)
            .await
            .or_backend(|| format!("cannot read the links of user `{user_id}`"))?;
        rows.iter().map(|row| decode_link(row, user_id)).collect()
    }

    async fn save_api_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        let platforms = optional_json(
            (!key.platforms.is_empty()).then_some(&key.platforms),
            "platforms",
        )?;
        sqlx::query(SAVE_KEY)
            .bind(&key.id)
            .bind(&key.hash)
            .bind(key.user_id.as_deref())
            .bind(key.admin)
            .bind(timestamp(key.created_at))
            .bind(key.revoked_at.map(timestamp))
            .bind(platforms)
            .execute(&self.pool)
            .await
            .map(drop)
            .or_backend(|| format!("cannot save API key `{}`", key.id))
    }

    async fn api_key_by_hash(&self, hash: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let row = sqlx::query(KEY_BY_HASH)
            .bind(hash)
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| "cannot read an API key".into())?;
        row.as_ref().map(decode_key).transpose()
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let rows = sqlx::query(LIST_KEYS)
            .fetch_all(&self.pool)
            .await
            .or_backend(|| "cannot list API keys".into())?;
        rows.iter().map(decode_key).collect()
    }

    async fn revoke_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let revoked = sqlx::query(REVOKE_KEY)
            .bind(id)
            .bind(timestamp(at))
            .fetch_optional(&self.pool)
            .await
            .or_backend(|| format!("cannot revoke API key `{id}`"))?;
        Ok(revoked.is_some())
    }

    async fn save_persona(&self, persona: &Persona) -> Result<(), StoreError> {
        self.save_one_persona(persona).await
    }

    async fn personas(&self) -> Result<Vec<Persona>, StoreError> {
        let rows = sqlx::query(LIST_PERSONAS)
            .fetch_all(&self.pool)
            .await
            .or_backend(|| "cannot read personas".to_string())?;
        rows.iter().map(crate::personas::decode).collect()
    }

    async fn usage_lines(&self, query: &UsageQuery) -> Result<Vec<UsageLine>, StoreError> {
        let rows = sqlx::query(SELECT_LINES)
            .bind(&query.month)
            .bind(query.user_id.as_deref())
            .fetch_all(&self.pool)
            .await
            .or_backend(|| format!("cannot read the token log of {}", query.month))?;
        rows.iter().map(crate::token_log::decode_line).collect()
    }
}
