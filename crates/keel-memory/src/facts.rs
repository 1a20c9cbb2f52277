//! Writing known facts: what a new fact needs ([`NewFact`]), and the rule that decides which
//! older fact it replaces ([`subject_key`]).
//!
//! The supersede rule: a fact has a key, the subject it is about. The `remember` tool may name
//! it (`key`); otherwise it is the words before the fact's first "is"/"are"/"was"/"=" or ":",
//! without leading possessives, articles and fillers, when those are one to six words ("my
//! deploy target is eu-west-3" → `deploy target`). A new fact with the key of a current fact of
//! the same user supersedes it; a fact without a key supersedes nothing.

use keel_platform::known_facts::MAX_FACT_CHARS;

/// What the caller knows about a fact to remember.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewFact {
    /// The fact, in words.
    pub text: String,
    /// Its subject, when the caller names it; derived from the text otherwise.
    pub key: Option<String>,
    /// The session it was learned in.
    pub source_session: Option<String>,
    /// The seq of the message it came from.
    pub source_seq: Option<u64>,
    /// How sure the caller is, in [0, 1] (1 when not said).
    pub confidence: Option<f32>,
    /// How much it matters, in [0, 1] (the importance scorer's when not said).
    pub importance: Option<f32>,
}

/// Why a fact was not kept.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FactError {
    /// The fact is empty or too long; nothing was stored.
    #[error("{0}")]
    Invalid(String),
    /// The store failed; nothing was stored.
    #[error("{0}")]
    Store(String),
}

/// The most words a derived key may have.
const MAX_KEY_WORDS: usize = 6;

/// Words dropped from the front of a derived key.
const LEADING_FILLER: &[&str] = &[
    "my", "our", "your", "the", "a", "an", "actually", "now", "so", "also", "and", "but", "btw",
    "note", "that", "remember", "please", "user's", "users", "user", "current", "new",
];

/// The copulas a derived key ends before.
const COPULAS: &[&str] = &["is", "are", "was", "were", "="];

/// The key of `text` by the rule in the module documentation, lower case; `None` when it has
/// no short subject.
pub fn subject_key(text: &str) -> Option<String> {
    let lower = text.to_lowercase();
    let head = lower.split(':').next().unwrap_or("");
    let words: Vec<&str> = head
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '='))
        .filter(|w| !w.is_empty())
        .collect();
    let end = words.iter().position(|w| COPULAS.contains(w));
    let subject = match end {
        Some(end) => &words[..end],
        // "deploy target: eu-west-3"
        None if head.len() < lower.len() => &words[..],
        None => return None,
    };
    let start = subject
        .iter()
        .position(|w| !LEADING_FILLER.contains(w))
        .unwrap_or(subject.len());
    normal_key(&subject[start..].join(" "))
}

/// A caller's key as stored: lower case, words of letters and digits joined by single spaces;
/// `None` when it has no words or more than six.
pub fn normal_key(key: &str) -> Option<String> {
    let words: Vec<String> = key
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    (!words.is_empty() && words.len() <= MAX_KEY_WORDS).then(|| words.join(" "))
}

/// Checks a fact's text: not blank, at most [`MAX_FACT_CHARS`] characters.
pub fn check_text(text: &str) -> Result<&str, FactError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(FactError::Invalid("a fact needs some text".into()));
    }
    let chars = text.chars().count();
    if chars > MAX_FACT_CHARS {
        return Err(FactError::Invalid(format!(
            "a fact is at most {MAX_FACT_CHARS} characters; this one has {chars}: keep one fact \
             short, or split it"
        )));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_subject_before_the_verb() {
        let key = |text: &str| subject_key(text);
        assert_eq!(
            key("my deploy target is eu-west-3").as_deref(),
            Some("deploy target")
        );
        assert_eq!(
            key("Actually, my deploy target is now us-east-1").as_deref(),
            Some("deploy target")
        );
        assert_eq!(
            key("Deploy target: eu-west-3").as_deref(),
            Some("deploy target")
        );
        assert_eq!(
            key("The user's favourite editor is Helix").as_deref(),
            Some("favourite editor")
        );
        assert_eq!(key("I like tea"), None);
        assert_eq!(key("is it?"), None);
        assert_eq!(
            key("a very long subject with far too many words in it is bad"),
            None
        );
    }

    #[test]
    fn caller_keys_are_normalized() {
        assert_eq!(
            normal_key("  Deploy-Target ").as_deref(),
            Some("deploy target")
        );
        assert_eq!(normal_key("--"), None);
    }

    #[test]
    fn text_is_checked() {
        assert!(check_text("  ").is_err());
        assert!(check_text(&"x".repeat(MAX_FACT_CHARS + 1)).is_err());
        assert_eq!(check_text(" ok ").unwrap(), "ok");
    }
}
