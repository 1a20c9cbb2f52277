//! The encodings' pre-tokenizers by hand: where their regular expressions (`CL100K_PATTERN` and
//! `O200K_PATTERN` in `lib.rs`) split a text, found by one pass over its characters instead of
//! a backtracking engine (and without the engine's per-thread caches, which threads counting at
//! once contend for). Each branch below is one alternative of an expression, tried in its order,
//! with the expression's backtracking worked out; `tests/equivalence.rs` checks the pieces
//! against the expressions' on this repository's files, generated text and every code point.

use crate::classes::{self, LETTER, LOWER, NUMBER, SPACE, UPPER};

/// Where cl100k_base's piece that starts at byte `i` (below the text's length) ends.
pub(crate) fn cl100k_piece(text: &str, i: usize) -> usize {
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
        return numbers(text, i);
    }
    //  ?[^\s\p{L}\p{N}]++[\r\n]*+
    if let Some(end) = others(text, i, c) {
        return past(text, end, b"\r\n");
    }
    // White space from here on: every character is a letter, a number, white space or other.
    let spaces = run(text, i, SPACE);
    // \s++$
    if spaces == text.len() {
        return spaces;
    }
    // \s*[\r\n]|\s+(?!\S)|\s
    before_non_space(text, i, spaces).unwrap_or(i + len)
}

/// `\p{N}{1,3}` at byte `i`, where a number is: where it ends.
fn numbers(text: &str, i: usize) -> usize {
    let mut end = i;
    for _ in 0..3 {
        if end >= text.len() {
            break;
        }
        let (_, class, len) = classes::at(text, end);
        if class & NUMBER == 0 {
            break;
        }
        end += len;
    }
    end
}

/// ` ?[^\s\p{L}\p{N}]+` at byte `i`, where `c` is: where its run of characters that are
/// neither white space, letters nor numbers ends, if there is one. The space is given back
/// when no such character follows it.
fn others(text: &str, i: usize, c: char) -> Option<usize> {
    let is_other = |class: u8| class & (SPACE | LETTER | NUMBER) == 0;
    let mut first = i;
    if c == ' ' && i + 1 < text.len() && is_other(classes::at(text, i + 1).1) {
        first = i + 1;
    }
    if !is_other(classes::at(text, first).1) {
        return None;
    }
    let mut end = first;
    while end < text.len() {
        let (_, class, len) = classes::at(text, end);
        if !is_other(class) {
            break;
        }
        end += len;
    }
    Some(end)
}

/// Where the bytes from `end` that are among `these` (ASCII) end.
fn past(text: &str, end: usize, these: &[u8]) -> usize {
    let rest = &text.as_bytes()[end..];
    end + rest.iter().take_while(|byte| these.contains(byte)).count()
}

/// For the white space from byte `i` to `spaces`, which a non-space follows: `\s*[\r\n]`,
/// up to the run's last line break; else `\s+(?!\S)`, the run but its last character; `None`
/// for a run of one character and no line break.
fn before_non_space(text: &str, i: usize, spaces: usize) -> Option<usize> {
    if let Some(last) = text[i..spaces].rfind(['\r', '\n']) {
        return Some(i + last + 1);
    }
    let last = text[i..spaces]
        .char_indices()
        .next_back()
        .map_or(0, |(at, _)| at);
    (last > 0).then_some(i + last)
}

/// Where o200k_base's piece that starts at byte `i` (below the text's length) ends:
///
/// ```text
/// [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
/// |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
/// |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
/// ```
///
/// (`UPPER` and `LOWER` are the two bracketed letter classes.)
pub(crate) fn o200k_piece(text: &str, i: usize) -> usize {
    let (c, class, len) = classes::at(text, i);
    // The two word branches start after an optional character that is neither a line break, a
    // letter nor a number; with it first, then without.
    let leading = c != '\r' && c != '\n' && class & (LETTER | NUMBER) == 0;
    // Each start, and where the run of UPPER from it ends.
    let starts = [leading.then_some(i + len), Some(i)].map(|j| j.map(|j| (j, run(text, j, UPPER))));
    // UPPER* LOWER+ : after the longest run of UPPER, a LOWER run; or, giving back UPPER
    // characters, the last one that is also LOWER.
    for (j, upper) in starts.into_iter().flatten() {
        let end = if upper < text.len() && classes::at(text, upper).1 & LOWER != 0 {
            Some(run(text, upper, LOWER))
        } else {
            text[j..upper]
                .char_indices()
                .rev()
                .find(|&(_, c)| classes::of(c) & LOWER != 0)
                .map(|(at, c)| j + at + c.len_utf8())
        };
        if let Some(end) = end {
            return end + suffix(text, end);
        }
    }
    // UPPER+ LOWER*
    for (j, upper) in starts.into_iter().flatten() {
        if upper > j {
            let end = run(text, upper, LOWER);
            return end + suffix(text, end);
        }
    }
    // \p{N}{1,3}
    if class & NUMBER != 0 {
        return numbers(text, i);
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n/]*
    if let Some(end) = others(text, i, c) {
        return past(text, end, b"\r\n/");
    }
    // White space: \s*[\r\n]+ (before \s+(?!\S) here, so a run that ends the text stops at
    // its last line break), \s+(?!\S), \s+.
    let spaces = run(text, i, SPACE);
    if let Some(last) = text[i..spaces].rfind(['\r', '\n']) {
        return i + last + 1;
    }
    if spaces == text.len() {
        return spaces;
    }
    before_non_space(text, i, spaces).unwrap_or(spaces)
}

/// The length of the contraction `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at byte `i`, or 0.
fn suffix(text: &str, i: usize) -> usize {
    if text.as_bytes().get(i) == Some(&b'\'') {
        contraction(text, i + 1).map_or(0, |end| end - i)
    } else {
        0
    }
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
    use crate::Bpe;

    fn pieces(text: &str) -> Vec<&str> {
        let mut found = Vec::new();
        Bpe::cl100k_base().split(text, |piece| found.push(piece));
        found
    }

    fn o200k_pieces(text: &str) -> Vec<&str> {
        let mut found = Vec::new();
        Bpe::o200k_base().split(text, |piece| found.push(piece));
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

    #[test]
    fn each_branch_of_o200k_bases_expression() {
        assert_eq!(o200k_pieces("HelloWorld's"), ["Hello", "World's"]);
        assert_eq!(o200k_pieces("ABCdef GHI"), ["ABCdef", " GHI"]);
        assert_eq!(o200k_pieces("1234"), ["123", "4"]);
        assert_eq!(o200k_pieces("a //x\n\n"), ["a", " //", "x", "\n\n"]);
        assert_eq!(o200k_pieces("x  \n  "), ["x", "  \n", "  "]);
        assert_eq!(o200k_pieces("x  y"), ["x", " ", " y"]);
    }
}
