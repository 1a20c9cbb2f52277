//! [`Memory`]: a user's long-term memory over a [`Store`]. It writes known facts (scored,
//! embedded once, superseding the fact of the same key) and recalls them for each new message
//! by tri-hybrid retrieval ([`crate::retrieval`]), as the agent's [`Recall`] hook.
//!
//! A user's current facts are cached in memory with their normalized embeddings, so a turn
//! costs one full-text query, one embedding of the message and a scan of vectors in memory.
//! This process's own writes drop the cache at once; another process's (`keel facts rm` while
//! `keel serve` runs) are seen within [`CACHE_TTL`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use keel_core::{Clock, SystemClock};
use keel_extensions::facts::{Recall, Recalled};
use keel_platform::DaemonStore;
use keel_platform::known_facts::{Fact, MessageMemory, session_owner};
use serde_json::json;

use crate::embedding::{Embedder, normalized};
use crate::facts::{FactError, NewFact, check_text, normal_key, subject_key};
use crate::importance::{ImportanceScorer, Rules};
use crate::retrieval::{Candidate, Piece, RetrievalSettings, retrieve_from, vector_ranking};

/// How long a user's cached facts are used before they are read again.
pub const CACHE_TTL: Duration = Duration::from_secs(30);

/// The longest recall waits for the message's embedding before it goes on without vectors.
pub const RECALL_EMBED_TIMEOUT: Duration = Duration::from_secs(5);

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

struct Cached<T> {
    loaded: Instant,
    value: Arc<T>,
}

/// What is cached per user (their facts, or their embedded messages), each read again after
/// [`CACHE_TTL`] or when this process changes it.
pub(crate) struct Cache<T>(Mutex<HashMap<String, Cached<T>>>);

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Cache(Mutex::new(HashMap::new()))
    }
}

impl<T> Cache<T> {
    fn fresh(&self, user_id: &str) -> Option<Arc<T>> {
        let cache = self.0.lock().ok()?;
        let cached = cache.get(user_id)?;
        (cached.loaded.elapsed() < CACHE_TTL).then(|| cached.value.clone())
    }

    fn keep(&self, user_id: &str, value: Arc<T>) {
        if let Ok(mut cache) = self.0.lock() {
            cache.insert(
                user_id.to_string(),
                Cached {
                    loaded: Instant::now(),
                    value,
                },
            );
        }
    }

    pub(crate) fn drop_user(&self, user_id: &str) {
        if let Ok(mut cache) = self.0.lock() {
            cache.remove(user_id);
        }
    }
}

/// A user's facts: the current ones as candidates, and the messages any fact (current or
/// replaced) was drawn from, which are never recalled as messages: a current fact stands for
/// its message, and a replaced one's message is out of date. A fact whose message is not known
/// (stored before `remember` recorded it) stands for no message: its session's other messages
/// are recalled and pinned like any.
#[derive(Default)]
struct Facts {
    candidates: Vec<Candidate>,
    /// `message:<session>:<seq>` of facts whose message is known.
    source_messages: HashSet<String>,
}

impl Facts {
    fn stands_for(&self, candidate_id: &str) -> bool {
        self.source_messages.contains(candidate_id)
    }
}

/// The most of a user's important messages pinned on every turn.
pub const PINNED_MESSAGES: usize = 3;

/// The most characters of a message a recalled piece carries.
pub const MESSAGE_PIECE_CHARS: usize = 400;

/// A user's long-term memory.
pub struct Memory {
    store: Arc<dyn DaemonStore>,
    embedder: Option<Arc<dyn Embedder>>,
    scorer: Arc<dyn ImportanceScorer>,
    settings: RetrievalSettings,
    clock: Arc<dyn Clock>,
    facts: Cache<Facts>,
    pub(crate) message_vectors: Cache<Vec<Candidate>>,
    pub(crate) learning: crate::learn::Learning,
}

