//! `read_attachment`: the text of a file sent with a message in this conversation (seed 003,
//! step 6). Only the conversation's own attachments can be read: another conversation's file id
//! is answered as unknown, so ids cannot be probed.

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::files::{FileOrigin, FileRecord};
use keel_core::{Permission, Reach, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use keel_platform::{DaemonStore, READ_ATTACHMENT};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::files::FILES_MODULE;
use crate::schema::{parameters_for, parse_args};

/// The most characters one call returns unless it asks for fewer.
pub const DEFAULT_ATTACHMENT_CHARS: usize = 8000;

const DESCRIPTION: &str = "Read a file attached to a message of this conversation, by the \
`file_id` its message names (or by its `name`: the latest attachment of that name). Returns its \
text; for a long file pass `offset` (characters to \
skip) and `max_chars`, and the result says what is left. A binary file is described, not shown.";

/// The arguments of `read_attachment`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadAttachmentArgs {
    /// The file's id, as its message names it (`file_…`).
    file_id: Option<String>,
    /// The file's name, when no `file_id` is given.
    name: Option<String>,
    /// Characters to skip from the start. Default: 0.
    offset: Option<usize>,
    /// Most characters to return. Default: 8000.
    #[schemars(range(min = 1))]
    max_chars: Option<usize>,
}

/// The `read_attachment` tool: idempotent, for any caller, confined to the conversation.
pub struct ReadAttachment {
    store: Arc<dyn DaemonStore>,
    spec: ToolSpec,
}

impl ReadAttachment {
    /// A `read_attachment` tool reading the files `store` keeps.
    pub fn new(store: Arc<dyn DaemonStore>) -> Self {
        let mut spec = ToolSpec::new(
            READ_ATTACHMENT,
            DESCRIPTION,
            parameters_for::<ReadAttachmentArgs>(),
        )
        .idempotent()
        // This conversation's attachments only.
        .reach(Reach::Conversation);
        spec.module = Some(FILES_MODULE.to_string());
        // A guest may read what it sent itself.
        spec.required_permission = Permission::Guest;
        ReadAttachment { store, spec }
    }
}

impl ReadAttachment {
    /// The attachment of `session_id` that `args` names; another conversation's is unknown.
    async fn find(
        &self,
        args: &ReadAttachmentArgs,
        session_id: &str,
    ) -> Result<FileRecord, ToolError> {
        let failed =
            |e: keel_core::StoreError| ToolError::failed(format!("cannot read the file: {e}"));
        let found = match (&args.file_id, &args.name) {
            (Some(id), None) => self
                .store
                .file(id)
                .await
                .map_err(failed)?
                .filter(|record| record.session_id == session_id),
            (None, Some(name)) => self
                .store
                .session_files(session_id)
                .await
                .map_err(failed)?
                .into_iter()
                .rev()
                .find(|record| record.origin == FileOrigin::Attachment && &record.name == name),
            _ => {
                return Err(ToolError::invalid_arguments(
                    "give exactly one of `file_id` and `name`",
                ));
            }
        };
        found
            .filter(|record| record.origin == FileOrigin::Attachment)
            .ok_or_else(|| {
                let asked = args
                    .file_id
                    .as_deref()
                    .or(args.name.as_deref())
                    .unwrap_or("");
                ToolError::invalid_arguments(format!(
                    "no file `{asked}` is attached to this conversation"
                ))
            })
    }
}

#[async_trait]
impl Tool for ReadAttachment {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: ReadAttachmentArgs = parse_args(READ_ATTACHMENT, args)?;
        let record = self.find(&args, &ctx.session_id).await?;
        let content = self
            .store
            .file_content(&record.sha256)
            .await
            .map_err(|e| ToolError::failed(format!("cannot read the file: {e}")))?
            .ok_or_else(|| {
                ToolError::failed(format!("the content of `{}` is gone", record.name))
            })?;
        let Ok(text) = String::from_utf8(content) else {
            return Ok(ToolOutput::text(format!(
                "`{}` is a binary file ({}, {} bytes): it cannot be shown as text.",
                record.name, record.media_type, record.size
            )));
        };
        let offset = args.offset.unwrap_or(0);
        let max_chars = args.max_chars.unwrap_or(DEFAULT_ATTACHMENT_CHARS);
        let total = text.chars().count();
        let shown: String = text.chars().skip(offset).take(max_chars).collect();
        let end = (offset + max_chars).min(total);
        let mut answer = format!(
            "`{}` ({}, {} bytes):\n{shown}",
            record.name, record.media_type, record.size
        );
        if end < total {
            answer.push_str(&format!(
                "\n[{} more characters; call again with offset {end}]",
                total - end
            ));
        }
        Ok(ToolOutput::text(answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use keel_core::Store;
    use keel_store::MemoryStore;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    fn context(session: &str) -> ToolContext {
        ToolContext {
            session_id: session.into(),
            run_id: "r".into(),
            call_id: "c".into(),
            user_id: None,
            untrusted_source: false,
            place: None,
            cancel: CancellationToken::new(),
        }
    }

    async fn keep(store: &MemoryStore, session: &str, name: &str, content: &[u8]) -> String {
        store.ensure_session(session).await.unwrap();
        let record = FileRecord::new(
            name,
            "text/plain",
            content,
            session,
            FileOrigin::Attachment,
            Utc::now(),
        );
        store.save_file(&record, content).await.unwrap();
        record.id
    }

    #[tokio::test]
    async fn reads_its_conversations_attachments_in_pages() {
        let store = Arc::new(MemoryStore::new());
        let id = keep(&store, "s1", "notes.txt", "abcdefghij".as_bytes()).await;
        let tool = ReadAttachment::new(store.clone());
        let whole = tool
            .call(json!({"file_id": id}), &context("s1"))
            .await
            .unwrap();
        assert!(
            whole.content.ends_with(":\nabcdefghij"),
            "{}",
            whole.content
        );
        let page = tool
            .call(
                json!({"file_id": id, "offset": 2, "max_chars": 3}),
                &context("s1"),
            )
            .await
            .unwrap();
        assert!(
            page.content
                .ends_with("cde\n[5 more characters; call again with offset 5]"),
            "{}",
            page.content
        );
    }

    #[tokio::test]
    async fn another_conversations_file_is_unknown() {
        let store = Arc::new(MemoryStore::new());
        let theirs = keep(&store, "theirs", "secret.txt", b"secret").await;
        let tool = ReadAttachment::new(store.clone());
        for args in [
            json!({"file_id": theirs}),
            json!({"file_id": "file_nope"}),
            json!({"file_id": "../../etc/passwd"}),
            json!({"name": "secret.txt"}),
        ] {
            let error = tool.call(args, &context("mine")).await.unwrap_err();
            assert!(error.message.contains("no file"), "{}", error.message);
        }
    }

    #[tokio::test]
    async fn a_binary_file_is_described_not_shown() {
        let store = Arc::new(MemoryStore::new());
        let id = keep(&store, "s1", "photo.png", &[0x89, 0x50, 0xff, 0x00]).await;
        let tool = ReadAttachment::new(store.clone());
        let answer = tool
            .call(json!({"file_id": id}), &context("s1"))
            .await
            .unwrap();
        assert!(answer.content.contains("binary file"), "{}", answer.content);
    }
}
