//! Full-text ranking on PostgreSQL: Okapi BM25 exactly as SQLite's FTS5 computes it (`bm25()`
//! with k1 = 1.2, b = 0.75, and FTS5's IDF), over the matches PostgreSQL's GIN index finds in a
//! tsvector column (`migrations_postgres/0004_memory_search.sql`).
//!
//! Why not `ts_rank_cd`: it knows nothing of how rare a word is, so a question sharing a common
//! word with every fact ranks them by how often that word occurs, where BM25 ranks the fact that
//! shares the question's rare word first; and the SQLite store's scores are BM25's, which the
//! memory's fusion of full text and vectors was tuned on. So PostgreSQL finds the matches and
//! counts (how many rows hold each word, each match's term frequencies and length, the table's
//! row count and total length) and the score is computed here, the way FTS5 does, so both
//! stores rank alike.
//!
//! Every query text is made words by keel's one tokenizer
//! ([`keel_platform::session_search::terms_without`]); PostgreSQL turns those words into
//! lexemes with the same function that indexed the rows (`keel_search_text`), and each lexeme
//! is quoted before it becomes a `tsquery`, so no user text is ever read as query syntax.
//!
//! What a search costs: the matches of the asker's rows (found through the GIN index or the
//! owner's rows, whichever PostgreSQL expects fewer of), a count of the rows holding each query
//! word (through the GIN index), and the index's row count and total length (an index-only scan
//! of `messages_fts_words`: FTS5 keeps these two in its index, PostgreSQL has to add them up, so
//! a large index's are kept a minute, see [`Totals`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use keel_core::StoreError;
use sqlx::postgres::{PgConnection, PgRow};

use crate::OrBackend;
use crate::codec::{Place, Value, column};

/// BM25's term-frequency saturation (FTS5's).
const K1: f64 = 1.2;
/// BM25's length normalisation (FTS5's).
const B: f64 = 0.75;

/// The lexemes of the query words `$1` (one string, words separated by spaces), as the rows'
/// text was made lexemes.
const LEXEMES: &str = "SELECT DISTINCT lexeme \
     FROM unnest(to_tsvector('simple', keel_search_text($1))) ORDER BY lexeme";

/// A query as PostgreSQL reads it: the `tsquery` finding any of its lexemes (`$1` of the match
/// queries) and the lexemes (`$2`).
#[derive(Debug)]
pub(super) struct Query {
    /// Each lexeme quoted, joined by `|`.
    pub(super) tsquery: String,
    /// The lexemes.
    pub(super) lexemes: Vec<String>,
}

impl Query {
    /// The query of `terms` (keel's words of the person's text); `None` when PostgreSQL finds no
    /// lexeme in them.
    pub(super) async fn of(
        conn: &mut PgConnection,
        terms: &[String],
    ) -> Result<Option<Query>, StoreError> {
        if terms.is_empty() {
            return Ok(None);
        }
        let lexemes: Vec<String> = sqlx::query_scalar(LEXEMES)
            .bind(terms.join(" "))
            .fetch_all(&mut *conn)
            .await
            .or_backend(|| "cannot read the words of a search".to_string())?;
        if lexemes.is_empty() {
            return Ok(None);
        }
        let quoted: Vec<String> = lexemes
            .iter()
            .map(|lexeme| format!("'{}'", lexeme.replace('\\', "\\\\").replace('\'', "''")))
            .collect();
        Ok(Some(Query {
            tsquery: quoted.join(" | "),
            lexemes,
        }))
    }
}

/// A searched table: what ranking its matches needs besides the matches, as FTS5 counts it.
#[derive(Debug)]
pub(super) struct Index {
    /// The table.
    name: &'static str,
    /// Each lexeme of `$1` (an array) with its number of rows holding it (`lexeme`, `df`).
    frequencies: &'static str,
    /// The rows of the index and their words (`n`, `words`).
    totals: &'static str,
}

