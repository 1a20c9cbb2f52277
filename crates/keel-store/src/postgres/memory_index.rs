//! keel-platform's `MemoryIndex` on PostgreSQL.

use async_trait::async_trait;
use keel_core::*;
use keel_platform::*;

use super::PgStore;

#[async_trait]
impl MemoryIndex for PgStore {
    async fn save_fact(&self, _fact: &Fact) -> Result<Option<String>, StoreError> {
        Err(super::not_yet("MemoryIndex::save_fact"))
    }

    async fn facts(&self, _user_id: &str, _with_superseded: bool) -> Result<Vec<Fact>, StoreError> {
        Err(super::not_yet("MemoryIndex::facts"))
    }

    async fn forget_fact(&self, _user_id: &str, _fact_id: &str) -> Result<bool, StoreError> {
        Err(super::not_yet("MemoryIndex::forget_fact"))
    }

    async fn search_facts(
        &self,
        _user_id: &str,
        _text: &str,
        _limit: usize,
    ) -> Result<Vec<FactHit>, StoreError> {
        Err(super::not_yet("MemoryIndex::search_facts"))
    }

    async fn search_sessions(
        &self,
        _search: &SessionSearch,
    ) -> Result<Vec<SessionHit>, StoreError> {
        Err(super::not_yet("MemoryIndex::search_sessions"))
    }
}
