//! Full-text search over a user's past sessions (the `session_search` tool, and whatever else
//! needs to find an old conversation): what a search asks for, what it finds, and the one way a
//! person's words become search terms, shared by every store.
//!
//! What is searched: the text of user and assistant messages, not the loop's own internal
//! messages (nudges, continuation prompts, compaction summaries) and not tool results (a file
//! read or a page fetched is not something the user said; it would drown what they did say).
//!
//! Whose sessions: a search names an owner. `Some(user)` searches the sessions that user owns
//! and nothing else; `None` (a caller with no user: the local CLI without `--user`, a library
//! run for no user) searches only sessions that have no owner, never any user's.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The most sessions one search returns.
pub const MAX_SESSION_HITS: usize = 20;

/// The most snippets returned per session.
pub const SNIPPETS_PER_SESSION: usize = 3;

/// The most terms a query keeps; the rest are ignored.
pub const MAX_QUERY_TERMS: usize = 32;

/// The longest term kept, in characters; longer ones are cut.
pub const MAX_TERM_CHARS: usize = 64;

/// One search over past sessions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionSearch {
    /// What to look for, in the person's own words (no query syntax: see [`search_terms`]).
    pub query: String,
    /// Whose sessions: `Some(user)` only that user's, `None` only sessions without an owner.
    pub owner: Option<String>,
    /// A session never returned (the one the search is made from).
    pub exclude_session: Option<String>,
    /// The most sessions to return (at most [`MAX_SESSION_HITS`]).
    pub limit: usize,
}

/// A session that matched, with its best passages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionHit {
    /// The session.
    pub session_id: String,
    /// Its title (its first user message, shortened).
    pub title: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When a message was last added.
    pub updated_at: DateTime<Utc>,
    /// How well it matched (BM25 of its best message; higher is better).
    pub score: f64,
    /// The matching passages, best first, terms marked `[like this]`.
    pub snippets: Vec<String>,
}

/// The search terms of a query: its runs of letters and digits, lowercased, each once, at most
/// [`MAX_QUERY_TERMS`] of at most [`MAX_TERM_CHARS`] characters. Everything else (quotes,
/// `*`, `:`, parentheses, `-`) separates terms, so no query syntax survives: `NEAR(a b)` is
/// the words `near`, `a`, `b`.
pub fn search_terms(query: &str) -> Vec<String> {
    terms_without(query, &[])
}

/// [`search_terms`] less the words in `stopwords` (lower case); the stopwords do not count
/// towards [`MAX_QUERY_TERMS`]. The one tokenizer of every full-text query keel makes.
pub fn terms_without(query: &str, stopwords: &[&str]) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in query.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        let term: String = word.chars().take(MAX_TERM_CHARS).collect::<String>();
        let term = term.to_lowercase();
        if !terms.contains(&term) && !stopwords.contains(&term.as_str()) {
            terms.push(term);
        }
        if terms.len() == MAX_QUERY_TERMS {
            break;
        }
    }
    terms
}

/// The SQLite FTS5 query for `terms`: each a quoted string, joined by `OR`, so a row matching
/// any term is a candidate and BM25 ranks those matching more, and rarer, terms first. `None`
/// when there are no terms. Terms hold letters and digits only, and quotes are doubled, so the
/// quotes cannot be broken out of.
pub fn fts5_query(terms: &[String]) -> Option<String> {
    if terms.is_empty() {
        return None;
    }
    Some(
        terms
            .iter()
            .map(|term| format!("\"{}\"", term.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(" OR "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_syntax_becomes_plain_words() {
        assert_eq!(
            search_terms(r#"NEAR("dog" cat, 5) title:secret OR x* (unbalanced"#),
            [
                "near",
                "dog",
                "cat",
                "5",
                "title",
                "secret",
                "or",
                "x",
                "unbalanced"
            ]
        );
        assert_eq!(search_terms("\"\"\" *** ((( :::"), Vec::<String>::new());
        assert_eq!(
            search_terms("Ünïcödé  Straße 東京"),
            ["ünïcödé", "straße", "東京"]
        );
        assert_eq!(search_terms("a A a"), ["a"]);
    }

    #[test]
    fn terms_are_bounded() {
        let many: String = (0..100).map(|i| format!("w{i} ")).collect();
        assert_eq!(search_terms(&many).len(), MAX_QUERY_TERMS);
        let long = "x".repeat(10_000);
        assert_eq!(search_terms(&long)[0].chars().count(), MAX_TERM_CHARS);
    }

    #[test]
    fn the_fts5_query_quotes_every_term() {
        let terms = search_terms("blue whale");
        assert_eq!(fts5_query(&terms).unwrap(), r#""blue" OR "whale""#);
        assert_eq!(fts5_query(&[]), None);
    }
}
