//! The memory store's known facts (see [`keel_core::known_facts`]): a list per store, searched by
//! a small BM25 of its own so tests without SQLite rank as the SQLite store does, roughly.

use std::collections::HashMap;

use super::Data;
use async_trait::async_trait;
use keel_core::store::StoreError;
use keel_platform::MemoryIndex;
use keel_platform::known_facts::{Fact, FactHit, query_terms};

use super::MemoryStore;

/// BM25's term-frequency saturation and length normalization (FTS5's defaults).
const K1: f64 = 1.2;
const B: f64 = 0.75;

impl Data {
    /// Stores a fact (see [`keel_core::Store::save_fact`]).
    pub(super) fn save_fact(&mut self, fact: &Fact) -> Result<Option<String>, StoreError> {
        if self.facts.iter().any(|stored| stored.id == fact.id) {
            return Err(StoreError::Conflict(format!(
                "fact `{}` exists already",
                fact.id
            )));
        }
        let mut superseded = None;
        if let Some(key) = fact.key.as_deref().filter(|key| !key.is_empty()) {
            for old in self.facts.iter_mut().filter(|old| {
                old.user_id == fact.user_id
                    && old.superseded_by.is_none()
                    && old.key.as_deref() == Some(key)
            }) {
                old.superseded_by = Some(fact.id.clone());
                old.updated_at = fact.created_at;
                superseded = Some(old.id.clone());
            }
        }
        self.facts.push(fact.clone());
        Ok(superseded)
    }

    /// Deletes a user's fact and what it superseded (see [`keel_core::Store::forget_fact`]).
    pub(super) fn forget_fact(&mut self, user_id: &str, fact_id: &str) -> bool {
        let owned = |fact: &Fact| fact.user_id == user_id;
        if !self.facts.iter().any(|f| f.id == fact_id && owned(f)) {
            return false;
        }
        self.facts.retain(|fact| {
            !(owned(fact) && (fact.id == fact_id || fact.superseded_by.as_deref() == Some(fact_id)))
        });
        true
    }

    /// A user's facts, oldest first.
    pub(super) fn facts(&self, user_id: &str, with_superseded: bool) -> Vec<Fact> {
        self.facts
            .iter()
            .filter(|fact| fact.user_id == user_id)
            .filter(|fact| with_superseded || fact.superseded_by.is_none())
            .cloned()
            .collect()
    }

    /// BM25 over a user's current facts (see [`keel_core::Store::search_facts`]).
    pub(super) fn search_facts(&self, user_id: &str, text: &str, limit: usize) -> Vec<FactHit> {
        let terms = query_terms(text);
        let docs: Vec<(&Fact, Vec<String>)> = self
            .facts
            .iter()
            .filter(|fact| fact.user_id == user_id && fact.superseded_by.is_none())
            .map(|fact| (fact, words(&fact.text)))
            .collect();
        if docs.is_empty() || terms.is_empty() {
            return Vec::new();
        }
        let n = docs.len() as f64;
        let average = docs.iter().map(|(_, w)| w.len()).sum::<usize>() as f64 / n;
        let mut containing: HashMap<&str, f64> = HashMap::new();
        for term in &terms {
            let count = docs.iter().filter(|(_, w)| w.contains(term)).count();
            containing.insert(term, count as f64);
        }
        let mut hits: Vec<FactHit> = docs
            .iter()
            .filter_map(|(fact, words)| {
                let length = words.len() as f64;
                let score: f64 = terms
                    .iter()
                    .map(|term| {
                        let tf = words.iter().filter(|w| *w == term).count() as f64;
                        let df = containing[term.as_str()];
                        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                        idf * tf * (K1 + 1.0)
                            / (tf + K1 * (1.0 - B + B * length / average.max(1.0)))
                    })
                    .sum();
                (score > 0.0).then(|| FactHit {
                    fact_id: fact.id.clone(),
                    score,
                })
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.fact_id.cmp(&b.fact_id)));
        hits.truncate(limit);
        hits
    }
}

/// Every word of `text`, lower case, as the FTS5 `unicode61` tokenizer splits it.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect()
}

#[async_trait]
impl MemoryIndex for MemoryStore {
    async fn save_fact(
        &self,
        fact: &keel_platform::known_facts::Fact,
    ) -> Result<Option<String>, StoreError> {
        self.lock()?.save_fact(fact)
    }

    async fn facts(
        &self,
        user_id: &str,
        with_superseded: bool,
    ) -> Result<Vec<keel_platform::known_facts::Fact>, StoreError> {
        Ok(self.lock()?.facts(user_id, with_superseded))
    }

    async fn forget_fact(&self, user_id: &str, fact_id: &str) -> Result<bool, StoreError> {
        Ok(self.lock()?.forget_fact(user_id, fact_id))
    }

    async fn search_facts(
        &self,
        user_id: &str,
        text: &str,
        limit: usize,
    ) -> Result<Vec<keel_platform::known_facts::FactHit>, StoreError> {
        Ok(self.lock()?.search_facts(user_id, text, limit))
    }

    async fn search_sessions(
        &self,
        search: &keel_platform::session_search::SessionSearch,
    ) -> Result<Vec<keel_platform::session_search::SessionHit>, StoreError> {
        Ok(self.lock()?.search_sessions(search))
    }
}
