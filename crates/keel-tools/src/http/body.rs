//! Response bodies: reading at most a given number of bytes, and showing what was read to the
//! model as text, as a description (binary content) or as a short excerpt (error pages).

use reqwest::header::CONTENT_TYPE;
use reqwest::{Response, StatusCode, Url};

/// The most characters of an error body quoted in an error message.
const EXCERPT_CHARS: usize = 200;

/// A response body, read up to a limit.
pub(super) struct Body {
    /// The bytes read: the whole body, or its first `limit` bytes.
    bytes: Vec<u8>,
    /// True when the whole body was read.
    complete: bool,
    /// The size the server declared (`Content-Length`), if it did.
    declared: Option<u64>,
}

/// Reads `response`'s body, stopping once more than `limit` bytes arrived (the rest is never
/// downloaded).
pub(super) async fn read(response: &mut Response, limit: usize) -> Result<Body, reqwest::Error> {
    let declared = response.content_length();
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        // `bytes` never grows past `limit`, so `room` cannot underflow.
        let room = limit - bytes.len();
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok(Body {
                bytes,
                complete: false,
                declared,
            });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Body {
        bytes,
        complete: true,
        declared,
    })
}

/// The tool output for a successful response: status line, content type, the final URL when a
/// redirect led elsewhere, a blank line, then the body as text (or a description of binary
/// content), with a note when it was cut.
pub(super) fn describe(response: &Response, requested: &Url, body: &Body) -> String {
    let content_type = content_type(response);
    let mut out = format!(
        "{}\ncontent-type: {}\n",
        status_line(response.status()),
        content_type.unwrap_or("(none)")
    );
    if response.url() != requested {
        out.push_str(&format!("final-url: {}\n", response.url()));
    }
    out.push('\n');
    if body.complete && body.bytes.is_empty() {
        out.push_str("(empty body)");
    } else if is_binary(content_type, &body.bytes) {
        let size = match (body.complete, body.declared) {
            (true, _) => format!("{} bytes", body.bytes.len()),
            (false, Some(total)) => format!("{total} bytes"),
            (false, None) => format!("more than {} bytes", body.bytes.len()),
        };
        out.push_str(&format!(
            "[binary content not shown: {}, {size}]",
            content_type.unwrap_or("no content type")
        ));
    } else {
        let shown = without_partial_char(&body.bytes, body.complete);
        out.push_str(&String::from_utf8_lossy(shown));
        if !body.complete {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&cut_note(shown.len(), body.declared));
        }
    }
    out
}

/// A few words of an error body for an error message: whitespace collapsed, at most
/// [`EXCERPT_CHARS`] characters. `None` for an empty or binary body.
pub(super) fn excerpt(response: &Response, body: &Body) -> Option<String> {
    if is_binary(content_type(response), &body.bytes) {
        return None;
    }
    let text = String::from_utf8_lossy(without_partial_char(&body.bytes, body.complete));
    let words: Vec<&str> = text.split_whitespace().collect();
    let joined = words.join(" ");
    if joined.is_empty() {
        return None;
    }
    Some(match joined.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &joined[..cut]),
        None if body.complete => joined,
        None => format!("{joined}…"),
    })
}

/// `HTTP 404 Not Found`, or `HTTP 599` for a status without a standard reason.
pub(super) fn status_line(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("HTTP {} {reason}", status.as_u16()),
        None => format!("HTTP {}", status.as_u16()),
    }
}

/// A byte count as people read it: `1 MiB`, `64 KiB`, or `1000 bytes`.
pub(super) fn size(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    match bytes {
        0 => "0 bytes".to_string(),
        b if b % MIB == 0 => format!("{} MiB", b / MIB),
        b if b % KIB == 0 => format!("{} KiB", b / KIB),
        b => format!("{b} bytes"),
    }
}

/// The response's `Content-Type`, when it has a readable one.
fn content_type(response: &Response) -> Option<&str> {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
}

/// The note after a cut body: how much is shown and how much was left out.
fn cut_note(shown: usize, declared: Option<u64>) -> String {
    match declared {
        Some(total) if total > shown as u64 => format!(
            "[body cut: showing the first {shown} of {total} bytes; {} bytes left out]",
            total - shown as u64
        ),
        _ => format!(
            "[body cut: showing the first {shown} bytes; the rest was left out (the server did \
             not say how long the body is)]"
        ),
    }
}

