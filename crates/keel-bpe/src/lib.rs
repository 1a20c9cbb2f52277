//! Token counts in OpenAI's `cl100k_base` and `o200k_base` encodings, equal to tiktoken's
//! (`count_ordinary`: special tokens are plain text), for keel's context accounting.
//!
//! The ranks are laid out at build time (see `build.rs`) as flat arrays inside the binary, and
//! the pre-tokenizers are written by hand after the encodings' regular expressions
//! ([`pretokenize`]), so a process builds nothing at start, not even a regex, and keeps in
//! memory only the pages its texts touch.

mod classes;
mod hash;
mod merge;
mod pretokenize;
mod table;

pub use table::{Rank, Table};

/// cl100k_base's pre-tokenizer (OpenAI's `tiktoken`, as tiktoken-rs 0.12 spells it), which
/// [`pretokenize`] follows.
const CL100K_PATTERN: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s";

/// o200k_base's pre-tokenizer, which [`pretokenize`] follows.
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
    pretokenizer: Pretokenizer::Cl100k,
};

static O200K_BASE: Bpe = Bpe {
    table: table!("o200k_base"),
    pattern: O200K_PATTERN,
    pretokenizer: Pretokenizer::O200k,
};

/// A byte-pair encoding: its ranks and its pre-tokenizer.
pub struct Bpe {
    table: Table,
    /// The pre-tokenizer's regular expression.
    pattern: &'static str,
    pretokenizer: Pretokenizer,
}

/// Which of [`pretokenize`]'s pre-tokenizers cuts an encoding's texts (a name rather than a
/// function pointer, so each inlines into its loop).
enum Pretokenizer {
    Cl100k,
    O200k,
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

    /// Tokens in `text`.
    pub fn count(&self, text: &str) -> usize {
        let mut count = 0;
        self.split(text, |piece| count += self.count_piece(piece.as_bytes()));
        count
    }

    /// Calls `piece` with each pre-tokenized piece of `text`, in order: together they are the
    /// whole text.
    pub fn split<'t>(&self, text: &'t str, piece: impl FnMut(&'t str)) {
        match self.pretokenizer {
            Pretokenizer::Cl100k => split_by(text, pretokenize::cl100k_piece, piece),
            Pretokenizer::O200k => split_by(text, pretokenize::o200k_piece, piece),
        }
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

/// Calls `piece` with each piece of `text`, where `piece_end` says the piece at a byte ends.
#[inline(always)]
fn split_by<'t>(
    text: &'t str,
    piece_end: impl Fn(&str, usize) -> usize,
    mut piece: impl FnMut(&'t str),
) {
    let mut start = 0;
    while start < text.len() {
        let end = piece_end(text, start);
        piece(&text[start..end]);
        start = end;
    }
}
