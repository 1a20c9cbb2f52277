//! Slack: mrkdwn for `section` blocks.

use super::inline::{Dialect, convert};
use super::{SLACK_BLOCK_LIMIT, fit};

/// Slack messages for a Markdown reply, in mrkdwn, each at most [`SLACK_BLOCK_LIMIT`]
/// characters (a `section` block's text limit).
///
/// `**b**` becomes `*b*`, `*i*` and `_i_` become `_i_`, `[t](u)` becomes `<u|t>` (for `http`,
/// `https` and `mailto` urls; others stay text), code spans and fences are kept (a fence's
/// language is dropped: Slack shows none), and `&`, `<`, `>` are escaped as `&amp;`, `&lt;`,
/// `&gt;` everywhere but in the link markup made here.
pub fn slack_chunks(markdown: &str) -> Vec<String> {
    fit(markdown, SLACK_BLOCK_LIMIT, &|chunk| {
        convert(chunk, &Mrkdwn)
    })
}

/// Slack's mrkdwn.
struct Mrkdwn;

/// Escapes Slack's three control characters.
fn escape(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            c => out.push(c),
        }
    }
}

impl Dialect for Mrkdwn {
    fn text(&self, out: &mut String, text: &str) {
        escape(out, text);
    }
    fn bold(&self, out: &mut String, inner: &str) {
        out.push('*');
        out.push_str(inner);
        out.push('*');
    }
    fn italic(&self, out: &mut String, inner: &str) {
        out.push('_');
        out.push_str(inner);
        out.push('_');
    }
    fn code(&self, out: &mut String, code: &str) {
        out.push('`');
        escape(out, code);
        out.push('`');
    }
    fn link(&self, out: &mut String, inner: &str, url: &str) {
        out.push('<');
        out.push_str(url);
        out.push('|');
        out.push_str(&inner.replace('|', "\u{2223}"));
        out.push('>');
    }
    fn link_allowed(&self, url: &str) -> bool {
        let lower = url.to_ascii_lowercase();
        !url.contains(['<', '>', '|'])
            && ["http://", "https://", "mailto:"]
                .iter()
                .any(|s| lower.starts_with(s) && lower.len() > s.len())
    }
    fn code_block(&self, out: &mut String, _lang: &str, code: &str) {
        out.push_str("```\n");
        escape(out, code);
        out.push_str("\n```");
    }
}

#[cfg(test)]
#[path = "slack_tests.rs"]
mod tests;
