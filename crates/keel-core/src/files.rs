//! Files keel keeps (seed 003, steps 6 and 9): attachments that arrive with a message and files
//! a tool produces. A file is a record (name, media type, size, SHA-256, its conversation, user
//! and run) over content the store keeps once per SHA-256, so the same bytes sent twice are
//! stored once.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The most bytes one file may hold, unless configured otherwise.
pub const DEFAULT_MAX_FILE_BYTES: usize = 10 * 1024 * 1024;

/// The most attachments one message may carry.
pub const MAX_ATTACHMENTS: usize = 20;

/// Where a file came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileOrigin {
    /// Sent with a message.
    Attachment,
    /// Written by a tool during a run.
    Produced,
}

impl FileOrigin {
    /// Its name in the store and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            FileOrigin::Attachment => "attachment",
            FileOrigin::Produced => "produced",
        }
    }

    /// The origin named `name`.
    pub fn parse(name: &str) -> Option<FileOrigin> {
        match name {
            "attachment" => Some(FileOrigin::Attachment),
            "produced" => Some(FileOrigin::Produced),
            _ => None,
        }
    }
}

/// A file's record; its content is kept by the store under [`FileRecord::sha256`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Its id (`file_` and a UUID).
    pub id: String,
    /// Its name: a plain file name for an attachment, the workspace path for a produced file.
    pub name: String,
    /// Its media type, e.g. `text/plain`.
    pub media_type: String,
    /// Its size in bytes.
    pub size: u64,
    /// The SHA-256 of its content, in lowercase hex.
    pub sha256: String,
    /// The conversation it belongs to.
    pub session_id: String,
    /// The user who sent it or whose run produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The run that produced it (or that its message started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Where it came from.
    pub origin: FileOrigin,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
}

impl FileRecord {
    /// A record for `content`, with a new id and its hash and size.
    pub fn new(
        name: impl Into<String>,
        media_type: impl Into<String>,
        content: &[u8],
        session_id: impl Into<String>,
        origin: FileOrigin,
        created_at: DateTime<Utc>,
    ) -> FileRecord {
        FileRecord {
            id: format!("file_{}", uuid::Uuid::now_v7().simple()),
            name: name.into(),
            media_type: media_type.into(),
            size: content.len() as u64,
            sha256: sha256_hex(content),
            session_id: session_id.into(),
            user_id: None,
            run_id: None,
            origin,
            created_at,
        }
    }

    /// Whether `content` is what the record says: its SHA-256. A store refuses a file whose
    /// content is not (the error says why).
    pub fn check_content(&self, content: &[u8]) -> Result<(), String> {
        if sha256_hex(content) == self.sha256 {
            Ok(())
        } else {
            Err(format!(
                "file `{}`: its content does not match its SHA-256",
                self.id
            ))
        }
    }

    /// One line describing it for the model, as seed 003 enriches a message.
    pub fn describe(&self) -> String {
        format!(
            "- {} (file_id: {}, {} bytes, {})",
            self.name, self.id, self.size, self.media_type
        )
    }
}

/// A file a tool produced: what it wrote, as it wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducedFile {
    /// Its path in the workspace.
    pub path: String,
    /// Its content.
    pub content: Vec<u8>,
}

