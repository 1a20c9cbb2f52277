use super::*;

fn one(md: &str) -> String {
    let chunks = slack_chunks(md);
    assert_eq!(chunks.len(), 1, "{chunks:?}");
    chunks.into_iter().next().unwrap_or_default()
}

#[test]
fn converts_to_mrkdwn() {
    assert_eq!(one("**b** and *i* and _j_"), "*b* and _i_ and _j_");
    assert_eq!(
        one("[the docs](https://x.io/?a=1)"),
        "<https://x.io/?a=1|the docs>"
    );
    assert_eq!(one("[x](ftp://x)"), "[x](ftp://x)");
    assert_eq!(one("`a<b`"), "`a&lt;b`");
}

#[test]
fn escapes_control_characters_outside_link_markup() {
    assert_eq!(
        one("a < b & c > <!channel>"),
        "a &lt; b &amp; c &gt; &lt;!channel&gt;"
    );
    assert_eq!(one("[a & b](https://x.io)"), "<https://x.io|a &amp; b>");
}

#[test]
fn keeps_code_fences() {
    assert_eq!(
        one("```rust\nlet a = b && c;\n```"),
        "```\nlet a = b &amp;&amp; c;\n```"
    );
}

#[test]
fn long_answers_fit_a_section_block_even_when_escapes_grow() {
    let md = "a&b ".repeat(2000);
    let chunks = slack_chunks(&md);
    assert!(chunks.len() >= 4);
    assert!(
        chunks
            .iter()
            .all(|c| c.chars().count() <= SLACK_BLOCK_LIMIT)
    );
    let joined: String = chunks.concat().split_whitespace().collect();
    assert_eq!(joined, "a&amp;b".repeat(2000));
}
