//! Telegram: HTML for `parse_mode=HTML`, and MarkdownV2 escaping.

use super::inline::{Dialect, convert};
use super::{TELEGRAM_LIMIT, fit};

/// Telegram messages for a Markdown reply: HTML for `parse_mode=HTML`, each chunk valid on its
/// own (balanced tags) and at most [`TELEGRAM_LIMIT`] characters of HTML, which bounds the text
/// Telegram counts after parsing the entities.
///
/// `<`, `>`, `&` are escaped everywhere (`"` too in attributes); `**bold**`, `*italic*`,
/// `_italic_`, `` `code` ``, fenced blocks (`<pre><code class="language-x">`) and links to
/// `http`, `https` and `tg` urls are converted; everything else stays text.
pub fn telegram_chunks(markdown: &str) -> Vec<String> {
    fit(markdown, TELEGRAM_LIMIT, &|chunk| convert(chunk, &Html))
}

/// Escapes every character Telegram's MarkdownV2 reserves (`_*[]()~`>#+-=|{}.!` and `\`) with a
/// backslash, so `text` shows as it is.
pub fn escape_markdown_v2(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    for c in text.chars() {
        if "_*[]()~`>#+-=|{}.!\\".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Telegram's HTML.
struct Html;

/// Escapes text for HTML (`quotes` too inside attributes).
fn escape(out: &mut String, text: &str, quotes: bool) {
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' if quotes => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

impl Dialect for Html {
    fn text(&self, out: &mut String, text: &str) {
        escape(out, text, false);
    }
    fn bold(&self, out: &mut String, inner: &str) {
        out.push_str("<b>");
        out.push_str(inner);
        out.push_str("</b>");
    }
    fn italic(&self, out: &mut String, inner: &str) {
        out.push_str("<i>");
        out.push_str(inner);
        out.push_str("</i>");
    }
    fn code(&self, out: &mut String, code: &str) {
        out.push_str("<code>");
        escape(out, code, false);
        out.push_str("</code>");
    }
    fn link(&self, out: &mut String, inner: &str, url: &str) {
        out.push_str("<a href=\"");
        escape(out, url, true);
        out.push_str("\">");
        out.push_str(inner);
        out.push_str("</a>");
    }
    fn link_allowed(&self, url: &str) -> bool {
        let lower = url.to_ascii_lowercase();
        ["http://", "https://", "tg://"]
            .iter()
            .any(|s| lower.starts_with(s) && lower.len() > s.len())
    }
    fn code_block(&self, out: &mut String, lang: &str, code: &str) {
        let lang: String = lang
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || "+-#_.".contains(*c))
            .collect();
        if lang.is_empty() {
            out.push_str("<pre>");
            escape(out, code, false);
            out.push_str("</pre>");
        } else {
            out.push_str("<pre><code class=\"language-");
            out.push_str(&lang);
            out.push_str("\">");
            escape(out, code, false);
            out.push_str("</code></pre>");
        }
    }
}

#[cfg(test)]
#[path = "telegram_tests.rs"]
mod tests;
