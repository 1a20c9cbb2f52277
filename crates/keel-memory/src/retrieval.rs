//! Tri-hybrid retrieval, the pure part: candidates found by full text (BM25) and by vector
//! similarity are ranked three ways (full text, vectors, recency × importance), fused by
//! reciprocal rank, cut to the top k within a token budget, then merged with the pinned
//! memories (high-importance facts), deduplicated. Every chosen [`Piece`] keeps the signals
//! that chose it, for the `agent.memory.retrieved` event.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::embedding::cosine;
use crate::fusion::{RRF_K, Ranking, fuse};

/// How retrieval chooses.
#[derive(Clone, Debug, PartialEq)]
pub struct RetrievalSettings {
    /// The most pieces recalled by relevance (pinned ones come on top).
    pub top_k: usize,
    /// The most tokens the recalled pieces may take together, pinned ones included.
    pub token_budget: usize,
    /// Candidates taken from each of full text and vectors.
    pub candidates: usize,
    /// The least cosine similarity that makes a fact a vector candidate.
    pub min_similarity: f32,
    /// Facts at or above this importance are pinned: recalled on every turn (and so are the
    /// user's latest few messages that score as much).
    pub pinned_importance: f32,
    /// The least importance of a message that may be recalled: questions and plain answers
    /// (0.3–0.4 by keel's rules) are not memories, and often out of date.
    pub message_importance: f32,
    /// After this many days a memory's recency weight halves.
    pub half_life_days: f64,
    /// How much the recency × importance ranking counts against full text and vectors (1.0).
    pub recency_weight: f64,
}

impl Default for RetrievalSettings {
    fn default() -> Self {
        RetrievalSettings {
            top_k: 5,
            token_budget: 500,
            candidates: 50,
            min_similarity: 0.25,
            pinned_importance: 0.9,
            message_importance: 0.5,
            half_life_days: 30.0,
            recency_weight: 0.5,
        }
    }
}

/// A memory retrieval can choose: a fact, or a message found through a [`crate::MessageSource`].
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Its id (`fact:<id>` or `message:<session>:<seq>`).
    pub id: String,
    /// Its text.
    pub text: String,
    /// Its importance, in [0, 1].
    pub importance: f32,
    /// When it was stored or last changed.
    pub at: DateTime<Utc>,
    /// Its embedding, of length 1, when it has one.
    pub embedding: Option<Vec<f32>>,
    /// Recalled on every turn, whatever the message (a high-importance fact, one of the
    /// user's most recent high-importance messages), within the token budget.
    pub pinned: bool,
}

impl Candidate {
    /// A known fact as a candidate: its embedding normalized, pinned when its importance is
    /// at least `pinned_importance`.
    pub fn fact(fact: keel_platform::known_facts::Fact, pinned_importance: f32) -> Self {
        Candidate {
            id: crate::fact_candidate_id(&fact.id),
            pinned: fact.importance >= pinned_importance,
            text: fact.text,
            importance: fact.importance,
            at: fact.updated_at,
            embedding: fact.embedding.map(crate::embedding::normalized),
        }
    }
}

/// Where a signal put a piece: its 1-based rank and the raw score (BM25, cosine, or recency ×
/// importance).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Signal {
    /// 1-based rank in that signal's list.
    pub rank: usize,
    /// The signal's own score.
    pub score: f64,
}

/// One recalled memory and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Piece {
    /// The candidate's id.
    pub id: String,
    /// Its text.
    pub text: String,
    /// Its fused score (0 for a pinned piece no signal found).
    pub fused: f64,
    /// Its place in the full-text ranking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_text: Option<Signal>,
    /// Its place in the vector ranking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector: Option<Signal>,
    /// Its place in the recency × importance ranking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recency: Option<Signal>,
    /// Recalled because it is pinned.
    pub pinned: bool,
}

