//! How much a message or fact matters, in [0, 1], by keel's own cheap, deterministic rules:
//! decisions, preferences, corrections and things to remember score high; facts with numbers,
//! names or paths a little higher than plain talk; greetings and acknowledgements low.
//!
//! The rules read words, not meaning: they are a prior for ranking what to recall, not a
//! judgement. [`ImportanceScorer`] lets a model scorer replace them.

use std::sync::LazyLock;

use aho_corasick::AhoCorasick;
use keel_core::extension::Extension;
use keel_core::message::{Message, Role};

/// Scores texts for importance.
pub trait ImportanceScorer: Send + Sync {
    /// The importance of `text`, in [0, 1].
    fn score(&self, text: &str) -> f32;
}

/// The rule-based scorer (see [`importance`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Rules;

impl ImportanceScorer for Rules {
    fn score(&self, text: &str) -> f32 {
        importance(text)
    }
}

/// Scores what a person or the model says as it joins a run, for retrieval to rank: user and
/// assistant messages with text that are not the loop's own and have no score yet.
#[derive(Clone, Copy, Debug, Default)]
pub struct Importance;

impl Extension for Importance {
    fn name(&self) -> &'static str {
        "importance"
    }

    fn on_message(&self, message: &mut Message) {
        if matches!(message.role, Role::User | Role::Assistant)
            && !message.content.is_empty()
            && !message.is_internal()
            && message.meta.importance.is_none()
        {
            message.meta.importance = Some(importance(&message.content));
        }
    }
}

/// What plain talk scores.
const BASE: f32 = 0.3;

/// What a greeting or an acknowledgement scores.
const SMALL_TALK: f32 = 0.05;

/// Whole messages that only greet, thank or acknowledge.
const SMALL_TALK_MESSAGES: &[&str] = &[
    "hi",
    "hello",
    "hey",
    "yo",
    "thanks",
    "thank you",
    "thx",
    "ty",
    "ok",
    "okay",
    "k",
    "cool",
    "great",
    "nice",
    "sure",
    "yes",
    "yep",
    "no",
    "nope",
    "got it",
    "bye",
    "goodbye",
    "see you",
    "good morning",
    "good night",
    "good evening",
    "sounds good",
    "perfect",
    "awesome",
    "lol",
    "hi there",
    "hello there",
    "thanks a lot",
    "many thanks",
    "ok thanks",
    "okay thanks",
];

/// Phrases that mark a signal, with what each adds.
const SIGNALS: &[(&[&str], f32)] = &[
    // Decisions.
    (
        &[
            "we decided",
            "i decided",
            "decision",
            "let's go with",
            "lets go with",
            "we'll use",
            "we will use",
            "going with",
            "agreed",
            "from now on",
            "we chose",
            "i chose",
        ],
        0.35,
    ),
    // Preferences.
    (
        &[
            "i prefer",
            "i like",
            "i love",
            "i don't like",
            "i dont like",
            "i hate",
            "i want",
            "my favorite",
            "my favourite",
            "please always",
            "please never",
            "always use",
            "never use",
            "don't ever",
            "call me",
        ],
        0.3,
    ),
    // Corrections.
    (
        &[
            "actually",
            "correction",
            "that's wrong",
            "thats wrong",
            "not correct",
            "i meant",
            "instead of",
            "no longer",
            "changed to",
            "moved to",
        ],
        0.25,
    ),
    // Explicit requests to remember.
    (
        &[
            "remember",
            "note that",
            "don't forget",
            "keep in mind",
            "for the record",
        ],
        0.3,
    ),
    // Statements about the user or their things.
    (&["my ", "our ", "i am ", "i'm ", "i work", "i live"], 0.1),
];

/// Every phrase of [`SIGNALS`] in one automaton, so a text is read once for all of them (a
/// search per phrase built a searcher per phrase per message), and the signal each belongs to.
static PHRASES: LazyLock<(AhoCorasick, Vec<usize>)> = LazyLock::new(|| {
    let (phrases, signals): (Vec<&str>, Vec<usize>) = SIGNALS
        .iter()
        .enumerate()
        .flat_map(|(signal, (phrases, _))| phrases.iter().map(move |phrase| (*phrase, signal)))
        .unzip();
    // Building fails only past the automaton's size limits; ~50 short phrases are far below
    // them, and every test that scores a text builds it.
    let automaton = AhoCorasick::new(phrases).expect("plain phrases build an automaton");
    (automaton, signals)
});

/// The most bytes of a text the rules read: importance is a prior, and a long answer's first
/// few kilobytes say what it is about.
pub const SCORED_BYTES: usize = 4096;

