//! Known facts' data (DESIGN.md section 11): durable facts about a user, kept by the store
//! ([`crate::MemoryIndex`]) and recalled into the system prompt by the `keel-memory` crate:
//! the [`Fact`] record, messages as memories, and a full-text query built safely from user
//! text. The hooks the loop calls (`keel_extensions::facts::Recall` and `Learn`) are
//! keel-core's.

use chrono::{DateTime, Utc};
use keel_core::store::OWNER;
use serde::{Deserialize, Serialize};

/// The most characters a fact's text may have.
pub const MAX_FACT_CHARS: usize = 2000;

/// A durable fact about a user.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    /// Fact id (a UUID v7).
    pub id: String,
    /// The user it is about ([`OWNER`] for the machine's owner).
    pub user_id: String,
    /// The fact, in words.
    pub text: String,
    /// What it is about (e.g. `deploy target`), lower case: a newer current fact of the same
    /// user with the same key supersedes this one.
    pub key: Option<String>,
    /// The session of the message it came from.
    pub source_session: Option<String>,
    /// The seq of that message, when known.
    pub source_seq: Option<u64>,
    /// How sure whoever wrote it was, in [0, 1].
    pub confidence: f32,
    /// How much it matters, in [0, 1]; high-importance facts are recalled on every turn.
    pub importance: f32,
    /// When it was first stored.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// The fact that replaced it; `None` while it is current.
    pub superseded_by: Option<String>,
    /// Its embedding, computed once when stored (none without an embeddings model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Vec<f32>>,
}

/// One full-text match of a fact: its id and its BM25 relevance (higher is better).
#[derive(Clone, Debug, PartialEq)]
pub struct FactHit {
    /// The fact's id.
    pub fact_id: String,
    /// Relevance, higher is better (SQLite's `bm25()` negated).
    pub score: f64,
}

/// A stored message that memory may recall: a person's or the model's words from an earlier
/// session, with the importance it was given when stored (or later, by a model).
#[derive(Clone, Debug, PartialEq)]
pub struct MessageMemory {
    /// Its session.
    pub session_id: String,
    /// Its seq in the session.
    pub seq: u64,
    /// Its text.
    pub text: String,
    /// Its importance, in [0, 1] (0.3, plain talk, when it has none).
    pub importance: f32,
    /// When it was stored.
    pub at: DateTime<Utc>,
    /// Full-text relevance, higher is better (0 when it was not found by a search).
    pub score: f64,
}

/// The sessions whose messages are `user_id`'s: the machine owner's are the sessions without
/// an owner.
pub fn session_owner(user_id: &str) -> Option<&str> {
    (user_id != OWNER).then_some(user_id)
}

/// Words too common to find anything with: a query that held them would rank nearly every
/// fact.
const STOPWORDS: &[&str] = &[
    "a", "about", "again", "all", "am", "an", "and", "any", "are", "as", "at", "be", "but", "by",
    "can", "could", "did", "do", "does", "for", "from", "had", "has", "have", "how", "i", "if",
    "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "please", "s", "so",
    "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "us",
    "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "would",
    "you", "your",
];

/// The words of `text` a full-text query looks for: runs of letters and digits, lower case,
/// not a stopword, at most 32, each at most 64 characters, without repeats (see
/// [`crate::session_search::terms_without`]).
pub fn query_terms(text: &str) -> Vec<String> {
    crate::session_search::terms_without(text, STOPWORDS)
}

/// An FTS5 `MATCH` expression that finds facts sharing any word with `text`: each term quoted
/// (so no user text is ever read as FTS5 syntax), joined by `OR`. `None` when `text` has no
/// words.
pub fn fts_match(text: &str) -> Option<String> {
    crate::session_search::fts5_query(&query_terms(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_words_lower_case_once() {
        assert_eq!(
            query_terms("What is my deploy target: eu-west-3, my TARGET!"),
            ["deploy", "target", "eu", "west", "3"]
        );
        assert!(query_terms("  -- !! ").is_empty());
    }

    #[test]
    fn fts_syntax_in_user_text_is_quoted_away() {
        let query = fts_match("b\" OR NEAR(x y) * col:val").unwrap();
        assert_eq!(
            query,
            "\"b\" OR \"near\" OR \"x\" OR \"y\" OR \"col\" OR \"val\""
        );
        assert_eq!(fts_match("\"\""), None);
    }

    #[test]
    fn huge_text_gives_a_bounded_query() {
        let text = "word ".repeat(10_000) + &"x".repeat(100_000);
        let terms = query_terms(&text);
        assert_eq!(terms.len(), 2);
        assert_eq!(terms[1].len(), 64);
        let many: String = (0..1000).map(|i| format!("w{i} ")).collect();
        assert_eq!(
            query_terms(&many).len(),
            crate::session_search::MAX_QUERY_TERMS
        );
    }
}
