//! Telegram HTML read back as plain text: for a part whose HTML Telegram refuses
//! (`can't parse entities`), sent again without `parse_mode`.

/// An HTML part as plain text: tags dropped, the entities keel writes read.
pub fn plain(html: &str) -> String {
    let mut text = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_go_and_entities_are_read() {
        assert_eq!(
            plain("a &lt; b &amp;amp; <code>x&lt;y</code>"),
            "a < b &amp; x<y"
        );
        assert_eq!(
            plain("<a href=\"https://x\">link</a> &quot;q&quot;"),
            "link \"q\""
        );
    }
}
