//! cl100k_base's pre-tokenizer by hand: where its regular expression
//!
//! ```text
//! '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s
//! ```
//!
//! splits a text, found by one pass over its characters instead of a backtracking engine (and
//! without the engine's per-thread caches, which threads counting at once contend for). Each
//! branch below is one alternative of the expression, tried in its order; `tests/equivalence.rs`
//! checks the pieces against the expression's on this repository's files and generated text.

use crate::classes::{self, LETTER, NUMBER, SPACE};

/// Calls `piece` with each piece of `text`, in order; together they are the whole text.
pub(crate) fn cl100k<'t>(text: &'t str, mut piece: impl FnMut(&'t str)) {
    let mut start = 0;
    while start < text.len() {
        let end = cl100k_piece(text, start);
        piece(&text[start..end]);
        start = end;
    }
}

/// Where the piece that starts at byte `i` (below the text's length) ends.
fn cl100k_piece(text: &str, i: usize) -> usize {
    let (c, class, len) = classes::at(text, i);
    // '(?i:[sdmt]|ll|ve|re)
    if c == '\''
        && let Some(end) = contraction(text, i + len)
    {
        return end;
    }
    // [^\r\n\p{L}\p{N}]?+\p{L}++ : a letter, or one character that is none of those followed by
    // a letter (taken possessively: without a letter after it, the branch fails).
    if class & LETTER != 0 {
        return run(text, i, LETTER);
    }
    if c != '\r' && c != '\n' && class & NUMBER == 0 {
        let next = i + len;
        if next < text.len() && classes::at(text, next).1 & LETTER != 0 {
            return run(text, next, LETTER);
        }
    }
    // \p{N}{1,3}+
    if class & NUMBER != 0 {
        let mut end = i + len;
        for _ in 0..2 {
            if end >= text.len() {
                break;
            }
            let (_, class, len) = classes::at(text, end);
            if class & NUMBER == 0 {
                break;
            }
            end += len;
        }
        return end;
    }
    //  ?[^\s\p{L}\p{N}]++[\r\n]*+ : the space is given back when no such character follows it.
    let is_other = |class: u8| class & (SPACE | LETTER | NUMBER) == 0;
    let mut first = i;
    if c == ' ' && i + 1 < text.len() && is_other(classes::at(text, i + 1).1) {
        first = i + 1;
    }
    if is_other(classes::at(text, first).1) {
        let mut end = first;
        while end < text.len() {
            let (_, class, len) = classes::at(text, end);
            if !is_other(class) {
                break;
            }
            end += len;
        }
        let bytes = text.as_bytes();
        while end < bytes.len() && (bytes[end] == b'\r' || bytes[end] == b'\n') {
            end += 1;
        }
        return end;
    }
    // White space from here on: every character is a letter, a number, white space or other.
    let spaces = run(text, i, SPACE);
    // \s++$
    if spaces == text.len() {
        return spaces;
    }
    // \s*[\r\n] : up to the run's last line break.
    if let Some(last) = text[i..spaces].rfind(['\r', '\n']) {
        return i + last + 1;
    }
    // \s+(?!\S) : the run but its last character, which is followed by a non-space.
    let last = text[i..spaces]
        .char_indices()
        .next_back()
        .map_or(0, |(at, _)| at);
    if last > 0 {
        return i + last;
    }
    // \s
    i + len
}

/// Where the characters of class `class` that start at byte `i` end.
fn run(text: &str, i: usize, class: u8) -> usize {
    let mut end = i;
    while end < text.len() {
        let (_, classes, len) = classes::at(text, end);
        if classes & class == 0 {
            break;
        }
        end += len;
    }
    end
}

/// Where `(?i:[sdmt]|ll|ve|re)` matched at byte `i` ends, if it does: case-insensitively as
/// Unicode folds case, so `ſ` (U+017F, a long s) is an `s`.
fn contraction(text: &str, i: usize) -> Option<usize> {
    let mut chars = text[i..].chars();
    let first = chars.next()?;
    if matches!(first, 's' | 'S' | 'ſ' | 'd' | 'D' | 'm' | 'M' | 't' | 'T') {
        return Some(i + first.len_utf8());
    }
    let second = chars.next()?;
    let pair = (first.to_ascii_lowercase(), second.to_ascii_lowercase());
    matches!(pair, ('l', 'l') | ('v', 'e') | ('r', 'e')).then_some(i + 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str) -> Vec<&str> {
        let mut found = Vec::new();
        cl100k(text, |piece| found.push(piece));
        found
    }

    #[test]
    fn each_branch_of_the_expression() {
        assert_eq!(pieces("it's WE'LL"), ["it", "'s", " WE", "'LL"]);
        assert_eq!(pieces("x'ſ"), ["x", "'ſ"]);
        assert_eq!(pieces("'hello (world"), ["'hello", " (", "world"]);
        assert_eq!(pieces("12345"), ["123", "45"]);
        assert_eq!(pieces("a  ...\n\nb"), ["a", " ", " ...\n\n", "b"]);
        assert_eq!(pieces("a \n \n  b"), ["a", " \n \n", " ", " b"]);
        assert_eq!(pieces("end   "), ["end", "   "]);
        assert_eq!(pieces("a\tb"), ["a", "\tb"]);
        assert_eq!(pieces(" 1"), [" ", "1"]);
        assert_eq!(pieces("\r\nx"), ["\r\n", "x"]);
        assert_eq!(pieces(""), Vec::<&str>::new());
    }
}
