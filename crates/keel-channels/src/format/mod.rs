//! Replies formatted and split for each platform: Telegram HTML, Slack mrkdwn, Discord Markdown.
//!
//! Models answer in Markdown. Each platform gets its own dialect, cut into messages it accepts:
//! [`split`] cuts text at paragraph, line or word boundaries and never leaves a code block open
//! (a cut block is closed and reopened with its language); the converters turn each chunk into
//! the platform's markup, each chunk valid on its own (no tag or marker left open). All
//! functions here are pure.

mod inline;
mod slack;
mod split;
mod telegram;

pub use slack::slack_chunks;
pub use split::split;
pub use telegram::{escape_markdown_v2, telegram_chunks};

/// Telegram's limit on a message's text (characters).
pub const TELEGRAM_LIMIT: usize = 4096;
/// Discord's limit on a message's content (characters).
pub const DISCORD_LIMIT: usize = 2000;
/// Slack's limit on the text of a `section` block (characters).
pub const SLACK_BLOCK_LIMIT: usize = 3000;

/// A zero-width space: put after `@` it keeps a mass mention from pinging.
const ZWSP: char = '\u{200B}';

/// Discord messages for a Markdown reply: Discord renders Markdown itself, so the text is only
/// split (each chunk at most [`DISCORD_LIMIT`] characters) after mass mentions (`@everyone`,
/// `@here`) are neutralised with a zero-width space after the `@`.
pub fn discord_chunks(markdown: &str) -> Vec<String> {
    let safe = markdown
        .replace("@everyone", &format!("@{ZWSP}everyone"))
        .replace("@here", &format!("@{ZWSP}here"));
    split(&safe, DISCORD_LIMIT)
}

/// Splits `markdown` and converts each chunk with `convert` so that every converted chunk has at
/// most `limit` characters: a chunk that grows past it (escapes, markup) is split again, smaller.
fn fit(markdown: &str, limit: usize, convert: &dyn Fn(&str) -> String) -> Vec<String> {
    let mut out = Vec::new();
    fit_into(&mut out, markdown, limit, limit, convert);
    out
}

/// [`fit`], splitting `markdown` at `size` characters.
fn fit_into(
    out: &mut Vec<String>,
    markdown: &str,
    size: usize,
    limit: usize,
    convert: &dyn Fn(&str) -> String,
) {
    for chunk in split(markdown, size) {
        let converted = convert(&chunk);
        let len = converted.chars().count();
        if len <= limit {
            out.push(converted);
            continue;
        }
        let own = chunk.chars().count();
        // Shrink in proportion to the growth, with a margin; always strictly smaller.
        let smaller = (own * limit / len)
            .saturating_sub(limit / 50 + 1)
            .min(own - 1);
        if smaller < 8 {
            // Nothing sensible fits (a pathological limit): cut the converted text plainly.
            out.extend(split(&converted, limit));
        } else {
            fit_into(out, &chunk, smaller, limit, convert);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discord_neutralises_mass_mentions_and_splits() {
        let chunks = discord_chunks("hi @everyone and @here, mail a@b.c");
        assert_eq!(
            chunks,
            vec!["hi @\u{200B}everyone and @\u{200B}here, mail a@b.c".to_string()]
        );
        let long = "word ".repeat(1000);
        let chunks = discord_chunks(&long);
        assert!(chunks.len() >= 3);
        assert!(chunks.iter().all(|c| c.chars().count() <= DISCORD_LIMIT));
    }

    #[test]
    fn fit_resplits_chunks_that_grow() {
        let text = "<&> ".repeat(2000);
        let chunks = fit(&text, 300, &|c| c.replace('&', "&amp;"));
        assert!(
            chunks.iter().all(|c| c.chars().count() <= 300),
            "{chunks:?}"
        );
        let joined: String = chunks.concat().split_whitespace().collect();
        let want: String = text.replace('&', "&amp;").split_whitespace().collect();
        assert_eq!(joined, want);
    }

    #[test]
    fn blank_text_gives_nothing() {
        assert!(discord_chunks("").is_empty());
        assert!(telegram_chunks(" \n\n ").is_empty());
        assert!(slack_chunks("\n").is_empty());
    }
}