/// The rule-based importance of `text`, in [0, 1]. Reads at most [`SCORED_BYTES`] of it, so a
/// message costs the same to score however long it is.
pub fn importance(text: &str) -> f32 {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return 0.0;
    }
    let mut end = trimmed.len().min(SCORED_BYTES);
    while !trimmed.is_char_boundary(end) {
        end -= 1;
    }
    let trimmed = &trimmed[..end];
    let lower = trimmed.to_lowercase();
    if lower.len() <= 40 && is_small_talk(&lower) {
        return SMALL_TALK;
    }
    let mut score = BASE;
    let mut found = [false; SIGNALS.len()];
    for phrase in PHRASES.0.find_overlapping_iter(&lower) {
        let at = phrase.start();
        // A phrase counts at the start of a word: at the start, or after whitespace.
        if at == 0 || lower[..at].ends_with(char::is_whitespace) {
            found[PHRASES.1[phrase.pattern().as_usize()]] = true;
        }
    }
    for ((_, weight), found) in SIGNALS.iter().zip(found) {
        if found {
            score += weight;
        }
    }
    if trimmed.chars().any(|c| c.is_ascii_digit()) {
        score += 0.1;
    }
    if has_path(trimmed) {
        score += 0.15;
    }
    if has_name(trimmed) {
        score += 0.1;
    }
    score.clamp(0.0, 1.0)
}

/// Whether a short, lower-case text only greets, thanks or acknowledges (or has no words).
fn is_small_talk(lower: &str) -> bool {
    let bare: String = lower
        .chars()
        .filter(|c| c.is_alphanumeric() || c.is_whitespace() || *c == '\'')
        .collect();
    let bare = bare.split_whitespace().collect::<Vec<_>>().join(" ");
    bare.is_empty() || SMALL_TALK_MESSAGES.contains(&bare.as_str())
}

/// A word that looks like a path or file name: `ops/deploy.sh`, `~/.config`, `Cargo.toml`.
fn has_path(text: &str) -> bool {
    text.split_whitespace().any(|word| {
        let word = word.trim_matches(|c: char| matches!(c, ',' | ';' | '(' | ')' | '"' | '`'));
        let word = word.trim_end_matches(['.', '?', '!', ':']);
        let slash = word.contains('/') && word.chars().any(char::is_alphanumeric);
        let extension = word.rsplit_once('.').is_some_and(|(stem, ext)| {
            !stem.is_empty()
                && (1..=4).contains(&ext.len())
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && ext.chars().any(|c| c.is_ascii_alphabetic())
        });
        slash || extension || word.starts_with("~/")
    })
}

/// A capitalized word that does not start a sentence: a name (`Berlin`, `Postgres`, `Ada`).
fn has_name(text: &str) -> bool {
    let mut sentence_start = true;
    for word in text.split_whitespace() {
        let first = word.chars().next();
        if !sentence_start && first.is_some_and(char::is_uppercase) && word.len() > 1 && word != "I"
        {
            return true;
        }
        sentence_start = word.ends_with(['.', '!', '?', ':']);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_talk_scores_low() {
        for text in [
            "hi",
            "Thanks!",
            "ok",
            "Got it.",
            "  hello there  ",
            "👍",
            "...",
        ] {
            assert!(
                importance(text) <= SMALL_TALK,
                "{text}: {}",
                importance(text)
            );
        }
        assert_eq!(importance("   "), 0.0);
    }

    #[test]
    fn decisions_preferences_and_corrections_score_high() {
        for text in [
            "We decided to ship on Thursdays.",
            "I prefer tabs over spaces",
            "Actually, the meeting moved to 3pm",
            "Please remember that I'm vegetarian",
            "From now on use British spelling",
        ] {
            assert!(importance(text) >= 0.55, "{text}: {}", importance(text));
        }
    }

    #[test]
    fn facts_with_numbers_names_and_paths_beat_plain_talk() {
        let plain = importance("what do you think about that");
        assert_eq!(plain, BASE);
        assert!(importance("the config lives in ops/deploy.toml") > plain);
        assert!(importance("the build takes 12 minutes") > plain);
        assert!(importance("the team lead is Grace") > plain);
        assert!(importance("my deploy target is eu-west-3") > importance("the weather is mild"));
    }

    #[test]
    fn scores_stay_in_range() {
        let everything = "Actually we decided, remember: I prefer my config in ~/x/y.toml with \
                          port 8080 for Grace";
        assert_eq!(importance(everything), 1.0);
        assert!(importance(&"word ".repeat(100_000)) <= 1.0);
    }

    #[test]
    fn phrases_count_at_a_word_start_on_any_line_and_only_in_the_read_part() {
        assert!(importance("ok.\nWe decided to use Postgres") > 0.6);
        assert_eq!(importance("misremembered"), BASE);
        // A phrase met inside a word first still counts where it later starts one.
        assert_eq!(importance("misremembered, so remember it"), BASE + 0.3);
        assert_eq!(importance("tmy notes, my notes"), BASE + 0.1);
        let long = format!("{} we decided", "x ".repeat(SCORED_BYTES));
        assert_eq!(importance(&long), BASE);
        // A multi-byte character across the cut is not split.
        let cut = format!("{}é we decided", "x".repeat(SCORED_BYTES - 1));
        assert_eq!(importance(&cut), BASE);
    }
}
