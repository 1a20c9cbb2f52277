//! A raw mail (RFC 5322 + MIME) read with `mail-parser`: who sent it, its ids and thread, its
//! text (text/plain preferred; else its HTML with the tags stripped and entities decoded) and
//! its attachments, each at most a given size (a larger one is dropped and the text says so).
//! A mail without `From` or `Message-ID`, or whose MIME tree is broken (a multipart whose
//! boundary is missing or never used), is refused with the reason.

use keel_platform::IncomingAttachment;
use mail_parser::{MessageParser, MimeHeaders, PartType};

/// A mail, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mail {
    /// Its `Message-ID`, without the angle brackets.
    pub message_id: String,
    /// The sender's address, lowercased.
    pub from: String,
    /// The sender's name, if the `From` header gives one.
    pub from_name: Option<String>,
    /// Its subject (empty when it has none).
    pub subject: String,
    /// The `Message-ID` of its thread's first mail: the first of `References`, else
    /// `In-Reply-To`, else its own.
    pub thread: String,
    /// `References` for a reply to it: its own `References` (or `In-Reply-To`) and its id,
    /// each in angle brackets, space-separated.
    pub references: String,
    /// Its text.
    pub text: String,
    /// Its attachments, each within the limit.
    pub attachments: Vec<IncomingAttachment>,
    /// The names of attachments dropped for their size.
    pub dropped: Vec<String>,
}

/// Reads `raw`, keeping attachments of at most `max_attachment_bytes`.
pub fn parse(raw: &[u8], max_attachment_bytes: usize) -> Result<Mail, String> {
    let message = MessageParser::default()
        .parse(raw)
        .ok_or("the mail cannot be parsed at all")?;
    for part in &message.parts {
        let says_multipart = part
            .content_type()
            .is_some_and(|ct| ct.ctype().eq_ignore_ascii_case("multipart"));
        let holds_parts =
            matches!(&part.body, PartType::Multipart(children) if !children.is_empty());
        if says_multipart != holds_parts {
            return Err(
                "the MIME tree is malformed: a multipart part holds no parts (its \
                        boundary is missing or never used)"
                    .into(),
            );
        }
    }
    let message_id = message
        .message_id()
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .ok_or("the mail has no Message-ID")?
        .to_string();
    let sender = message
        .from()
        .and_then(|from| from.first())
        .ok_or("the mail has no From")?;
    let from = sender
        .address()
        .map(|address| address.trim().to_lowercase())
        .filter(|address| address.contains('@'))
        .ok_or("the mail's From has no address")?;
    let from_name = sender
        .name()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from);
    let ids = |value: &mail_parser::HeaderValue| -> Vec<String> {
        match value {
            mail_parser::HeaderValue::Text(id) => vec![id.to_string()],
            mail_parser::HeaderValue::TextList(ids) => {
                ids.iter().map(|id| id.to_string()).collect()
            }
            _ => Vec::new(),
        }
    };
    let mut chain = ids(message.references());
    if chain.is_empty() {
        chain = ids(message.in_reply_to());
    }
    let thread = chain.first().cloned().unwrap_or_else(|| message_id.clone());
    chain.push(message_id.clone());
    let references = chain
        .iter()
        .map(|id| format!("<{id}>"))
        .collect::<Vec<_>>()
        .join(" ");

    let plain = message.text_bodies().find_map(|part| match &part.body {
        PartType::Text(text) => Some(text.to_string()),
        _ => None,
    });
    let text = match plain {
        Some(text) => text,
        None => message
            .html_bodies()
            .find_map(|part| match &part.body {
                PartType::Html(html) => Some(html_to_text(html)),
                PartType::Text(text) => Some(text.to_string()),
                _ => None,
            })
            .unwrap_or_default(),
    };

    let mut attachments = Vec::new();
    let mut dropped = Vec::new();
    for (n, part) in message.attachments().enumerate() {
        let name = part
            .attachment_name()
            .map(plain_name)
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| format!("attachment-{}", n + 1));
        let content = part.contents();
        if content.len() > max_attachment_bytes {
            dropped.push(format!(
                "{name} ({} bytes; at most {max_attachment_bytes} are kept)",
                content.len()
            ));
            continue;
        }
        let media_type = part.content_type().map(|ct| match ct.subtype() {
            Some(sub) => format!("{}/{}", ct.ctype(), sub).to_lowercase(),
            None => ct.ctype().to_lowercase(),
        });
        attachments.push(IncomingAttachment {
            name,
            media_type: media_type.filter(|t| t.contains('/')),
            content: content.to_vec(),
        });
    }
    Ok(Mail {
        message_id,
        from,
        from_name,
        subject: message.subject().unwrap_or_default().trim().to_string(),
        thread,
        references,
        text,
        attachments,
        dropped,
    })
}

/// An attachment's name without any path, control characters or separators.
fn plain_name(name: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or(name);
    last.chars()
        .filter(|c| !c.is_control())
        .collect::<String>()
        .trim()
        .trim_start_matches('.')
        .chars()
        .take(120)
        .collect()
}

