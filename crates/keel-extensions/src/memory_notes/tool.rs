//! The `memory` tool: the model's edits of its durable notes. It is a registry tool, not a
//! loop-answered one, because it writes to the world (a file, the store): it has side effects,
//! so it needs approval in an untrusted session like any other such tool, and a persona
//! offers it only when its `allowed_modules` name [`MEMORY_MODULE`].

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{MemoryBackend, MemoryError, MemoryLimits, apply_edit, entries, parse_call};
use keel_core::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

/// The name of the memory tool.
pub const MEMORY: &str = "memory";

/// The module the memory tool belongs to, for personas' `allowed_modules`.
pub const MEMORY_MODULE: &str = "memory";

/// The `memory` tool over a backend, with the notes' limits.
pub struct MemoryTool {
    spec: ToolSpec,
    backend: Arc<dyn MemoryBackend>,
    limits: MemoryLimits,
}

impl MemoryTool {
    /// The tool writing to `backend` within `limits`.
    pub fn new(backend: Arc<dyn MemoryBackend>, limits: MemoryLimits) -> Self {
        let mut spec = ToolSpec::new(
            MEMORY,
            format!(
                "Your durable memory, kept across sessions: `memory` (MEMORY.md, what you \
                 learned: conventions, facts about the environment, lessons; at most {} \
                 characters) and `user` (USER.md, about the user: preferences, role, habits; at \
                 most {} characters). `add` appends an entry; `replace` swaps the one entry \
                 containing `old_text` for `text`; `remove` drops the one entry containing \
                 `old_text`. Keep entries short and durable; what you write shows in your system \
                 prompt from the next session on.",
                limits.memory_chars, limits.user_chars
            ),
            json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["add", "replace", "remove"]},
                    "target": {"type": "string", "enum": ["memory", "user"]},
                    "text": {"type": "string", "description": "The entry (add), or the new entry (replace)."},
                    "old_text": {"type": "string", "description": "A part of the one entry to replace or remove."}
                },
                "required": ["action", "target"],
                "additionalProperties": false
            }),
        );
        spec.module = Some(MEMORY_MODULE.to_string());
        // The user's notes, kept across their conversations.
        spec.reach = keel_core::tool::Reach::Private;
        MemoryTool {
            spec,
            backend,
            limits,
        }
    }
}

#[async_trait]
impl Tool for MemoryTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let (target, edit) = parse_call(&args).map_err(ToolError::invalid_arguments)?;
        let limit = self.limits.of(target);
        let text = self
            .backend
            .update(
                ctx.user_id.as_deref(),
                target,
                Box::new(move |current| apply_edit(current, &edit, limit)),
            )
            .await
            .map_err(|e| match e {
                MemoryError::Refused(why) => {
                    ToolError::invalid_arguments(format!("{}: {why}", target.file_name()))
                }
                MemoryError::Storage(why) => ToolError::failed(why),
            })?;
        Ok(ToolOutput::text(format!(
            "Saved {} ({} entries, {} of {limit} characters). It shows in your system prompt \
             from the next session on.",
            target.file_name(),
            entries(&text).len(),
            text.chars().count()
        )))
    }
}
