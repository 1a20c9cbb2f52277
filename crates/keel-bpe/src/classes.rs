//! The Unicode classes the pre-tokenizers ask about, one bit each, read from tables laid out at
//! build time from regex-syntax's (`build.rs`): the same classes the encodings' regular
//! expressions would test, so a hand-written pre-tokenizer splits exactly where they do.

include!(concat!(env!("OUT_DIR"), "/classes.rs"));

/// `\p{L}`: a letter.
pub(crate) const LETTER: u8 = 1;
/// `\p{N}`: a number.
pub(crate) const NUMBER: u8 = 2;
/// `\s`: Unicode white space.
pub(crate) const SPACE: u8 = 4;
/// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`: o200k_base's capital-like class.
pub(crate) const UPPER: u8 = 8;
/// `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`: o200k_base's small-like class.
pub(crate) const LOWER: u8 = 16;

/// The classes of `c`.
pub(crate) fn of(c: char) -> u8 {
    let c = u32::from(c);
    if c < 128 {
        return ASCII[c as usize];
    }
    // The run that holds `c` is the last that starts at or below it (the first starts at 128).
    let run = STARTS.partition_point(|&start| start <= c);
    RUNS[run - 1]
}

/// The character at byte `i` of `text` (a character boundary, below its length), its classes
/// and its length in bytes.
#[inline]
pub(crate) fn at(text: &str, i: usize) -> (char, u8, usize) {
    let byte = text.as_bytes()[i];
    if byte < 128 {
        return (char::from(byte), ASCII[usize::from(byte)], 1);
    }
    let c = text[i..]
        .chars()
        .next()
        .unwrap_or(char::REPLACEMENT_CHARACTER);
    (c, of(c), c.len_utf8())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classes_of_a_few_characters() {
        assert_eq!(of('a'), LETTER | LOWER);
        assert_eq!(of('Z'), LETTER | UPPER);
        assert_eq!(of('7'), NUMBER);
        assert_eq!(of(' '), SPACE);
        assert_eq!(of('\u{a0}'), SPACE);
        assert_eq!(of('\u{3000}'), SPACE);
        assert_eq!(of('\''), 0);
        assert_eq!(of('é'), LETTER | LOWER);
        assert_eq!(of('日'), LETTER | UPPER | LOWER);
        assert_eq!(of('\u{301}'), UPPER | LOWER);
        assert_eq!(of('½'), NUMBER);
        assert_eq!(of('😀'), 0);
        assert_eq!(of(char::MAX), 0);
        assert_eq!(at("aé", 1), ('é', LETTER | LOWER, 2));
    }
}