/// Every fact is indexed, superseded or not, as in FTS5's `facts_fts`.
pub(super) const FACTS: Index = Index {
    name: "facts",
    frequencies: "SELECT t.lexeme AS lexeme, (SELECT count(*) FROM facts x \
         WHERE x.fts @@ quote_literal(t.lexeme)::tsquery) AS df FROM unnest($1::text[]) AS t(lexeme)",
    totals: "SELECT count(*) AS n, coalesce(sum(fts_words), 0)::bigint AS words FROM facts",
};

/// The searchable messages (`fts_words` is theirs only).
pub(super) const MESSAGES: Index = Index {
    name: "messages",
    frequencies: "SELECT t.lexeme AS lexeme, (SELECT count(*) FROM messages x \
         WHERE x.fts @@ quote_literal(t.lexeme)::tsquery) AS df FROM unnest($1::text[]) AS t(lexeme)",
    totals: "SELECT count(*) AS n, coalesce(sum(fts_words), 0)::bigint AS words FROM messages \
         WHERE fts_words IS NOT NULL",
};

/// An index this large has its row count and total length counted once a minute, not at every
/// search: they move BM25's scores by a hair in a minute, and counting them reads every row's
/// entry of `messages_fts_words`. A smaller one is counted every time (exact, and cheap).
const COUNTED_EVERY_TIME_BELOW: i64 = 50_000;

/// How long the totals of a large index are kept.
const TOTALS_KEPT_FOR: Duration = Duration::from_secs(60);

/// The totals of the large indexes, as last counted (one per store and its clones).
#[derive(Debug, Default)]
pub(crate) struct Totals {
    counted: Mutex<HashMap<&'static str, (Instant, i64, i64)>>,
}

