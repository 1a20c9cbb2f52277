//! Attachments (seed 003, step 6): files sent with a message are checked, kept as file records
//! of the conversation, and described in the message the model sees, which can read them with
//! the `read_attachment` tool.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use keel_core::files::{
    FileOrigin, FileRecord, MAX_ATTACHMENTS, check_file_name, check_media_type, guess_media_type,
};
use keel_core::store::{Store, StoreError};

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
