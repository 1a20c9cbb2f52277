//! The `remember` and `forget` tools: the model keeps and drops known facts about the user it
//! serves (the run's user; the machine's owner for a run without one). A user's tools reach
//! only that user's facts.

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::store::OWNER;
use keel_core::{Reach, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use keel_extensions::memory_notes::MEMORY_MODULE;
use serde_json::{Value, json};

use crate::facts::{FactError, NewFact};
use crate::memory::Memory;

/// The name of the tool that keeps a fact.
pub const REMEMBER: &str = "remember";

/// The name of the tool that drops one.
pub const FORGET: &str = "forget";

/// `remember {text, key?, importance?}`.
pub struct RememberTool {
    memory: Arc<Memory>,
    spec: ToolSpec,
}

/// `forget {fact_id}`.
pub struct ForgetTool {
    memory: Arc<Memory>,
    spec: ToolSpec,
}

/// Both tools over `memory`.
pub fn memory_tools(memory: Arc<Memory>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(RememberTool::new(memory.clone())),
        Arc::new(ForgetTool::new(memory)),
    ]
}

/// The facts are the user's, kept across their conversations: the tools sit in the persona
/// module `memory` (with the `memory` notes tool) and reach private data.
fn in_memory_module(spec: ToolSpec) -> ToolSpec {
    spec.in_module(MEMORY_MODULE).reach(Reach::Private)
}

fn user_of(ctx: &ToolContext) -> &str {
    ctx.user_id.as_deref().unwrap_or(OWNER)
}

fn failed(error: FactError) -> ToolError {
    match error {
        FactError::Invalid(message) => ToolError::invalid_arguments(message),
        FactError::Store(message) => ToolError::transient(message),
    }
}

impl RememberTool {
    /// The tool over `memory`.
    pub fn new(memory: Arc<Memory>) -> Self {
        let spec = ToolSpec::new(
            REMEMBER,
            "Keep a durable fact about the user for later conversations: a decision, a \
             preference, a correction, a name, a number, a path. One short fact per call, in \
             the third person or as the user said it. A fact about the same subject (`key`) \
             replaces the older one.",
            json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "The fact, e.g. \"The user's deploy target is eu-west-3\"."},
                    "key": {"type": "string", "description": "What it is about, in one to six words (e.g. \"deploy target\"); derived from the text when left out."},
                    "importance": {"type": "number", "minimum": 0, "maximum": 1, "description": "How much it matters; 0.9 or more recalls it on every turn."}
                },
                "required": ["text"],
                "additionalProperties": false
            }),
        );
        RememberTool {
            memory,
            spec: in_memory_module(spec),
        }
    }
}

#[async_trait]
impl Tool for RememberTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let new = NewFact {
            text: args["text"].as_str().unwrap_or_default().to_string(),
            key: args["key"].as_str().map(str::to_string),
            importance: args["importance"].as_f64().map(|x| x as f32),
            source_session: Some(ctx.session_id.clone()),
            source_seq: latest_user_message(self.memory.store().as_ref(), &ctx.session_id).await,
            ..NewFact::default()
        };
        let remembered = self
            .memory
            .remember(user_of(ctx), new)
            .await
            .map_err(failed)?;
        let mut answer = json!({"remembered": remembered.fact.id, "key": remembered.fact.key});
        if let Some(old) = remembered.superseded {
            answer["replaced"] = json!(old);
        }
        Ok(ToolOutput::text(answer.to_string()))
    }
}

/// How far back from a session's last message [`latest_user_message`] looks.
const SOURCE_LOOKBACK: u64 = 64;

/// The seq of the latest message a person wrote in `session_id` (not one the loop injected),
/// among its last [`SOURCE_LOOKBACK`] messages: the message a `remember` call during a run
/// draws its fact from (the run's own message, stored before the run's first model call).
/// `None` when there is none or the store cannot say; the fact then excludes no message from
/// recall.
async fn latest_user_message(store: &dyn keel_core::Store, session_id: &str) -> Option<u64> {
    let count = store.session(session_id).await.ok()??.message_count;
    let page = store
        .messages_page(
            session_id,
            count.saturating_sub(SOURCE_LOOKBACK),
            SOURCE_LOOKBACK as usize,
        )
        .await
        .ok()?;
    page.iter()
        .rev()
        .find(|stored| {
            stored.message.role == keel_core::Role::User && !stored.message.is_internal()
        })
        .map(|stored| stored.seq)
}

impl ForgetTool {
    /// The tool over `memory`.
    pub fn new(memory: Arc<Memory>) -> Self {
        let spec = ToolSpec::new(
            FORGET,
            "Drop a known fact about the user that is wrong or that they want forgotten, by \
             its id (as `remember` answered it).",
            json!({
                "type": "object",
                "properties": {"fact_id": {"type": "string"}},
                "required": ["fact_id"],
                "additionalProperties": false
            }),
        );
        ForgetTool {
            memory,
            spec: in_memory_module(spec),
        }
    }
}

#[async_trait]
impl Tool for ForgetTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let fact_id = args["fact_id"].as_str().unwrap_or_default();
        if self
            .memory
            .forget(user_of(ctx), fact_id)
            .await
            .map_err(failed)?
        {
            Ok(ToolOutput::text(json!({"forgotten": fact_id}).to_string()))
        } else {
            Err(ToolError::invalid_arguments(format!(
                "there is no fact `{fact_id}` to forget"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use keel_core::Reach;
    use keel_core::RunOptions;
    use keel_store::MemoryStore;

    use super::*;

    #[test]
    fn the_fact_tools_sit_in_the_memory_module_and_reach_private_data() {
        let tools = memory_tools(Arc::new(Memory::new(Arc::new(MemoryStore::new()))));
        let only_files = RunOptions {
            allowed_modules: Some(vec!["files".into()]),
            ..RunOptions::default()
        };
        let with_memory = RunOptions {
            allowed_modules: Some(vec![MEMORY_MODULE.into()]),
            ..RunOptions::default()
        };
        for tool in &tools {
            let spec = tool.spec();
            assert_eq!(spec.module.as_deref(), Some("memory"), "{}", spec.name);
            assert_eq!(spec.reach, Reach::Private, "{}", spec.name);
            assert!(
                !only_files.allows(spec),
                "{} slips past a persona",
                spec.name
            );
            assert!(with_memory.allows(spec), "{}", spec.name);
            assert!(keel_core::reach::untrusted_need(spec).is_some());
        }
    }
}