impl Totals {
    /// `index`'s rows and words: as counted less than [`TOTALS_KEPT_FOR`] ago if it is large,
    /// counted now otherwise.
    async fn of(&self, conn: &mut PgConnection, index: &Index) -> Result<(i64, i64), StoreError> {
        let kept = self.lock().get(index.name).copied();
        if let Some((at, rows, words)) = kept
            && at.elapsed() < TOTALS_KEPT_FOR
        {
            return Ok((rows, words));
        }
        let row = sqlx::query(index.totals)
            .fetch_one(&mut *conn)
            .await
            .or_backend(|| format!("cannot count the words of {}", index.name))?;
        let (rows, words): (i64, i64) = (get(&row, "n")?, get(&row, "words")?);
        if rows >= COUNTED_EVERY_TIME_BELOW {
            self.lock()
                .insert(index.name, (Instant::now(), rows, words));
        }
        Ok((rows, words))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, (Instant, i64, i64)>> {
        self.counted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A match query: one row per match of the `tsquery` `$1` and lexeme of `$2` (an array) it
/// holds (`key`, `label`, `length`, `lexeme`, `tf`): `matches_sql!("key column", "label
/// column", "the table as x and its joins", "more of the WHERE clause, and the rest")`. Each
/// match's tsvector has the query's lexemes marked with weight A, and only those are kept. Run
/// unprepared ([`sqlx::query::Query::persistent`] false), so PostgreSQL plans it for the words
/// at hand: a rare word through the GIN index, a common one through the owner's rows.
macro_rules! matches_sql {
    ($key:literal, $label:literal, $from:literal, $rest:literal) => {
        concat!(
            "SELECT ",
            $key,
            " AS key, ",
            $label,
            " AS label, x.fts_words::bigint AS length, f.lexeme AS lexeme, \
             cardinality(f.positions)::bigint AS tf FROM ",
            $from,
            ", unnest(ts_filter(setweight(x.fts, 'A', $2::text[]), '{a}')) AS f \
             WHERE x.fts @@ $1::tsquery ",
            $rest
        )
    };
}
pub(super) use matches_sql;

/// An index's counts for one query (see [`Index`]).
#[derive(Debug, Default)]
pub(super) struct Statistics {
    /// Rows in the index.
    rows: f64,
    /// Their average length in words.
    average: f64,
    /// Each lexeme's inverse document frequency.
    idf: HashMap<String, f64>,
}

impl Statistics {
    /// Reads `index`'s counts for `query` (its totals through `totals`).
    pub(super) async fn read(
        conn: &mut PgConnection,
        index: &Index,
        totals: &Totals,
        query: &Query,
    ) -> Result<Statistics, StoreError> {
        let rows = sqlx::query(index.frequencies)
            .bind(&query.lexemes)
            .fetch_all(&mut *conn)
            .await
            .or_backend(|| format!("cannot count the words of {}", index.name))?;
        let (n, total) = totals.of(conn, index).await?;
        let mut statistics = Statistics {
            rows: n as f64,
            average: total as f64 / (n as f64).max(1.0),
            idf: HashMap::new(),
        };
        for row in &rows {
            let lexeme: String = get(row, "lexeme")?;
            let df: i64 = get(row, "df")?;
            // Rows written since the totals were counted: never more holding a word than rows.
            let n = statistics.rows.max(df as f64);
            statistics.idf.insert(lexeme, idf(n, df as f64));
        }
        Ok(statistics)
    }

    /// The BM25 score (higher is better) of a row `length` words long holding each lexeme of
    /// `frequencies` that many times: FTS5's `-bm25()`.
    pub(super) fn score(&self, length: i64, frequencies: &[(String, i64)]) -> f64 {
        let length = length as f64;
        let average = if self.average > 0.0 {
            self.average
        } else {
            1.0
        };
        frequencies
            .iter()
            .map(|(lexeme, tf)| {
                let idf = self
                    .idf
                    .get(lexeme)
                    .copied()
                    .unwrap_or_else(|| idf(self.rows, 1.0));
                let tf = *tf as f64;
                idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * length / average))
            })
            .sum()
    }
}

/// FTS5's inverse document frequency: never zero or below, so a word in most rows still counts
/// a little.
fn idf(rows: f64, holding: f64) -> f64 {
    let idf = ((rows - holding + 0.5) / (holding + 0.5)).ln();
    if idf <= 0.0 { 1e-6 } else { idf }
}

/// One match: its row's key, length in words, and how often each query lexeme occurs in it.
#[derive(Debug)]
pub(super) struct Match {
    /// The matched row's key (`facts.n`, `messages.id`).
    pub(super) key: i64,
    /// What the caller needs of it besides (`facts.id`, `messages.session_id`).
    pub(super) label: String,
    /// The row's length in words.
    pub(super) length: i64,
    /// (lexeme, occurrences) of the query's lexemes the row holds.
    pub(super) frequencies: Vec<(String, i64)>,
}

/// Gathers the rows of a match query (one row per match and lexeme: `key`, `length`, `lexeme`,
/// `tf`, `label`; rows of one match adjacent) into matches, in the order of their first row.
pub(super) fn matches(rows: &[PgRow]) -> Result<Vec<Match>, StoreError> {
    let mut out: Vec<Match> = Vec::new();
    for row in rows {
        let key: i64 = get(row, "key")?;
        let lexeme: String = get(row, "lexeme")?;
        let tf: i64 = get(row, "tf")?;
        match out.last_mut() {
            Some(last) if last.key == key => last.frequencies.push((lexeme, tf)),
            _ => out.push(Match {
                key,
                label: get(row, "label")?,
                length: get::<Option<i64>>(row, "length")?.unwrap_or(0),
                frequencies: vec![(lexeme, tf)],
            }),
        }
    }
    Ok(out)
}

/// A column of a search row.
pub(super) fn get<'r, T: Value<'r>>(row: &'r PgRow, name: &str) -> Result<T, StoreError> {
    column(row, name, Place::Table("search index"))
}

/// Ranks `matches` best first (ties: the lower key, the older row, first), with their scores.
pub(super) fn ranked(statistics: &Statistics, matches: Vec<Match>) -> Vec<(f64, Match)> {
    let mut scored: Vec<(f64, Match)> = matches
        .into_iter()
        .map(|m| (statistics.score(m.length, &m.frequencies), m))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.key.cmp(&b.1.key)));
    scored
}

