//! [`Memory`]: a user's long-term memory over a [`Store`]. It writes known facts (scored,
//! embedded once, superseding the fact of the same key) and recalls them for each new message
//! by tri-hybrid retrieval ([`crate::retrieval`]), as the agent's [`Recall`] hook.
//!
//! A user's current facts are cached in memory with their normalized embeddings, so a turn
//! costs one full-text query, one embedding of the message and a scan of vectors in memory.
//! This process's own writes drop the cache at once; another process's (`keel facts rm` while
//! `keel serve` runs) are seen within [`CACHE_TTL`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use keel_core::known_facts::{Fact, Recall, Recalled};
use keel_core::{Clock, Store, SystemClock};
use serde_json::json;

use crate::embedding::{Embedder, normalized};
use crate::facts::{FactError, NewFact, check_text, normal_key, subject_key};
use crate::importance::{ImportanceScorer, Rules};
use crate::retrieval::{Candidate, Piece, RetrievalSettings, retrieve};

/// How long a user's cached facts are used before they are read again.
pub const CACHE_TTL: Duration = Duration::from_secs(30);

/// The longest recall waits for the message's embedding before it goes on without vectors.
pub const RECALL_EMBED_TIMEOUT: Duration = Duration::from_secs(5);

/// Messages that retrieval may recall besides facts: the seam for a full-text index over
/// messages (the `session_search` index), which returns its best matches as candidates with
/// ids `message:<session>:<seq>`.
#[async_trait]
pub trait MessageSource: Send + Sync {
    /// Up to `limit` of `user_id`'s messages matching `text`, best first, with their scores.
    async fn search(
        &self,
        user_id: &str,
        text: &str,
        limit: usize,
    ) -> Result<Vec<(Candidate, f64)>, String>;
}

/// What retrieval found for one message, with what did not work.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Retrieval {
    /// The recalled pieces: pinned first, then by fused score.
    pub pieces: Vec<Piece>,
    /// What did not work (a dead embeddings endpoint, a failed search), in words: retrieval
    /// went on without it.
    pub degraded: Vec<String>,
    /// How many current facts the user has.
    pub facts: usize,
}

/// What [`Memory::remember`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct Remembered {
    /// The fact as stored.
    pub fact: Fact,
    /// The fact it superseded.
    pub superseded: Option<String>,
    /// Why it has no embedding, when embeddings are configured and failed.
    pub embedding_error: Option<String>,
}

struct Cached {
    loaded: Instant,
    candidates: Arc<Vec<Candidate>>,
}

/// A user's long-term memory.
pub struct Memory {
    store: Arc<dyn Store>,
    embedder: Option<Arc<dyn Embedder>>,
    scorer: Arc<dyn ImportanceScorer>,
    messages: Option<Arc<dyn MessageSource>>,
    settings: RetrievalSettings,
    clock: Arc<dyn Clock>,
    cache: Mutex<HashMap<String, Cached>>,
}

impl Memory {
    /// Memory over `store`: full text and recency only, the rule-based importance scorer, the
    /// default retrieval settings.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Memory {
            store,
            embedder: None,
            scorer: Arc::new(Rules),
            messages: None,
            settings: RetrievalSettings::default(),
            clock: Arc::new(SystemClock),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Adds vector similarity, with embeddings from `embedder`.
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// Replaces the importance scorer.
    pub fn with_scorer(mut self, scorer: Arc<dyn ImportanceScorer>) -> Self {
        self.scorer = scorer;
        self
    }

    /// Recalls messages from `source` too.
    pub fn with_messages(mut self, source: Arc<dyn MessageSource>) -> Self {
        self.messages = Some(source);
        self
    }