/// Chooses what to recall. `full_text` holds the full-text rankings (of facts, of messages):
/// candidate ids best first with their BM25 scores; `query` is the message's embedding (length
/// 1), `None` without embeddings.
pub fn retrieve(
    candidates: &[Candidate],
    full_text: &[Vec<(String, f64)>],
    query: Option<&[f32]>,
    now: DateTime<Utc>,
    settings: &RetrievalSettings,
) -> Vec<Piece> {
    let skip = |_: &str| false;
    let vector = query.map_or_else(Vec::new, |query| {
        vector_ranking(&[candidates], query, settings, &skip)
    });
    retrieve_from(&[candidates], full_text, vector, now, settings, &skip)
}

/// The candidates of `pools` most like `query` (an embedding of length 1), best first, at
/// most `settings.candidates`, none that `skip` names: the vector signal, computed apart so it
/// can run while the full-text searches do.
pub fn vector_ranking<'a>(
    pools: &[&'a [Candidate]],
    query: &[f32],
    settings: &RetrievalSettings,
    skip: &dyn Fn(&str) -> bool,
) -> Vec<(&'a str, f64)> {
    similar(
        pools.iter().flat_map(|pool| pool.iter()),
        query,
        settings,
        skip,
    )
}

/// [`retrieve`] over several pools of candidates (cached facts, cached message vectors, the
/// messages a search found), read in place: nothing is copied to put them together. A
/// candidate in two pools counts once, from the first. Candidates whose id `skip` names (the
/// messages of the session a run is in, say) are never chosen. `vector` is the vector signal
/// ([`vector_ranking`]; empty without embeddings).
pub fn retrieve_from<'a>(
    pools: &[&'a [Candidate]],
    full_text: &[Vec<(String, f64)>],
    vector: Vec<(&'a str, f64)>,
    now: DateTime<Utc>,
    settings: &RetrievalSettings,
    skip: &dyn Fn(&str) -> bool,
) -> Vec<Piece> {
    // `skip` is asked only about candidates a cheaper test kept: it may look up an id.
    let candidates = || pools.iter().flat_map(|pool| pool.iter());
    // One pass finds the candidates any list names (a few dozen of maybe 10^5): full-text hits
    // that are not candidates (a fact deleted since) drop out.
    let named: HashSet<&str> = full_text
        .iter()
        .flat_map(|list| list.iter().take(settings.candidates))
        .map(|(id, _)| id.as_str())
        .chain(vector.iter().map(|(id, _)| *id))
        .collect();
    let mut by_id: HashMap<&str, &Candidate> = HashMap::new();
    for c in candidates().filter(|c| named.contains(c.id.as_str()) && !skip(&c.id)) {
        by_id.entry(c.id.as_str()).or_insert(c);
    }
    let full_text: Vec<Vec<(&str, f64)>> = full_text
        .iter()
        .map(|list| {
            list.iter()
                .take(settings.candidates)
                .filter(|(id, _)| by_id.contains_key(id.as_str()))
                .map(|(id, score)| (id.as_str(), *score))
                .collect()
        })
        .collect();
    // Recency × importance ranks what the other two found: it orders, it does not recall.
    let found: HashSet<&str> = by_id.keys().copied().collect();
    let mut recency: Vec<(&str, f64)> = found
        .iter()
        .map(|id| (*id, recency_score(by_id[id], now, settings)))
        .collect();
    recency.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));

    let ids = |list: &[(&'_ str, f64)]| list.iter().map(|(id, _)| id.to_string()).collect();
    let mut rankings: Vec<Ranking<String>> = full_text
        .iter()
        .map(|list| Ranking {
            weight: 1.0,
            items: ids(list),
        })
        .collect();
    rankings.push(Ranking {
        weight: 1.0,
        items: ids(&vector),
    });
    rankings.push(Ranking {
        weight: settings.recency_weight,
        items: ids(&recency),
    });
    let fused = fuse(&rankings, RRF_K);
    let signal = |list: &[(&str, f64)], id: &str| {
        list.iter()
            .position(|(other, _)| *other == id)
            .map(|index| Signal {
                rank: index + 1,
                score: list[index].1,
            })
    };

    let mut chosen = Vec::new();
    let mut seen_texts = HashSet::new();
    let mut tokens = 0;
    let mut take = |candidate: &Candidate, fused: f64, pinned: bool, chosen: &mut Vec<Piece>| {
        let cost = estimate_tokens(&candidate.text);
        if tokens + cost > settings.token_budget || !seen_texts.insert(normal_form(&candidate.text))
        {
            return;
        }
        tokens += cost;
        chosen.push(Piece {
            id: candidate.id.clone(),
            text: candidate.text.clone(),
            fused,
            full_text: full_text
                .iter()
                .find_map(|list| signal(list, &candidate.id)),
            vector: signal(&vector, &candidate.id),
            recency: signal(&recency, &candidate.id),
            pinned,
        });
    };
    // Pinned memories first: they are recalled on every turn, whatever the message.
    let fused_of: HashMap<&str, f64> = fused.iter().map(|(id, s)| (id.as_str(), *s)).collect();
    for candidate in candidates().filter(|c| c.pinned && !skip(&c.id)) {
        if chosen.iter().any(|piece: &Piece| piece.id == candidate.id) {
            continue;
        }
        let score = fused_of.get(candidate.id.as_str()).copied().unwrap_or(0.0);
        take(candidate, score, true, &mut chosen);
    }
    let pinned = chosen.len();
    for (id, score) in &fused {
        if chosen.len() - pinned == settings.top_k {
            break;
        }
        if chosen.iter().any(|piece| &piece.id == id) {
            continue;
        }
        take(by_id[id.as_str()], *score, false, &mut chosen);
    }
    chosen
}

/// Candidates at least `min_similarity` like the query, most similar first.
fn similar<'a>(
    candidates: impl Iterator<Item = &'a Candidate>,
    query: &[f32],
    settings: &RetrievalSettings,
    skip: &dyn Fn(&str) -> bool,
) -> Vec<(&'a str, f64)> {
    let mut similar: Vec<(&str, f64)> = candidates
        .filter_map(|c| {
            let similarity = cosine(c.embedding.as_deref()?, query)?;
            (similarity >= settings.min_similarity && !skip(&c.id))
                .then_some((c.id.as_str(), f64::from(similarity)))
        })
        .collect();
    let best_first = |a: &(&str, f64), b: &(&str, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(b.0));
    if similar.len() > settings.candidates && settings.candidates > 0 {
        similar.select_nth_unstable_by(settings.candidates - 1, best_first);
    }
    similar.truncate(settings.candidates);
    similar.sort_by(best_first);
    similar
}

