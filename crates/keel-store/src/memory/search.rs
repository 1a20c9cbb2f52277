//! The memory store's session search: the same rules as the SQL store's FTS5 index (which
//! messages count, whose sessions, terms from [`search_terms`]) and the same ranking, Okapi
//! BM25 over messages, computed by a scan. Plenty for the sessions a process keeps in memory.

use std::collections::HashMap;

use super::Data;
use keel_core::message::{Message, Role};
use keel_platform::session_search::{
    MAX_SESSION_HITS, SNIPPETS_PER_SESSION, SessionHit, SessionSearch, search_terms,
};

/// BM25's term-frequency saturation and length normalisation (FTS5's defaults).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Words of context kept on each side of the first matching word of a snippet.
const SNIPPET_CONTEXT_WORDS: usize = 6;

/// Whether a message's text is searched: user and assistant text the loop did not inject.
pub(crate) fn is_searchable(message: &Message) -> bool {
    matches!(message.role, Role::User | Role::Assistant)
        && !message.is_internal()
        && !message.content.trim().is_empty()
}

/// The words of `text` as the index sees them.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
}

impl Data {
    /// Searches the sessions `search` may see (see [`keel_core::Store::search_sessions`]).
    pub(super) fn search_sessions(&self, search: &SessionSearch) -> Vec<SessionHit> {
        let terms = search_terms(&search.query);
        if terms.is_empty() || search.limit == 0 {
            return Vec::new();
        }
        // Statistics over every searchable message, as an FTS5 index keeps them.
        let documents: Vec<(&str, &Message, Vec<String>)> = self
            .sessions
            .iter()
            .flat_map(|(id, (_, messages))| {
                messages
                    .iter()
                    .filter(|stored| is_searchable(&stored.message))
                    .map(move |stored| {
                        (
                            id.as_str(),
                            &stored.message,
                            words(&stored.message.content).collect(),
                        )
                    })
            })
            .collect();
        let count = documents.len() as f64;
        let average = documents.iter().map(|d| d.2.len()).sum::<usize>() as f64 / count.max(1.0);
        let idf: Vec<f64> = terms
            .iter()
            .map(|term| {
                let with = documents.iter().filter(|d| d.2.contains(term)).count() as f64;
                ((count - with + 0.5) / (with + 0.5) + 1.0).ln()
            })
            .collect();
        let mut by_session: HashMap<&str, Vec<(f64, &Message)>> = HashMap::new();
        for (session_id, message, words) in &documents {
            let Some((info, _)) = self.sessions.get(*session_id) else {
                continue;
            };
            if info.owner != search.owner || search.exclude_session.as_deref() == Some(*session_id)
            {
                continue;
            }
            let length = words.len() as f64;
            let score: f64 = terms
                .iter()
                .zip(&idf)
                .map(|(term, idf)| {
                    let tf = words.iter().filter(|w| *w == term).count() as f64;
                    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * length / average))
                })
                .sum();
            if score > 0.0 {
                by_session
                    .entry(session_id)
                    .or_default()
                    .push((score, message));
            }
        }
        let mut hits: Vec<SessionHit> = by_session
            .into_iter()
            .filter_map(|(session_id, mut matches)| {
                let (info, _) = self.sessions.get(session_id)?;
                matches.sort_by(|a, b| b.0.total_cmp(&a.0));
                Some(SessionHit {
                    session_id: session_id.to_string(),
                    title: info.title.clone(),
                    created_at: info.created_at,
                    updated_at: info.updated_at,
                    score: matches[0].0,
                    snippets: matches
                        .iter()
                        .take(SNIPPETS_PER_SESSION)
                        .map(|(_, message)| snippet(&message.content, &terms))
                        .collect(),
                })
            })
            .collect();
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then(b.updated_at.cmp(&a.updated_at))
        });
        hits.truncate(search.limit.min(MAX_SESSION_HITS));
        hits
    }
}

