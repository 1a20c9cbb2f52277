//! Attachments (seed 003, step 6): files sent with a message are checked, kept as file records
//! of the conversation, and described in the message the model sees, which can read them with
//! the `read_attachment` tool.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::files::{
    FileOrigin, FileRecord, MAX_ATTACHMENTS, check_file_name, check_media_type, guess_media_type,
};
use crate::store::{Store, StoreError};

/// The tool that reads an attachment.
pub const READ_ATTACHMENT: &str = "read_attachment";

/// A file sent with a message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncomingAttachment {
    /// Its file name (no path).
    pub name: String,
    /// Its media type; guessed from the name and content when not given.
    #[serde(default)]
    pub media_type: Option<String>,
    /// Its bytes.
    pub content: Vec<u8>,
}

/// Checks attachments from outside before anything is stored: at most [`MAX_ATTACHMENTS`],
/// plain names, well-formed media types, each at most `max_bytes`. The first problem, in words.
pub fn check_attachments(
    attachments: &[IncomingAttachment],
    max_bytes: usize,
) -> Result<(), String> {
    if attachments.len() > MAX_ATTACHMENTS {
        return Err(format!(
            "a message may carry at most {MAX_ATTACHMENTS} attachments, not {}",
            attachments.len()
        ));
    }
    for attachment in attachments {
        check_file_name(&attachment.name)?;
        if let Some(media_type) = &attachment.media_type {
            check_media_type(media_type)?;
        }
        if attachment.content.len() > max_bytes {
            return Err(format!(
                "attachment `{}` is {} bytes; at most {max_bytes}",
                attachment.name,
                attachment.content.len()
            ));
        }
    }
    Ok(())
}

/// Keeps checked attachments as files of `session_id` sent by `user_id`, and returns `text`
/// with them described (seed 003's `[Attached files:]` block) and their records.
pub async fn register_attachments(
    store: &dyn Store,
    text: String,
    attachments: &[IncomingAttachment],
    session_id: &str,
    user_id: Option<&str>,
    at: DateTime<Utc>,
) -> Result<(String, Vec<FileRecord>), StoreError> {
    if attachments.is_empty() {
        return Ok((text, Vec::new()));
    }
    let mut records = Vec::with_capacity(attachments.len());
    for attachment in attachments {
        let media_type = attachment
            .media_type
            .clone()
            .unwrap_or_else(|| guess_media_type(&attachment.name, &attachment.content));
        let mut record = FileRecord::new(
            attachment.name.clone(),
            media_type,
            &attachment.content,
            session_id,
            FileOrigin::Attachment,
            at,
        );
        record.user_id = user_id.map(str::to_string);
        store.save_file(&record, &attachment.content).await?;
        records.push(record);
    }
    Ok((describe(text, &records), records))
}

/// `text` with the files described for the model.
fn describe(mut text: String, records: &[FileRecord]) -> String {
    text.push_str("\n\n[Attached files:]\n");
    for record in records {
        text.push_str(&record.describe());
        text.push('\n');
    }
    text.push_str(&format!(
        "Use {READ_ATTACHMENT} with a file_id to read one."
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    fn attachment(name: &str, content: &[u8]) -> IncomingAttachment {
        IncomingAttachment {
            name: name.into(),
            media_type: None,
            content: content.to_vec(),
        }
    }

    #[test]
    fn attachments_from_outside_are_checked() {
        assert!(check_attachments(&[attachment("a.txt", b"hi")], 10).is_ok());
        let too_big = check_attachments(&[attachment("a.txt", &[0; 11])], 10).unwrap_err();
        assert!(too_big.contains("11 bytes; at most 10"), "{too_big}");
        assert!(check_attachments(&[attachment("../../x", b"")], 10).is_err());
        let many = vec![attachment("a", b""); MAX_ATTACHMENTS + 1];
        assert!(check_attachments(&many, 10).is_err());
        let mut typed = attachment("a", b"");
        typed.media_type = Some("nonsense".into());
        assert!(check_attachments(&[typed], 10).is_err());
    }

    #[tokio::test]
    async fn attachments_are_kept_and_described() {
        let store = MemoryStore::new();
        store.ensure_session("s").await.unwrap();
        let (text, records) = register_attachments(
            &store,
            "look".into(),
            &[attachment("notes.md", b"# hi"), attachment("blob", &[0xff])],
            "s",
            Some("ann"),
            Utc::now(),
        )
        .await
        .unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].media_type, "text/markdown");
        assert_eq!(records[1].media_type, "application/octet-stream");
        assert_eq!(records[0].user_id.as_deref(), Some("ann"));
        assert!(text.starts_with("look\n\n[Attached files:]\n"), "{text}");
        assert!(text.contains(&records[0].describe()), "{text}");
        assert!(text.ends_with("Use read_attachment with a file_id to read one."));
        let (same, none) = register_attachments(&store, "plain".into(), &[], "s", None, Utc::now())
            .await
            .unwrap();
        assert_eq!((same.as_str(), none.len()), ("plain", 0));
    }
}
