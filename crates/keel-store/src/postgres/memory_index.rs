//! keel-platform's `MemoryIndex` on PostgreSQL: known facts (`facts.rs`), messages as memories
//! (`message_memory.rs`) and session search (`session_search.rs`), all ranked with BM25 over
//! PostgreSQL's full-text index (`search.rs`).

use async_trait::async_trait;
use keel_core::StoreError;
use keel_platform::{Fact, FactHit, MemoryIndex, MessageMemory, SessionHit, SessionSearch};

use super::PgStore;
use super::{facts, message_memory, session_search};

#[async_trait]
impl MemoryIndex for PgStore {
    async fn save_fact(&self, fact: &Fact) -> Result<Option<String>, StoreError> {
        facts::save(&self.pool, fact).await
    }

    async fn facts(&self, user_id: &str, with_superseded: bool) -> Result<Vec<Fact>, StoreError> {
        facts::list(&self.pool, user_id, with_superseded).await
    }

    async fn forget_fact(&self, user_id: &str, fact_id: &str) -> Result<bool, StoreError> {
        facts::forget(&self.pool, user_id, fact_id).await
    }

    async fn search_facts(
        &self,
        user_id: &str,
        text: &str,
        limit: usize,
    ) -> Result<Vec<FactHit>, StoreError> {
        facts::search(&self.pool, &self.search_totals, user_id, text, limit).await
    }

    async fn search_sessions(&self, search: &SessionSearch) -> Result<Vec<SessionHit>, StoreError> {
        session_search::search(&self.pool, &self.search_totals, search).await
    }

    async fn search_messages(
        &self,
        owner: Option<&str>,
        text: &str,
        exclude_session: Option<&str>,
        min_importance: f32,
        limit: usize,
    ) -> Result<Vec<MessageMemory>, StoreError> {
        message_memory::search(
            &self.pool,
            &self.search_totals,
            owner,
            text,
            exclude_session,
            min_importance,
            limit,
        )
        .await
    }

    async fn important_messages(
        &self,
        owner: Option<&str>,
        min_importance: f32,
        exclude_session: Option<&str>,
        limit: usize,
    ) -> Result<Vec<MessageMemory>, StoreError> {
        message_memory::important(&self.pool, owner, min_importance, exclude_session, limit).await
    }

    async fn set_message_importance(
        &self,
        session_id: &str,
        scores: &[(u64, f32)],
    ) -> Result<(), StoreError> {
        message_memory::set_importance(&self.pool, session_id, scores).await
    }

    async fn save_message_embeddings(
        &self,
        session_id: &str,
        model: &str,
        vectors: &[(u64, Vec<f32>)],
    ) -> Result<(), StoreError> {
        message_memory::save_embeddings(&self.pool, session_id, model, vectors).await
    }

    async fn message_embeddings(
        &self,
        owner: Option<&str>,
    ) -> Result<Vec<(MessageMemory, Vec<f32>)>, StoreError> {
        message_memory::embedded(&self.pool, owner).await
    }
}