/// The SHA-256 of `content` in lowercase hex.
pub fn sha256_hex(content: &[u8]) -> String {
    Sha256::digest(content)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The media type of a file by its name's extension, for the common kinds; else
/// `text/plain` when `content` is UTF-8 text, `application/octet-stream` otherwise.
pub fn guess_media_type(name: &str, content: &[u8]) -> String {
    let extension = name
        .rsplit_once('.')
        .map(|(_, extension)| extension.to_ascii_lowercase());
    let known = match extension.as_deref() {
        Some("md" | "markdown") => Some("text/markdown"),
        Some("csv") => Some("text/csv"),
        Some("html" | "htm") => Some("text/html"),
        Some("json") => Some("application/json"),
        Some("pdf") => Some("application/pdf"),
        Some("png") => Some("image/png"),
        Some("jpg" | "jpeg") => Some("image/jpeg"),
        Some("gif") => Some("image/gif"),
        Some("zip") => Some("application/zip"),
        _ => None,
    };
    match known {
        Some(media_type) => media_type.to_string(),
        None if std::str::from_utf8(content).is_ok() => "text/plain".to_string(),
        None => "application/octet-stream".to_string(),
    }
}

/// Checks an attachment's name from outside: a plain file name (no path, no `..`, no control
/// characters), 1 to 255 characters. The error names the problem.
pub fn check_file_name(name: &str) -> Result<(), String> {
    let plain = !name.is_empty()
        && name.chars().count() <= 255
        && !name
            .chars()
            .any(|c| c.is_control() || c == '/' || c == '\\')
        && name != "."
        && name != "..";
    if plain {
        Ok(())
    } else {
        Err(format!(
            "attachment name `{}` must be a plain file name (no `/`, `\\`, `..` or control \
             characters, at most 255 characters)",
            name.escape_debug()
        ))
    }
}

/// Checks a media type from outside: `type/subtype`, printable ASCII, at most 127 characters.
pub fn check_media_type(media_type: &str) -> Result<(), String> {
    let (essence, parameters) = match media_type.split_once(';') {
        Some((essence, parameters)) => (essence, Some(parameters)),
        None => (media_type, None),
    };
    let shaped = media_type.len() <= 127
        && essence
            .split_once('/')
            .is_some_and(|(kind, sub)| is_restricted_name(kind) && is_restricted_name(sub))
        && parameters.is_none_or(|parameters| {
            parameters.split(';').all(|parameter| {
                parameter
                    .trim_start()
                    .split_once('=')
                    .is_some_and(|(name, value)| {
                        is_restricted_name(name) && !value.is_empty() && value.chars().all(is_token)
                    })
            })
        });
    if shaped {
        Ok(())
    } else {
        Err(format!(
            "media type `{}` must look like `type/subtype` (RFC 6838 names: a letter or digit, \
             then letters, digits and !#$&^_.+-)",
            media_type.escape_debug()
        ))
    }
}

/// RFC 6838's `restricted-name`: a letter or digit, then up to 126 of letters, digits and
/// `!#$&^_.+-` — so never `.` or `..` alone, never a `/`.
fn is_restricted_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.len() <= 127
        && chars.all(|c| c.is_ascii_alphanumeric() || "!#$&^_.+-".contains(c))
}

/// A character of an RFC 9110 token (a parameter's unquoted value).
fn is_token(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_and_describes() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let record = FileRecord::new(
            "a.txt",
            "text/plain",
            b"hello",
            "s1",
            FileOrigin::Attachment,
            Utc::now(),
        );
        assert!(record.id.starts_with("file_"));
        assert_eq!(record.size, 5);
        assert_eq!(
            record.describe(),
            format!("- a.txt (file_id: {}, 5 bytes, text/plain)", record.id)
        );
    }

    #[test]
    fn names_and_media_types_from_outside_are_checked() {
        for bad in [
            "",
            ".",
            "..",
            "../../x",
            "a/b",
            "a\\b",
            "a\nb",
            &"x".repeat(256),
        ] {
            assert!(check_file_name(bad).is_err(), "{bad:?}");
        }
        for good in ["notes.txt", "..hidden", "résumé.pdf", "a b.md"] {
            assert!(check_file_name(good).is_ok(), "{good:?}");
        }
        for good in [
            "text/plain",
            "application/vnd.ms-excel",
            "image/svg+xml",
            "text/plain; charset=utf-8",
            "text/plain;charset=UTF-8",
        ] {
            assert!(check_media_type(good).is_ok(), "{good:?}");
        }
        for bad in [
            "text",
            "/plain",
            "text/",
            "te xt/plain",
            "a/b\r\nX: y",
            "../../",
            "../etc/passwd",
            "text/plain/x",
            "./.",
            ".x/y",
            "text/plain; charset",
            "text/plain; charset=\"utf-8\"",
            "text/html; x=<script>",
        ] {
            assert!(check_media_type(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn media_types_are_guessed_from_names_then_content() {
        assert_eq!(guess_media_type("a.MD", b"#"), "text/markdown");
        assert_eq!(guess_media_type("a", b"plain"), "text/plain");
        assert_eq!(
            guess_media_type("a.bin", &[0xff, 0xfe]),
            "application/octet-stream"
        );
    }
}
