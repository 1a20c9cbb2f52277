//! The SQLite store's platform identity: users' platform links, API keys, personas and the
//! token log report ([`PlatformStore`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::{StoreError, UserRecord};
use keel_platform::*;

use crate::{SqliteStore, daemon};

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
        daemon::save_key(&self.conns, key).await
    }

    async fn api_key_by_hash(&self, hash: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        daemon::key_by_hash(&self.conns, hash).await
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        daemon::list_keys(&self.conns).await
    }

    async fn revoke_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        daemon::revoke_key(&self.conns, id, at).await
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