impl Memory {
    /// Memory over `store`: full text and recency only, the rule-based importance scorer, the
    /// default retrieval settings.
    pub fn new(store: Arc<dyn DaemonStore>) -> Self {
        Memory {
            store,
            embedder: None,
            scorer: Arc::new(Rules),
            settings: RetrievalSettings::default(),
            clock: Arc::new(SystemClock),
            facts: Cache::default(),
            message_vectors: Cache::default(),
            learning: crate::learn::Learning::default(),
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
    pub fn store(&self) -> &Arc<dyn DaemonStore> {
        &self.store
    }

    /// The embeddings model, when it has one.
    pub(crate) fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
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

    /// What to recall for `message` from `user_id`'s memory, in session `session_id` (whose
    /// own messages are in the context already, so never recalled). Never fails: what does
    /// not work is left out and said in [`Retrieval::degraded`].
    pub async fn retrieve(&self, user_id: &str, session_id: &str, message: &str) -> Retrieval {
        let mut degraded = Vec::new();
        let owner = session_owner(user_id);
        let n = self.settings.candidates;
        // Both are cached: a turn reads them from the store once per `CACHE_TTL`.
        let (facts, vectors) = tokio::join!(
            self.facts_of(user_id),
            self.message_vector_candidates(user_id)
        );
        let facts = facts.unwrap_or_else(|e| {
            degraded.push(format!("cannot read the facts: {e}"));
            Arc::new(Facts::default())
        });
        let vectors = vectors.unwrap_or_else(|e| {
            degraded.push(format!("cannot read the message embeddings: {e}"));
            Arc::new(Vec::new())
        });
        // This session's messages are in the context already; a fact stands for its message.
        let own = format!("message:{session_id}:");
        let skip = |id: &str| id.starts_with(&own) || facts.stands_for(id);
        // The searches are polled first, so they run on the store's threads while the
        // vectors are compared here.
        let searches = async {
            tokio::join!(
                self.store.search_facts(user_id, message, n),
                self.store.search_messages(
                    owner,
                    message,
                    Some(session_id),
                    self.settings.message_importance,
                    n
                ),
                self.store.important_messages(
                    owner,
                    self.settings.pinned_importance,
                    Some(session_id),
                    PINNED_MESSAGES
                ),
            )
        };
        let similar = async {
            let query = self.embed_query(message).await;
            let ranking = match &query {
                Ok(Some(query)) => {
                    vector_ranking(&[&facts.candidates, &vectors], query, &self.settings, &skip)
                }
                _ => Vec::new(),
            };
            (query, ranking)
        };
        let ((fact_hits, message_hits, important), (query, vector)) =
            tokio::join!(searches, similar);
        if let Err(e) = query {
            degraded.push(format!("{e}; recalled by full text and recency alone"));
        }
        let mut failed = |what: &str, e: String| degraded.push(format!("{what}: {e}"));
        let fact_count = facts.candidates.len();
        let fact_ranking = match fact_hits {
            Ok(hits) => hits
                .into_iter()
                .map(|hit| (fact_candidate_id(&hit.fact_id), hit.score))
                .collect(),
            Err(e) => {
                failed("full-text search of facts failed", e.to_string());
                Vec::new()
            }
        };
        let message_hits = message_hits.unwrap_or_else(|e| {
            failed("full-text search of messages failed", e.to_string());
            Vec::new()
        });
        let message_ranking = message_hits
            .iter()
            .map(|hit| (message_candidate_id(&hit.session_id, hit.seq), hit.score))
            .collect();
        let found: Vec<Candidate> = message_hits
            .into_iter()
            .map(|hit| message_candidate(hit, false))
            .collect();
        let pinned: Vec<Candidate> = important
            .unwrap_or_else(|e| {
                failed("cannot read the important messages", e.to_string());
                Vec::new()
            })
            .into_iter()
            .map(|hit| message_candidate(hit, true))
            .collect();
        let pieces = retrieve_from(
            &[&pinned, &facts.candidates, &found, &vectors],
            &[fact_ranking, message_ranking],
            vector,
            self.clock.now(),
            &self.settings,
            &skip,
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

    /// The user's facts, from the cache when it is fresh.
    async fn facts_of(&self, user_id: &str) -> Result<Arc<Facts>, String> {
        if let Some(cached) = self.facts.fresh(user_id) {
            return Ok(cached);
        }
        let all = self
            .store
            .facts(user_id, true)
            .await
            .map_err(|e| e.to_string())?;
        let pinned = self.settings.pinned_importance;
        let mut facts = Facts::default();
        for fact in all {
            if let (Some(session), Some(seq)) = (&fact.source_session, fact.source_seq) {
                facts
                    .source_messages
                    .insert(message_candidate_id(session, seq));
            }
            if fact.superseded_by.is_none() {
                facts.candidates.push(Candidate::fact(fact, pinned));
            }
        }
        let facts = Arc::new(facts);
        self.facts.keep(user_id, facts.clone());
        Ok(facts)
    }

    /// The user's embedded messages as candidates, from the cache when it is fresh; none
    /// without an embeddings model.
    async fn message_vector_candidates(
        &self,
        user_id: &str,
    ) -> Result<Arc<Vec<Candidate>>, String> {
        if self.embedder.is_none() {
            return Ok(Arc::new(Vec::new()));
        }
        if let Some(cached) = self.message_vectors.fresh(user_id) {
            return Ok(cached);
        }
        let embedded = self
            .store
            .message_embeddings(session_owner(user_id))
            .await
            .map_err(|e| e.to_string())?;
        let candidates: Arc<Vec<Candidate>> = Arc::new(
            embedded
                .into_iter()
                .filter(|(message, _)| message.importance >= self.settings.message_importance)
                .map(|(message, vector)| Candidate {
                    embedding: Some(normalized(vector)),
                    ..message_candidate(message, false)
                })
                .collect(),
        );
        self.message_vectors.keep(user_id, candidates.clone());
        Ok(candidates)
    }

    fn forget_cache(&self, user_id: &str) {
        self.facts.drop_user(user_id);
    }
}

/// The candidate id of a stored message.
pub fn message_candidate_id(session_id: &str, seq: u64) -> String {
    format!("message:{session_id}:{seq}")
}

/// A stored message as a candidate, its text cut to [`MESSAGE_PIECE_CHARS`].
fn message_candidate(message: MessageMemory, pinned: bool) -> Candidate {
    let mut text: String = message.text.chars().take(MESSAGE_PIECE_CHARS).collect();
    if text.len() < message.text.len() {
        text.push('…');
    }
    Candidate {
        id: message_candidate_id(&message.session_id, message.seq),
        text,
        importance: message.importance,
        at: message.at,
        embedding: None,
        pinned,
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
    async fn recall(&self, user_id: &str, session_id: &str, message: &str) -> Recalled {
        let retrieval = self.retrieve(user_id, session_id, message).await;
        let prompt_section = if retrieval.pieces.is_empty() {
            String::new()
        } else {
            let lines: Vec<String> = retrieval
                .pieces
                .iter()
                .map(|piece| {
                    let text = piece.text.replace('\n', " ");
                    if piece.id.starts_with("message:") {
                        format!("- (said in an earlier conversation) {text}")
                    } else {
                        format!("- {text}")
                    }
                })
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
