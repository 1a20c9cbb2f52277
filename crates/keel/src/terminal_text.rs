//! Text from outside (model answers, provider errors, tool output, stored transcripts) made
//! safe to print: terminal control sequences are removed, so a body cannot recolour the
//! terminal, retitle the window, or overwrite what was printed before with a carriage return
//! or backspaces. Newlines and tabs stay.

use std::borrow::Cow;

/// `text` without escape sequences (CSI `ESC [ … final`, OSC `ESC ] … BEL` or `ESC \`, and
/// other `ESC x` pairs) and without control characters other than newline and tab (C0, DEL
/// and the C1 range, whose `0x9B` some terminals read as CSI). A bare carriage return is
/// dropped; `\r\n` keeps its newline.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => skip_escape(&mut chars),
            '\n' | '\t' => out.push(c),
            c if is_control(c) => {}
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// True for the characters a terminal may act on rather than show.
fn is_control(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// Consumes the rest of an escape sequence whose `ESC` was just read.
fn skip_escape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    match chars.next() {
        // CSI: parameters and intermediates, up to a final byte in @..~.
        Some('[') => {
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
        // OSC, DCS, SOS, PM, APC: a string up to BEL or ST (`ESC \`).
        Some(']' | 'P' | 'X' | '^' | '_') => {
            while let Some(c) = chars.next() {
                if c == '\u{7}' {
                    break;
                }
                if c == '\u{1b}' {
                    if chars.peek() == Some(&'\\') {
                        chars.next();
                    }
                    break;
                }
            }
        }
        // Any other escape is ESC and one character.
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_title_and_overwrite_tricks_are_removed() {
        assert_eq!(terminal_safe("\u{1b}[31mred\u{1b}[0m"), "red");
        assert_eq!(terminal_safe("a\u{1b}]0;owned\u{7}b"), "ab");
        assert_eq!(terminal_safe("a\u{1b}]2;t\u{1b}\\b"), "ab");
        assert_eq!(terminal_safe("rm -rf /\rls"), "rm -rf /ls");
        assert_eq!(terminal_safe("safe\u{8}\u{8}\u{8}\u{8}evil"), "safeevil");
        assert_eq!(terminal_safe("c1\u{9b}31mx"), "c131mx");
        assert_eq!(terminal_safe("bell\u{7} \u{1b}c"), "bell ");
    }

    #[test]
    fn newlines_tabs_and_plain_text_stay() {
        assert!(matches!(
            terminal_safe("a\tb\nc é"),
            Cow::Borrowed("a\tb\nc é")
        ));
        assert_eq!(terminal_safe("line\r\nnext"), "line\nnext");
    }
}