/// HTML as text, crudely: `<script>` and `<style>` dropped, a line break for `<br>`, `<p>`,
/// `<div>`, `<li>`, `<tr>` and headings, every other tag stripped, entities decoded.
pub fn html_to_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        out.push_str(&decode_entities(&rest[..open]));
        let Some(close) = rest[open..].find('>') else {
            rest = &rest[open..];
            break;
        };
        let tag = rest[open + 1..open + close].trim().to_ascii_lowercase();
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        rest = &rest[open + close + 1..];
        if (name == "script" || name == "style") && !tag.starts_with('/') {
            let end = format!("</{name}");
            match rest.to_ascii_lowercase().find(&end) {
                Some(at) => {
                    rest = &rest[at..];
                    if let Some(close) = rest.find('>') {
                        rest = &rest[close + 1..];
                    }
                }
                None => rest = "",
            }
            continue;
        }
        if matches!(
            name.as_str(),
            "br" | "p" | "div" | "li" | "tr" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6"
        ) && !out.ends_with('\n')
        {
            out.push('\n');
        }
    }
    out.push_str(&decode_entities(rest));
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    lines.join("\n").trim().to_string()
}

fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest[..rest.len().min(12)].find(';');
        let decoded = end.and_then(|end| {
            let entity = &rest[1..end];
            let c = match entity {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "nbsp" => Some(' '),
                _ => entity
                    .strip_prefix("#x")
                    .or_else(|| entity.strip_prefix("#X"))
                    .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                    .or_else(|| entity.strip_prefix('#').and_then(|n| n.parse().ok()))
                    .and_then(char::from_u32),
            };
            c.map(|c| (c, end))
        });
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPLY: &str = "From: \"Alice Example\" <Alice@Example.COM>\r\n\
        To: keel@example.net\r\n\
        Subject: Re: the report\r\n\
        Message-ID: <m3@example.com>\r\n\
        In-Reply-To: <m2@example.com>\r\n\
        References: <m1@example.com> <m2@example.com>\r\n\
        MIME-Version: 1.0\r\n\
        Content-Type: multipart/mixed; boundary=\"b1\"\r\n\
        \r\n\
        --b1\r\n\
        Content-Type: multipart/alternative; boundary=\"b2\"\r\n\
        \r\n\
        --b2\r\n\
        Content-Type: text/plain; charset=utf-8\r\n\
        \r\n\
        Plain words.\r\n\
        --b2\r\n\
        Content-Type: text/html; charset=utf-8\r\n\
        \r\n\
        <p>HTML words</p>\r\n\
        --b2--\r\n\
        --b1\r\n\
        Content-Type: text/csv; name=\"../../etc/numbers.csv\"\r\n\
        Content-Disposition: attachment; filename=\"../../etc/numbers.csv\"\r\n\
        \r\n\
        a,b\r\n1,2\r\n\
        --b1\r\n\
        Content-Type: application/octet-stream\r\n\
        Content-Disposition: attachment; filename=\"big.bin\"\r\n\
        Content-Transfer-Encoding: base64\r\n\
        \r\n\
        AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\r\n\
        --b1--\r\n";

    #[test]
    fn a_reply_with_alternatives_and_attachments() {
        let mail = parse(REPLY.as_bytes(), 16).unwrap();
        assert_eq!(mail.message_id, "m3@example.com");
        assert_eq!(mail.from, "alice@example.com");
        assert_eq!(mail.from_name.as_deref(), Some("Alice Example"));
        assert_eq!(mail.subject, "Re: the report");
        assert_eq!(mail.thread, "m1@example.com");
        assert_eq!(
            mail.references,
            "<m1@example.com> <m2@example.com> <m3@example.com>"
        );
        assert_eq!(mail.text.trim(), "Plain words.");
        assert_eq!(mail.attachments.len(), 1);
        assert_eq!(mail.attachments[0].name, "numbers.csv");
        assert_eq!(mail.attachments[0].media_type.as_deref(), Some("text/csv"));
        assert_eq!(mail.dropped.len(), 1);
        assert!(
            mail.dropped[0].starts_with("big.bin (30 bytes"),
            "{:?}",
            mail.dropped
        );
    }

    #[test]
    fn html_only_is_read_as_text_and_a_first_mail_is_its_own_thread() {
        let raw = "From: bob@example.org\r\nMessage-ID: <x1@example.org>\r\n\
            Content-Type: text/html\r\n\r\n\
            <html><head><style>p{color:red}</style></head><body><p>Fish &amp; chips</p>\
            <p>&lt;3 &#233;t&eacute;&#x21;</p><script>alert(1)</script></body></html>\r\n";
        let mail = parse(raw.as_bytes(), 100).unwrap();
        assert_eq!(mail.thread, "x1@example.org");
        assert_eq!(mail.references, "<x1@example.org>");
        assert!(mail.text.contains("Fish & chips"), "{}", mail.text);
        assert!(mail.text.contains("<3 ét"), "{}", mail.text);
        assert!(
            !mail.text.contains("alert") && !mail.text.contains("color"),
            "{}",
            mail.text
        );
    }

    #[test]
    fn crude_html() {
        assert_eq!(
            html_to_text("<div>a<br>b</div><SCRIPT>x</SCRIPT>c &amp;amp; &bogus; &#0065;"),
            "a\nb\nc &amp; &bogus; A"
        );
    }

    #[test]
    fn no_from_no_id_or_a_broken_tree_is_refused() {
        let no_from = "Message-ID: <a@b>\r\nSubject: hi\r\n\r\nbody\r\n";
        assert!(parse(no_from.as_bytes(), 100).unwrap_err().contains("From"));
        let no_id = "From: a@b.c\r\nSubject: hi\r\n\r\nbody\r\n";
        assert!(
            parse(no_id.as_bytes(), 100)
                .unwrap_err()
                .contains("Message-ID")
        );
        let broken = "From: a@b.c\r\nMessage-ID: <a@b>\r\n\
            Content-Type: multipart/mixed; boundary=\"never\"\r\n\r\nno parts at all\r\n";
        let error = parse(broken.as_bytes(), 100).unwrap_err();
        assert!(error.contains("malformed"), "{error}");
    }
}