/// Words of context a snippet keeps: FTS5's `snippet(…, 16)` as the SQLite store asks for it.
const SNIPPET_WORDS: usize = 16;

/// The passage of `text` around its matches, as FTS5's `snippet()` makes it: the window of
/// [`SNIPPET_WORDS`] words holding the most different query terms (the first such), matched
/// words marked `[like this]`, `…` where text was left out.
pub(crate) fn snippet(text: &str, terms: &[String]) -> String {
    let words: Vec<(usize, usize, bool)> = word_spans(text)
        .map(|(start, end)| {
            let word = text[start..end].to_lowercase();
            (start, end, terms.contains(&word))
        })
        .collect();
    if words.is_empty() {
        return text.to_string();
    }
    let width = SNIPPET_WORDS.min(words.len());
    let mut best = (0, 0);
    for first in 0..=words.len() - width {
        let mut seen: Vec<String> = Vec::new();
        for &(start, end, hit) in &words[first..first + width] {
            let word = text[start..end].to_lowercase();
            if hit && !seen.contains(&word) {
                seen.push(word);
            }
        }
        if seen.len() > best.1 {
            best = (first, seen.len());
        }
    }
    let (first, last) = (best.0, best.0 + width - 1);
    let mut out = String::new();
    let mut at = if first == 0 {
        0
    } else {
        out.push('…');
        words[first].0
    };
    for &(start, end, hit) in &words[first..=last] {
        out.push_str(&text[at..start]);
        if hit {
            out.push('[');
            out.push_str(&text[start..end]);
            out.push(']');
        } else {
            out.push_str(&text[start..end]);
        }
        at = end;
    }
    if last + 1 == words.len() {
        out.push_str(&text[at..]);
    } else {
        out.push('…');
    }
    out
}

/// The byte ranges of `text`'s words: runs of letters and digits.
fn word_spans(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut chars = text.char_indices().peekable();
    std::iter::from_fn(move || {
        let (start, _) = chars.by_ref().find(|(_, c)| c.is_alphanumeric())?;
        let mut end = text.len();
        while let Some(&(i, c)) = chars.peek() {
            if !c.is_alphanumeric() {
                end = i;
                break;
            }
            chars.next();
        }
        Some((start, end))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn a_snippet_marks_the_matches_of_its_window() {
        let text = "Remember this: my dog is called Biscuit and she is a beagle.";
        assert_eq!(
            snippet(text, &terms(&["beagle", "called"])),
            "Remember this: my dog is [called] Biscuit and she is a [beagle]."
        );
        let long: String = (0..40).map(|i| format!("w{i} ")).collect::<String>() + "Zebra!";
        let cut = snippet(&long, &terms(&["zebra"]));
        assert!(cut.starts_with('…') && cut.ends_with("[Zebra]!"), "{cut}");
        let early = snippet(&long, &terms(&["w1"]));
        assert!(
            early.starts_with("w0 [w1]") && early.ends_with('…'),
            "{early}"
        );
        assert_eq!(snippet("-- !!", &terms(&["x"])), "-- !!");
    }

    #[test]
    fn rarer_words_and_shorter_rows_rank_higher() {
        let mut statistics = Statistics {
            rows: 100.0,
            average: 10.0,
            ..Statistics::default()
        };
        statistics.idf.insert("rare".into(), idf(100.0, 2.0));
        statistics.idf.insert("common".into(), idf(100.0, 60.0));
        let rare = statistics.score(10, &[("rare".into(), 1)]);
        let common = statistics.score(10, &[("common".into(), 3)]);
        assert!(rare > common, "{rare} {common}");
        assert!(statistics.score(5, &[("rare".into(), 1)]) > rare);
        assert!(common > 0.0);
    }
}
