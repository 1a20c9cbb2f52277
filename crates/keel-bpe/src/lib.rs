//! Token counts in OpenAI's `cl100k_base` and `o200k_base` encodings, equal to tiktoken's
//! (`count_ordinary`: special tokens are plain text), for keel's context accounting.
//!
//! The ranks are laid out at build time (see `build.rs`) as flat arrays inside the binary, so
//! a process builds nothing at start and keeps in memory only the pages its texts touch.
//! cl100k_base's pre-tokenizer is written by hand ([`pretokenize`]); o200k_base's is its
//! regular expression, compiled on first use.

mod classes;
mod hash;
mod merge;
mod pretokenize;
mod table;

use std::sync::OnceLock;

use fancy_regex::Regex;

pub use table::{Rank, Table};

/// cl100k_base's pre-tokenizer (OpenAI's `tiktoken`, as tiktoken-rs 0.12 spells it).
const CL100K_PATTERN: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s";

/// o200k_base's pre-tokenizer.
const O200K_PATTERN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"|\s*[\r\n]+",
    r"|\s+(?!\S)",
    r"|\s+",
);

macro_rules! table {
    ($name:literal) => {
        Table::new(
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".bytes")),
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".ends")),
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".slots")),
        )
    };
}

static CL100K_BASE: Bpe = Bpe {
    table: table!("cl100k_base"),
    pattern: CL100K_PATTERN,
    by_hand: true,
    splitter: OnceLock::new(),
};

static O200K_BASE: Bpe = Bpe {
    table: table!("o200k_base"),
    pattern: O200K_PATTERN,
    by_hand: false,
    splitter: OnceLock::new(),
};

/// A byte-pair encoding: its ranks and its pre-tokenizer.
pub struct Bpe {
    table: Table,
    /// The pre-tokenizer's regular expression.
    pattern: &'static str,
    /// Whether [`pretokenize`] splits as the expression does (then the expression is never
    /// compiled).
    by_hand: bool,
    splitter: OnceLock<Regex>,
}

impl Bpe {
    /// GPT-4 and GPT-3.5's encoding.
    pub fn cl100k_base() -> &'static Bpe {
        &CL100K_BASE
    }

    /// GPT-4o, GPT-4.1, GPT-5 and the o-series' encoding.
    pub fn o200k_base() -> &'static Bpe {
        &O200K_BASE
    }

    /// The ranks.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The pre-tokenizer's regular expression, as tiktoken spells it: [`Bpe::split`] cuts a
    /// text where it would.
    pub fn pattern(&self) -> &'static str {
        self.pattern
    }

    /// Builds the pre-tokenizer now rather than at the first count (a few milliseconds for a
    /// regular expression; nothing for one written by hand).
    pub fn prepare(&self) {
        if !self.by_hand {
            self.splitter();
        }
    }

    fn splitter(&self) -> &Regex {
        // Both patterns are constants, compiled by every test of `tests/equivalence.rs`.
        self.splitter
            .get_or_init(|| Regex::new(self.pattern).expect("the encoding's pattern compiles"))
    }

    /// Tokens in `text`.
    pub fn count(&self, text: &str) -> usize {
        let mut count = 0;
        let whole = self.split(text, |piece| count += self.count_piece(piece.as_bytes()));
        // The regex engine gave up (its backtracking limit): every byte left is at most one
        // token, so the count stays an upper bound rather than failing.
        count + (text.len() - whole)
    }

    /// Calls `piece` with each pre-tokenized piece of `text`, in order, and answers how much of
    /// the text they cover: all of it, unless the regular expression's engine gave up.
    pub fn split<'t>(&self, text: &'t str, mut piece: impl FnMut(&'t str)) -> usize {
        if self.by_hand {
            pretokenize::cl100k(text, piece);
            return text.len();
        }
        let mut covered = 0;
        for found in self.splitter().find_iter(text) {
            let Ok(found) = found else {
                break;
            };
            piece(found.as_str());
            covered = found.end();
        }
        covered
    }

    /// Tokens in one pre-tokenized piece.
    fn count_piece(&self, piece: &[u8]) -> usize {
        if piece.len() == 1 || self.table.rank(piece).is_some() {
            1
        } else {
            merge::count(&self.table, piece)
        }
    }
}
