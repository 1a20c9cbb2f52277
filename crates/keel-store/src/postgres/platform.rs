//! keel-platform's `PlatformStore` on PostgreSQL.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use keel_core::*;
use keel_platform::*;

use super::PgStore;

#[async_trait]
impl PlatformStore for PgStore {
    async fn link_user(&self, _link: &PlatformLink) -> Result<(), StoreError> {
        Err(super::not_yet("PlatformStore::link_user"))
    }

    async fn user_by_link(
        &self,
        _platform: &str,
        _platform_user_id: &str,
    ) -> Result<Option<UserRecord>, StoreError> {
        Err(super::not_yet("PlatformStore::user_by_link"))
    }

    async fn user_links(&self, _user_id: &str) -> Result<Vec<PlatformLink>, StoreError> {
        Err(super::not_yet("PlatformStore::user_links"))
    }

    async fn save_api_key(&self, _key: &ApiKeyRecord) -> Result<(), StoreError> {
        Err(super::not_yet("PlatformStore::save_api_key"))
    }

    async fn api_key_by_hash(&self, _hash: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        Err(super::not_yet("PlatformStore::api_key_by_hash"))
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        Err(super::not_yet("PlatformStore::list_api_keys"))
    }

    async fn revoke_api_key(&self, _id: &str, _at: DateTime<Utc>) -> Result<bool, StoreError> {
        Err(super::not_yet("PlatformStore::revoke_api_key"))
    }

    async fn save_persona(&self, _persona: &Persona) -> Result<(), StoreError> {
        Err(super::not_yet("PlatformStore::save_persona"))
    }

    async fn personas(&self) -> Result<Vec<Persona>, StoreError> {
        Err(super::not_yet("PlatformStore::personas"))
    }

    async fn usage_lines(&self, _query: &UsageQuery) -> Result<Vec<UsageLine>, StoreError> {
        Err(super::not_yet("PlatformStore::usage_lines"))
    }
}