/// True when the body is not text: a binary content type, or no content type and NUL bytes.
fn is_binary(content_type: Option<&str>, bytes: &[u8]) -> bool {
    match content_type {
        Some(value) => is_binary_type(value),
        None => bytes.contains(&0),
    }
}

/// True for media types whose bodies are not text: images, audio, video, fonts, archives,
/// PDFs and raw bytes. `+xml` and `+json` types (such as SVG) are text.
fn is_binary_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let (top, sub) = essence.split_once('/').unwrap_or((essence.as_str(), ""));
    if sub.ends_with("+xml") || sub.ends_with("+json") {
        return false;
    }
    match top {
        "image" | "audio" | "video" | "font" | "model" => true,
        "application" => {
            matches!(
                sub,
                "octet-stream"
                    | "pdf"
                    | "zip"
                    | "gzip"
                    | "x-gzip"
                    | "x-tar"
                    | "x-bzip2"
                    | "x-xz"
                    | "x-7z-compressed"
                    | "zstd"
                    | "wasm"
                    | "msword"
                    | "x-protobuf"
            ) || sub.starts_with("vnd.openxmlformats-")
                || sub.starts_with("vnd.ms-")
        }
        _ => false,
    }
}

/// `bytes` without a UTF-8 character that the cut split at its end, so a cut body does not end
/// in a replacement character. A complete body is returned whole.
fn without_partial_char(bytes: &[u8], complete: bool) -> &[u8] {
    if complete {
        return bytes;
    }
    // The last character starts at most three bytes before the end.
    for back in 1..=bytes.len().min(4) {
        let byte = bytes[bytes.len() - back];
        let is_continuation = byte & 0b1100_0000 == 0b1000_0000;
        if !is_continuation {
            let width = match byte {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF7 => 4,
                _ => 1,
            };
            return if width > back {
                &bytes[..bytes.len() - back]
            } else {
                bytes
            };
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_types_are_recognized() {
        for binary in [
            "image/png",
            "IMAGE/JPEG",
            "application/octet-stream",
            "application/pdf; name=x.pdf",
            "audio/mpeg",
            "font/woff2",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        ] {
            assert!(is_binary_type(binary), "{binary}");
        }
        for text in [
            "text/html; charset=utf-8",
            "application/json",
            "application/problem+json",
            "image/svg+xml",
            "application/xml",
            "application/javascript",
            "",
        ] {
            assert!(!is_binary_type(text), "{text}");
        }
    }

    #[test]
    fn without_a_content_type_nul_bytes_mean_binary() {
        assert!(is_binary(None, b"PK\x03\x04\0\0"));
        assert!(!is_binary(None, b"plain words"));
    }

    #[test]
    fn a_cut_never_leaves_half_a_character() {
        let text = "aé€😀".as_bytes(); // 1 + 2 + 3 + 4 bytes
        for (len, kept) in [
            (1, 1),
            (2, 1),
            (3, 3),
            (4, 3),
            (5, 3),
            (6, 6),
            (9, 6),
            (10, 10),
        ] {
            assert_eq!(
                without_partial_char(&text[..len], false).len(),
                kept,
                "{len}"
            );
        }
        assert_eq!(without_partial_char(&text[..2], true).len(), 2);
        assert_eq!(without_partial_char(b"", false), b"");
        assert_eq!(without_partial_char(b"\x80\x80", false), b"\x80\x80");
    }

    #[test]
    fn cut_notes_say_what_was_left_out() {
        assert_eq!(
            cut_note(10, Some(25)),
            "[body cut: showing the first 10 of 25 bytes; 15 bytes left out]"
        );
        assert!(cut_note(10, None).contains("did not say how long"));
    }

    #[test]
    fn sizes_and_status_lines_read_naturally() {
        assert_eq!(size(1024 * 1024), "1 MiB");
        assert_eq!(size(64 * 1024), "64 KiB");
        assert_eq!(size(1000), "1000 bytes");
        assert_eq!(status_line(StatusCode::NOT_FOUND), "HTTP 404 Not Found");
        assert_eq!(status_line(StatusCode::from_u16(599).unwrap()), "HTTP 599");
    }
}