    /// Replaces the retrieval settings.
    pub fn with_settings(mut self, settings: RetrievalSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Replaces the clock (recency is measured against it).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The store it reads and writes.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Stores a fact about `user_id`: checked, scored, embedded (once; it is stored without
    /// an embedding when that fails), superseding the current fact with its key.
    pub async fn remember(&self, user_id: &str, new: NewFact) -> Result<Remembered, FactError> {
        let text = check_text(&new.text)?.to_string();
        let key = match &new.key {
            Some(key) => Some(normal_key(key).ok_or_else(|| {
                FactError::Invalid(format!(
                    "key {key:?} must be one to six words naming what the fact is about"
                ))
            })?),
            None => subject_key(&text),
        };
        let unit = |value: Option<f32>, default: f32| value.unwrap_or(default).clamp(0.0, 1.0);
        let (embedding, embedding_error) = match &self.embedder {
            Some(embedder) => match embedder.embed(std::slice::from_ref(&text)).await {
                Ok(mut vectors) if vectors.len() == 1 => (vectors.pop(), None),
                Ok(vectors) => (
                    None,
                    Some(format!("{} vectors for one text", vectors.len())),
                ),
                Err(e) => (None, Some(e)),
            },
            None => (None, None),
        };
        let now = self.clock.now();
        let fact = Fact {
            id: uuid::Uuid::now_v7().to_string(),
            user_id: user_id.to_string(),
            importance: unit(new.importance, self.scorer.score(&text)),
            confidence: unit(new.confidence, 1.0),
            text,
            key,
            source_session: new.source_session,
            source_seq: new.source_seq,
            created_at: now,
            updated_at: now,
            superseded_by: None,
            embedding,
        };
        let superseded = self
            .store
            .save_fact(&fact)
            .await
            .map_err(|e| FactError::Store(e.to_string()))?;
        self.forget_cache(user_id);
        Ok(Remembered {
            fact,
            superseded,
            embedding_error,
        })
    }

    /// Deletes one of `user_id`'s facts; false when they have no such fact.
    pub async fn forget(&self, user_id: &str, fact_id: &str) -> Result<bool, FactError> {
        let forgotten = self
            .store
            .forget_fact(user_id, fact_id)
            .await
            .map_err(|e| FactError::Store(e.to_string()))?;
        self.forget_cache(user_id);
        Ok(forgotten)
    }

    /// What to recall for `message` from `user_id`'s memory. Never fails: what does not work
    /// is left out and said in [`Retrieval::degraded`].
    pub async fn retrieve(&self, user_id: &str, message: &str) -> Retrieval {
        let mut degraded = Vec::new();
        let (query, facts, full_text) = tokio::join!(
            self.embed_query(message),
            self.candidates(user_id),
            self.store
                .search_facts(user_id, message, self.settings.candidates),
        );
        let query = query.unwrap_or_else(|e| {
            degraded.push(format!("{e}; recalled by full text and recency alone"));
            None
        });
        let mut candidates = facts.unwrap_or_else(|e| {
            degraded.push(format!("cannot read the facts: {e}"));
            Arc::new(Vec::new())
        });
        let fact_count = candidates.len();
        let mut rankings = vec![match full_text {
            Ok(hits) => hits
                .into_iter()
                .map(|hit| (fact_candidate_id(&hit.fact_id), hit.score))
                .collect(),
            Err(e) => {
                degraded.push(format!("full-text search failed: {e}"));
                Vec::new()
            }
        }];
        if let Some(source) = &self.messages {
            match source
                .search(user_id, message, self.settings.candidates)
                .await
            {
                Ok(hits) => {
                    let all = Arc::make_mut(&mut candidates);
                    rankings.push(hits.iter().map(|(c, s)| (c.id.clone(), *s)).collect());
                    all.extend(hits.into_iter().map(|(candidate, _)| candidate));
                }
                Err(e) => degraded.push(format!("message search failed: {e}")),
            }
        }
        let pieces = retrieve(
            &candidates,
            &rankings,
            query.as_deref(),
            self.clock.now(),
            &self.settings,
        );
        Retrieval {
            pieces,
            degraded,
            facts: fact_count,
        }
    }

    /// The message's embedding (length 1), `None` without an embedder.
    async fn embed_query(&self, message: &str) -> Result<Option<Vec<f32>>, String> {
        let Some(embedder) = &self.embedder else {
            return Ok(None);
        };
        let texts = [message.chars().take(8000).collect::<String>()];
        match tokio::time::timeout(RECALL_EMBED_TIMEOUT, embedder.embed(&texts)).await {
            Ok(Ok(mut vectors)) if vectors.len() == 1 => Ok(vectors.pop().map(normalized)),
            Ok(Ok(_)) => Err("the embeddings endpoint answered the wrong number of vectors".into()),
            Ok(Err(e)) => Err(format!(
                "embeddings unavailable ({}): {e}",
                embedder.model()
            )),
            Err(_) => Err(format!(
                "embeddings unavailable ({}): no answer within {}s",
                embedder.model(),
                RECALL_EMBED_TIMEOUT.as_secs()
            )),
        }
    }

    /// The user's current facts as candidates, from the cache when it is fresh.
    async fn candidates(&self, user_id: &str) -> Result<Arc<Vec<Candidate>>, String> {
        if let Some(cached) = self.cache.lock().ok().and_then(|cache| {
            let cached = cache.get(user_id)?;
            (cached.loaded.elapsed() < CACHE_TTL).then(|| cached.candidates.clone())
        }) {
            return Ok(cached);
        }
        let facts = self
            .store
            .facts(user_id, false)
            .await
            .map_err(|e| e.to_string())?;
        let candidates: Arc<Vec<Candidate>> = Arc::new(
            facts
                .into_iter()
                .map(|fact| Candidate {
                    id: fact_candidate_id(&fact.id),
                    text: fact.text,
                    importance: fact.importance,
                    at: fact.updated_at,
                    embedding: fact.embedding.map(normalized),
                })
                .collect(),
        );
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(
                user_id.to_string(),
                Cached {
                    loaded: Instant::now(),
                    candidates: candidates.clone(),
                },
            );
        }
        Ok(candidates)
    }

    fn forget_cache(&self, user_id: &str) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.remove(user_id);
        }
    }
}

/// The candidate id of a fact.
pub fn fact_candidate_id(fact_id: &str) -> String {
    format!("fact:{fact_id}")
}

/// The heading of the system prompt's known-facts section.
pub const KNOWN_FACTS_HEADING: &str = "Known facts about the user (remembered from earlier \
conversations; newer facts replace older ones; use them when they help, and say so if one \
seems wrong):";

#[async_trait]
impl Recall for Memory {
    async fn recall(&self, user_id: &str, message: &str) -> Recalled {
        let retrieval = self.retrieve(user_id, message).await;
        let prompt_section = if retrieval.pieces.is_empty() {
            String::new()
        } else {
            let lines: Vec<String> = retrieval
                .pieces
                .iter()
                .map(|piece| format!("- {}", piece.text.replace('\n', " ")))
                .collect();
            format!("{KNOWN_FACTS_HEADING}\n{}", lines.join("\n"))
        };
        let detail = json!({
            "user_id": user_id,
            "facts": retrieval.facts,
            "embeddings": self.embedder.as_ref().map(|e| e.model().to_string()),
            "pieces": retrieval.pieces,
            "degraded": retrieval.degraded,
        });
        Recalled {
            prompt_section,
            detail,
        }
    }
}
