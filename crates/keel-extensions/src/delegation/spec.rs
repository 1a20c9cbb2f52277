//! The `delegate_task` tool as the model and the registry see it.

use async_trait::async_trait;
use keel_core::tool::{Reach, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use serde_json::{Value, json};

use super::{DELEGATE_TASK, DelegationPolicy};

/// The module of `delegate_task`, for personas' `allowed_modules`.
pub const DELEGATION_MODULE: &str = "delegation";

/// The spec the model sees for `delegate_task`.
pub fn delegate_task_spec(policy: &DelegationPolicy) -> ToolSpec {
    let task = json!({
        "type": "object",
        "properties": {
            "goal": {"type": "string", "description": "What the sub-agent must achieve; it sees nothing else of this conversation."},
            "context": {"type": "string", "description": "Facts the sub-agent needs (paths, names, constraints)."},
            "tools": {"type": "array", "items": {"type": "string"}, "description": "Names of your tools it may use (default: all of them)."},
            "max_iterations": {"type": "integer", "minimum": 1, "description": format!("Its iteration budget (at most {}).", policy.max_iterations)}
        },
        "required": ["goal"],
        "additionalProperties": false
    });
    let mut single = task.clone();
    single["properties"]["tasks"] = json!({
        "type": "array",
        "items": task,
        "minItems": 1,
        "description": format!("Up to {} independent tasks run at the same time; give either `goal` or `tasks`.", policy.max_parallel)
    });
    single["required"] = json!([]);
    let mut spec = ToolSpec::new(
        DELEGATE_TASK,
        format!(
            "Hand a self-contained task to a sub-agent with a fresh context, or up to {} \
             independent tasks at once (`tasks`), run concurrently. Each returns its final \
             answer, or its failure and what it had done. Use it for work that does not need \
             this conversation's history.",
            policy.max_parallel
        ),
        single,
    );
    // Children are durable and found again by id: running the step again is safe.
    spec.idempotent = true;
    // It reaches nothing itself: its children inherit the session's trust, and their own calls
    // are held to it.
    spec.reach = Reach::Conversation;
    spec.module = Some(DELEGATION_MODULE.to_string());
    spec
}

/// The `delegate_task` tool as the registry knows it. Its calls are answered by the
/// [`Delegation`](super::Delegation) extension inside the agent's loop; called anywhere else it
/// says so.
pub struct DelegateTaskTool {
    spec: ToolSpec,
}

impl DelegateTaskTool {
    /// The tool under `policy`.
    pub fn new(policy: &DelegationPolicy) -> Self {
        DelegateTaskTool {
            spec: delegate_task_spec(policy),
        }
    }
}

#[async_trait]
impl Tool for DelegateTaskTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::failed(
            "delegate_task runs only inside an agent's loop, which starts the sub-agents",
        ))
    }
}