/// A few words around the first matching word of `text`, matches marked `[like this]`.
fn snippet(text: &str, terms: &[String]) -> String {
    let tokens: Vec<&str> = text.split_whitespace().collect();
    let matches = |token: &str| words(token).any(|word| terms.contains(&word));
    let first = tokens.iter().position(|t| matches(t)).unwrap_or(0);
    let start = first.saturating_sub(SNIPPET_CONTEXT_WORDS);
    let end = (first + SNIPPET_CONTEXT_WORDS + 1).min(tokens.len());
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    let marked: Vec<String> = tokens[start..end]
        .iter()
        .map(|t| {
            if matches(t) {
                format!("[{t}]")
            } else {
                t.to_string()
            }
        })
        .collect();
    out.push_str(&marked.join(" "));
    if end < tokens.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use keel_core::message::InternalReason;
    use keel_core::store::Store;
    use keel_platform::{ConversationStore, MemoryIndex, NewConversation};

    async fn session(store: &MemoryStore, id: &str, owner: Option<&str>, texts: &[&str]) {
        store
            .create_conversation(&NewConversation {
                id: id.into(),
                owner: owner.map(str::to_string),
                lane_policy: Default::default(),
                at: chrono::Utc::now(),
                place: None,
                trusted: true,
            })
            .await
            .unwrap();
        let messages: Vec<Message> = texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                if i % 2 == 0 {
                    Message::user(*text)
                } else {
                    Message::assistant(*text)
                }
            })
            .collect();
        store.append_messages(id, None, &messages).await.unwrap();
    }

    fn search(query: &str, owner: Option<&str>) -> SessionSearch {
        SessionSearch {
            query: query.into(),
            owner: owner.map(str::to_string),
            exclude_session: None,
            limit: 5,
        }
    }

    #[tokio::test]
    async fn ranks_the_best_session_first_and_marks_the_snippet() {
        let store = MemoryStore::new();
        session(
            &store,
            "a",
            Some("ann"),
            &["my dog is called Biscuit", "nice"],
        )
        .await;
        session(
            &store,
            "b",
            Some("ann"),
            &["the weather is nice", "yes, nice"],
        )
        .await;
        session(&store, "c", Some("ann"), &["my dog likes walks"]).await;
        let hits = store
            .search_sessions(&search("what is my dog called?", Some("ann")))
            .await
            .unwrap();
        let ids: Vec<&str> = hits.iter().map(|h| h.session_id.as_str()).collect();
        assert_eq!(ids[..2], ["a", "c"]);
        assert!(hits[0].snippets[0].contains("[dog]"), "{:?}", hits[0]);
        assert!(hits[0].snippets[0].contains("[called]"), "{:?}", hits[0]);
    }

    #[tokio::test]
    async fn only_the_owners_sessions_and_never_the_excluded_one() {
        let store = MemoryStore::new();
        session(&store, "ann1", Some("ann"), &["the vault code is 4711"]).await;
        session(&store, "ann2", Some("ann"), &["vault again"]).await;
        session(&store, "bob1", Some("bob"), &["the vault code is 4711"]).await;
        session(&store, "local", None, &["the vault code is 4711"]).await;
        let found = |owner: Option<&str>, exclude: Option<&str>| {
            let mut search = search("vault code", owner);
            search.exclude_session = exclude.map(str::to_string);
            let store = &store;
            async move {
                let hits = store.search_sessions(&search).await.unwrap();
                hits.into_iter().map(|h| h.session_id).collect::<Vec<_>>()
            }
        };
        assert_eq!(found(Some("ann"), None).await, ["ann1", "ann2"]);
        assert_eq!(found(Some("ann"), Some("ann1")).await, ["ann2"]);
        assert_eq!(found(Some("bob"), None).await, ["bob1"]);
        assert_eq!(found(None, None).await, ["local"]);
        assert!(found(Some("eve"), None).await.is_empty());
    }

    #[tokio::test]
    async fn internal_messages_and_tool_results_are_not_searched() {
        let store = MemoryStore::new();
        session(&store, "s", None, &["hello"]).await;
        store
            .append_messages(
                "s",
                None,
                &[
                    Message::internal_user("zebra nudge", InternalReason::LoopNudge),
                    Message::tool_result("c1", "zebra in a file"),
                ],
            )
            .await
            .unwrap();
        assert!(
            store
                .search_sessions(&search("zebra", None))
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_query_of_only_syntax_finds_nothing() {
        let store = MemoryStore::new();
        session(&store, "s", None, &["anything at all"]).await;
        for query in ["", "\"\"", "* : ( ) -", "NEAR("] {
            let hits = store.search_sessions(&search(query, None)).await.unwrap();
            assert!(hits.is_empty(), "{query}");
        }
    }
}
