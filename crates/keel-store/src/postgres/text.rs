//! Free text with NUL characters on PostgreSQL, whose `TEXT` cannot hold them (SQLite's can): a
//! tool's binary output, say. Such a text is stored escaped behind a marker that begins with a
//! Unicode noncharacter (never in text exchanged between programs): `\` becomes `\\` and NUL
//! becomes `\0`. A text that begins with the marker is escaped too, so every stored text that
//! begins with it is an escaped one and reading is exact. Any other text is stored as it is.

use std::borrow::Cow;

/// What an escaped text begins with.
const MARKER: &str = "\u{FDD0}keel-escaped:";

/// `text` as a `TEXT` column can hold it.
pub(crate) fn to_column(text: &str) -> Cow<'_, str> {
    if !text.contains('\0') && !text.starts_with(MARKER) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(MARKER.len() + text.len() + 8);
    escaped.push_str(MARKER);
    for c in text.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '\0' => escaped.push_str("\\0"),
            c => escaped.push(c),
        }
    }
    Cow::Owned(escaped)
}

/// The text a column holds, as [`to_column`] was given it.
pub(crate) fn from_column(text: String) -> String {
    let Some(escaped) = text.strip_prefix(MARKER) else {
        return text;
    };
    let mut plain = String::with_capacity(escaped.len());
    let mut chars = escaped.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('0') => plain.push('\0'),
                Some(other) => plain.push(other),
                None => plain.push('\\'),
            },
            (c, false) => plain.push(c),
        }
    }
    plain
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_text_reads_back_as_written() {
        for text in [
            "",
            "plain",
            "back\\slash",
            "binary\0output\u{7f}\u{feff}",
            "\0",
            "\\0 is not NUL",
            "\u{FDD0}keel-escaped:looks escaped",
            "\u{FDD0}keel-escaped:\\0",
        ] {
            let stored = to_column(text);
            assert!(!stored.contains('\0'), "{stored:?}");
            assert_eq!(from_column(stored.into_owned()), text);
        }
        assert!(matches!(to_column("plain \\ text"), Cow::Borrowed(_)));
    }
}
