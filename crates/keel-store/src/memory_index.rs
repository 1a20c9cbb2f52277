//! What the SQLite store finds for memory: known facts, messages as memories and session search
//! ([`MemoryIndex`]).

use async_trait::async_trait;
use keel_core::StoreError;
use keel_platform::{Fact, FactHit, MemoryIndex, MessageMemory, SessionHit, SessionSearch};

use crate::SqliteStore;

#[async_trait]
impl MemoryIndex for SqliteStore {
    async fn save_fact(&self, fact: &Fact) -> Result<Option<String>, StoreError> {
        crate::facts::save(&self.conns, fact).await
    }

    async fn facts(&self, user_id: &str, with_superseded: bool) -> Result<Vec<Fact>, StoreError> {
        crate::facts::list(&self.conns, user_id, with_superseded).await
    }

    async fn forget_fact(&self, user_id: &str, fact_id: &str) -> Result<bool, StoreError> {
        crate::facts::forget(&self.conns, user_id, fact_id).await
    }

    async fn search_facts(
        &self,
        user_id: &str,
        text: &str,
        limit: usize,
    ) -> Result<Vec<FactHit>, StoreError> {
        crate::facts::search(&self.conns, user_id, text, limit).await
    }

    async fn search_sessions(&self, search: &SessionSearch) -> Result<Vec<SessionHit>, StoreError> {
        crate::session_search::search(&mut *self.conns.reader().await?, search).await
    }

    async fn search_messages(
        &self,
        owner: Option<&str>,
        text: &str,
        exclude_session: Option<&str>,
        min_importance: f32,
        limit: usize,
    ) -> Result<Vec<MessageMemory>, StoreError> {
        crate::message_memory::search(
            &self.conns,
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
        crate::message_memory::important(&self.conns, owner, min_importance, exclude_session, limit)
            .await
    }

    async fn set_message_importance(
        &self,
        session_id: &str,
        scores: &[(u64, f32)],
    ) -> Result<(), StoreError> {
        crate::message_memory::set_importance(&self.conns, session_id, scores).await
    }

    async fn save_message_embeddings(
        &self,
        session_id: &str,
        model: &str,
        vectors: &[(u64, Vec<f32>)],
    ) -> Result<(), StoreError> {
        crate::message_memory::save_embeddings(&self.conns, session_id, model, vectors).await
    }

    async fn message_embeddings(
        &self,
        owner: Option<&str>,
    ) -> Result<Vec<(MessageMemory, Vec<f32>)>, StoreError> {
        crate::message_memory::embedded(&self.conns, owner).await
    }
}