/// Importance, halved every `half_life_days` of age.
fn recency_score(candidate: &Candidate, now: DateTime<Utc>, settings: &RetrievalSettings) -> f64 {
    let age_days = (now - candidate.at).num_seconds().max(0) as f64 / 86_400.0;
    f64::from(candidate.importance) * 0.5f64.powf(age_days / settings.half_life_days)
}

/// A cheap token count: about four characters a token, at least one.
pub fn estimate_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4).max(1)
}

/// The text as compared for duplicates: lower case, words separated by single spaces.
fn normal_form(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap()
    }

    fn candidate(id: &str, text: &str, importance: f32, days_old: i64, v: &[f32]) -> Candidate {
        Candidate {
            id: id.into(),
            text: text.into(),
            importance,
            at: now() - chrono::Duration::days(days_old),
            embedding: Some(crate::embedding::normalized(v.to_vec())),
            pinned: importance >= RetrievalSettings::default().pinned_importance,
        }
    }

    fn ids(pieces: &[Piece]) -> Vec<&str> {
        pieces.iter().map(|p| p.id.as_str()).collect()
    }

    #[test]
    fn what_neither_signal_finds_is_not_recalled_unless_pinned() {
        let candidates = [
            candidate("a", "deploy target is eu-west-3", 0.5, 1, &[1.0, 0.0]),
            candidate("b", "lunch is at noon", 0.5, 0, &[0.0, 1.0]),
            candidate("c", "the user's name is Ada", 0.95, 300, &[0.0, 1.0]),
        ];
        let pieces = retrieve(
            &candidates,
            &[vec![("a".into(), 3.0)]],
            Some(&[1.0, 0.0]),
            now(),
            &RetrievalSettings::default(),
        );
        assert_eq!(ids(&pieces), ["c", "a"]);
        assert!(pieces[0].pinned && pieces[0].full_text.is_none());
        assert_eq!(
            pieces[1].full_text,
            Some(Signal {
                rank: 1,
                score: 3.0
            })
        );
        assert_eq!(pieces[1].vector.map(|s| s.rank), Some(1));
    }

    #[test]
    fn vectors_find_what_full_text_misses_and_fusion_orders_both() {
        let candidates = [
            candidate("a", "one", 0.5, 1, &[1.0, 0.1]),
            candidate("b", "two", 0.5, 1, &[1.0, 0.0]),
            candidate("c", "three", 0.5, 1, &[0.0, 1.0]),
        ];
        // Full text finds a; vectors find b, then a: a is in both, so first.
        let pieces = retrieve(
            &candidates,
            &[vec![("a".into(), 1.0)]],
            Some(&[1.0, 0.0]),
            now(),
            &RetrievalSettings::default(),
        );
        assert_eq!(ids(&pieces), ["a", "b"]);
        // Without embeddings, full text alone.
        let pieces = retrieve(
            &candidates,
            &[vec![("a".into(), 1.0)]],
            None,
            now(),
            &RetrievalSettings::default(),
        );
        assert_eq!(ids(&pieces), ["a"]);
    }

    #[test]
    fn top_k_budget_and_duplicates_bound_the_pieces() {
        let candidates: Vec<Candidate> = (0..20)
            .map(|i| {
                candidate(
                    &format!("f{i:02}"),
                    &format!("fact number {i}"),
                    0.5,
                    i,
                    &[1.0],
                )
            })
            .collect();
        let hits = [candidates
            .iter()
            .map(|c| (c.id.clone(), 1.0))
            .collect::<Vec<_>>()];
        let settings = RetrievalSettings::default();
        assert_eq!(
            retrieve(&candidates, &hits, None, now(), &settings).len(),
            5
        );
        let tight = RetrievalSettings {
            token_budget: 8,
            ..settings.clone()
        };
        let pieces = retrieve(&candidates, &hits, None, now(), &tight);
        assert_eq!(pieces.len(), 2, "{pieces:?}");
        let mut twins = candidates[..2].to_vec();
        twins[1].text = "FACT number: 0".into();
        assert_eq!(retrieve(&twins, &hits, None, now(), &settings).len(), 1);
        let huge = [candidate("h", &"x".repeat(100_000), 0.99, 0, &[1.0])];
        assert!(retrieve(&huge, &[], None, now(), &settings).is_empty());
    }

    #[test]
    fn recency_times_importance_breaks_ties_between_equal_matches() {
        let candidates = [
            candidate("old", "deploy notes", 0.5, 400, &[1.0]),
            candidate("new", "deploy notes too", 0.5, 1, &[1.0]),
        ];
        let hits = [vec![("old".to_string(), 1.0), ("new".to_string(), 1.0)]];
        let query = [1.0];
        // Full text puts the old one first, the vectors tie; the recency ranking decides.
        let pieces = retrieve(
            &candidates,
            &hits,
            Some(&query),
            now(),
            &RetrievalSettings::default(),
        );
        assert_eq!(pieces[0].id, "new", "{pieces:?}");
    }
}
