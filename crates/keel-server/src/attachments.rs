//! Attachments in API requests: a file as text (`content`) or as bytes (`content_base64`),
//! checked whole before anything is stored.

use base64::Engine as _;
use keel_platform::IncomingAttachment;
use keel_platform::attachments::check_attachments;
use serde::Deserialize;
use utoipa::ToSchema;

use crate::error::ApiError;

/// A file sent with a message: exactly one of `content` (its text) or `content_base64` (its
/// bytes, standard base64). It is kept as a file of the conversation and described to the
/// model, which reads it with `read_attachment`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Attachment {
    /// Its file name (no path), as the model will see it.
    pub name: String,
    /// Its media type, e.g. `text/csv`; guessed from the name and content when absent.
    pub media_type: Option<String>,
    /// Its text.
    pub content: Option<String>,
    /// Its bytes, base64-encoded.
    pub content_base64: Option<String>,
}

/// Decodes and checks `attachments` (each at most `max_bytes`): the first problem is a `400`.
pub fn decode_attachments(
    attachments: Vec<Attachment>,
    max_bytes: usize,
) -> Result<Vec<IncomingAttachment>, ApiError> {
    let decoded = attachments
        .into_iter()
        .map(|attachment| {
            let content = match (attachment.content, attachment.content_base64) {
                (Some(text), None) => text.into_bytes(),
                (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim())
                    .map_err(|e| {
                        ApiError::invalid(format!(
                            "attachment `{}`: `content_base64` is not base64: {e}",
                            attachment.name.escape_debug()
                        ))
                    })?,
                _ => {
                    return Err(ApiError::invalid(format!(
                        "attachment `{}` needs exactly one of `content` and `content_base64`",
                        attachment.name.escape_debug()
                    )));
                }
            };
            Ok(IncomingAttachment {
                name: attachment.name,
                media_type: attachment.media_type,
                content,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    check_attachments(&decoded, max_bytes).map_err(ApiError::invalid)?;
    Ok(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attachment(content: Option<&str>, base64: Option<&str>) -> Attachment {
        Attachment {
            name: "a.bin".into(),
            media_type: None,
            content: content.map(str::to_string),
            content_base64: base64.map(str::to_string),
        }
    }

    #[test]
    fn text_or_base64_but_not_both_nor_neither() {
        let decoded = decode_attachments(vec![attachment(None, Some("AAEC/w=="))], 100).unwrap();
        assert_eq!(decoded[0].content, vec![0, 1, 2, 255]);
        let decoded = decode_attachments(vec![attachment(Some("hi"), None)], 100).unwrap();
        assert_eq!(decoded[0].content, b"hi");
        for bad in [
            attachment(Some("hi"), Some("aGk=")),
            attachment(None, None),
            attachment(None, Some("not base64!")),
            attachment(Some("too long"), None),
        ] {
            assert!(decode_attachments(vec![bad], 4).is_err());
        }
    }
}
