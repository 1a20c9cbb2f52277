//! The pattern language of `[tools.shell]`'s `allow`, `deny` and `approve` lists.
//!
//! A pattern is matched against one simple command as the policy reads it (see
//! [`super::ShellPolicy`]): its words with quotes and escapes resolved, the command name reduced
//! to its last path component (`/usr/bin/git` is `git`), assignments, redirections and wrappers
//! (`env`, `timeout`, …) taken off. The pattern is split on whitespace into words, and matches
//! when its words match the command's words one for one, from the first to the last:
//!
//! - a word that is exactly `*` matches any number of whole words, none included: `git push *`
//!   matches `git push`, `git push origin main` and `git push --force`;
//! - in any other word, `*` matches any run of characters (none included) and `?` exactly one;
//!   `\` makes the next character literal (`\*` is a star);
//! - everything else matches itself, case included.

use std::fmt;

/// One compiled pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandPattern {
    source: String,
    words: Vec<PatternWord>,
}

/// One word of a pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum PatternWord {
    /// `*` alone: any number of words.
    AnyWords,
    /// A word glob.
    Glob(Vec<GlobToken>),
}

/// One element of a word glob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GlobToken {
    /// `*`: any run of characters.
    Star,
    /// `?`: one character.
    One,
    /// A literal character.
    Char(char),
}

/// Why a pattern could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// The pattern has no words.
    #[error("an empty command pattern matches nothing; remove it or write the command it means")]
    Empty,
    /// The pattern ends in a lone `\`.
    #[error("the command pattern `{0}` ends in a lone `\\`, which escapes nothing")]
    DanglingEscape(String),
}

impl CommandPattern {
    /// Compiles `source` (see the module documentation for the language).
    pub fn new(source: &str) -> Result<Self, PatternError> {
        let words = source
            .split_whitespace()
            .map(|word| {
                compile_word(word).ok_or_else(|| PatternError::DanglingEscape(source.into()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if words.is_empty() {
            return Err(PatternError::Empty);
        }
        Ok(CommandPattern {
            source: source.split_whitespace().collect::<Vec<_>>().join(" "),
            words,
        })
    }

    /// The pattern as written (whitespace collapsed).
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern matches the command `words` (name first).
    pub fn matches<S: AsRef<str>>(&self, words: &[S]) -> bool {
        match_words(&self.words, words)
    }
}

impl fmt::Display for CommandPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// A word of a pattern, or `None` when it ends in a lone backslash.
fn compile_word(word: &str) -> Option<PatternWord> {
    if word == "*" {
        return Some(PatternWord::AnyWords);
    }
    let mut tokens = Vec::new();
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        tokens.push(match c {
            '*' => GlobToken::Star,
            '?' => GlobToken::One,
            '\\' => GlobToken::Char(chars.next()?),
            c => GlobToken::Char(c),
        });
    }
    Some(PatternWord::Glob(tokens))
}

/// Word-list matching: `AnyWords` may swallow any number of words.
fn match_words<S: AsRef<str>>(pattern: &[PatternWord], words: &[S]) -> bool {
    match pattern.split_first() {
        None => words.is_empty(),
        Some((PatternWord::AnyWords, rest)) => {
            (0..=words.len()).any(|skip| match_words(rest, &words[skip..]))
        }
        Some((PatternWord::Glob(glob), rest)) => match words.split_first() {
            Some((word, others)) => {
                let chars: Vec<char> = word.as_ref().chars().collect();
                match_glob(glob, &chars) && match_words(rest, others)
            }
            None => false,
        },
    }
}

/// Glob matching within one word, by dynamic programming over (glob, text) positions.
fn match_glob(glob: &[GlobToken], text: &[char]) -> bool {
    // reachable[j]: the glob prefix read so far matches text[..j].
    let mut reachable = vec![false; text.len() + 1];
    reachable[0] = true;
    for token in glob {
        let mut next = vec![false; text.len() + 1];
        for j in 0..=text.len() {
            match token {
                GlobToken::Star => next[j] = reachable[j] || (j > 0 && next[j - 1]),
                GlobToken::One => next[j] = j > 0 && reachable[j - 1],
                GlobToken::Char(c) => next[j] = j > 0 && reachable[j - 1] && text[j - 1] == *c,
            }
        }
        reachable = next;
    }
    reachable[text.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, command: &str) -> bool {
        let words: Vec<&str> = command.split_whitespace().collect();
        CommandPattern::new(pattern).unwrap().matches(&words)
    }

    #[test]
    fn a_lone_star_matches_any_number_of_words() {
        assert!(matches("git push *", "git push"));
        assert!(matches("git push *", "git push origin main"));
        assert!(!matches("git push *", "git pull"));
        assert!(matches("* --force", "git push --force"));
        assert!(matches("*", "anything at all"));
        assert!(matches("git * main", "git push origin main"));
    }

    #[test]
    fn without_a_star_the_whole_command_must_match() {
        assert!(matches("cargo test", "cargo test"));
        assert!(!matches("cargo test", "cargo test --release"));
        assert!(!matches("cargo test --release", "cargo test"));
    }

    #[test]
    fn stars_and_question_marks_within_a_word() {
        assert!(matches("mkfs*", "mkfs.ext4"));
        assert!(matches("npm run te?t", "npm run test"));
        assert!(!matches("npm run te?t", "npm run tet"));
        assert!(matches("rm -*f*", "rm -rf"));
        assert!(!matches("rm -*f*", "rm -r"));
    }

    #[test]
    fn backslash_makes_a_star_literal() {
        assert!(matches(r"echo \*", "echo *"));
        assert!(!matches(r"echo \*", "echo x"));
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert_eq!(CommandPattern::new("   "), Err(PatternError::Empty));
        assert!(matches!(
            CommandPattern::new(r"echo \"),
            Err(PatternError::DanglingEscape(_))
        ));
    }

    #[test]
    fn whitespace_is_collapsed_in_the_shown_pattern() {
        assert_eq!(
            CommandPattern::new(" git   push  * ").unwrap().as_str(),
            "git push *"
        );
    }
}
