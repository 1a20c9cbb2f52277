//! Sub-agents: `delegate_task` hands one goal, or a batch of up to `max_parallel` goals run
//! concurrently, to child runs (seed 004 "agent-level tools", seed 000 `sub-{depth}-{uuid}`).
//!
//! A child is a real run, stored like any run: its own run id and session
//! `sub-{depth}-{uuid}` (so its own lane), the parent's user and trust, a fresh context holding
//! only its goal and the context it was given, a toolset that is at most the parent's (without
//! `delegate_task` once it is at `max_depth`), and its own iteration budget capped at
//! `max_iterations`. The parent gets each child's answer, or its failure and handoff, as the
//! tool result, in call order.
//!
//! Children are found again after a crash: a child's ids are derived from the parent's run id,
//! the call id and the task's place in the call ([`child_ids`]), so re-running the parent's
//! delegate step reuses a finished child's stored answer, resumes an unfinished one and starts
//! a missing one. That is why the tool is idempotent to the executor.
//!
//! This module holds what needs no I/O: the policy, the tool's spec and arguments, depth and
//! ids, and the wording of results. The agent starts the children ([`Delegator`]).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::event::Emitter;
use crate::provider::Usage;
use crate::run_settings::{ModelTarget, RunSettings};
use crate::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

mod hook;
mod outcome;
mod tree;

pub use hook::Delegation;
pub use outcome::{ChildOutcome, batch_result};
pub use tree::{ChildRun, child_runs};

/// The name of the delegation tool.
pub const DELEGATE_TASK: &str = "delegate_task";

/// Default for [`DelegationPolicy::max_parallel`].
pub const DEFAULT_MAX_PARALLEL: u32 = 3;
/// Default for [`DelegationPolicy::max_depth`].
pub const DEFAULT_MAX_DEPTH: u32 = 2;
/// Default for [`DelegationPolicy::max_iterations`].
pub const DEFAULT_MAX_ITERATIONS: u32 = 50;

/// Upper bounds a policy may not pass: beyond them a setting is a mistake, not a choice.
const MAX_PARALLEL_LIMIT: u32 = 16;
const MAX_DEPTH_LIMIT: u32 = 5;
const MAX_ITERATIONS_LIMIT: u32 = 1000;
/// Longest goal and context a task may carry, in characters.
const MAX_GOAL_CHARS: usize = 4_000;
const MAX_CONTEXT_CHARS: usize = 32_000;

/// How far delegation may go (`[delegation]` in keel.toml).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegationPolicy {
    /// Most tasks one call may run concurrently.
    pub max_parallel: u32,
    /// Deepest a sub-agent may be: a run at this depth has no `delegate_task`.
    pub max_depth: u32,
    /// Most iterations a child may use; a task asking for more gets this many.
    pub max_iterations: u32,
    /// The model children use (on the parent's provider); the parent's when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl Default for DelegationPolicy {
    fn default() -> Self {
        DelegationPolicy {
            max_parallel: DEFAULT_MAX_PARALLEL,
            max_depth: DEFAULT_MAX_DEPTH,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            model: None,
        }
    }
}

impl DelegationPolicy {
    /// Checks every bound; the error names the setting and what it may be.
    pub fn validate(&self) -> Result<(), String> {
        let check = |name: &str, value: u32, max: u32| {
            if value == 0 || value > max {
                Err(format!(
                    "[delegation] {name} must be between 1 and {max}, not {value}"
                ))
            } else {
                Ok(())
            }
        };
        check("max_parallel", self.max_parallel, MAX_PARALLEL_LIMIT)?;
        check("max_depth", self.max_depth, MAX_DEPTH_LIMIT)?;
        check("max_iterations", self.max_iterations, MAX_ITERATIONS_LIMIT)?;
        if self.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err("[delegation] model must not be empty".into());
        }
        Ok(())
    }
}

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
    spec.reach = crate::tool::Reach::Conversation;
    spec.module = Some(DELEGATION_MODULE.to_string());
    spec
}

/// The `delegate_task` tool as the registry knows it. Its calls are answered by the agent's
/// loop (see [`Delegation`]); called anywhere else it says so.
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

/// One task of a `delegate_task` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// What the child must achieve.
    pub goal: String,
    /// What it is told besides.
    pub context: Option<String>,
    /// The tools it may use, when the call names them.
    pub tools: Option<Vec<String>>,
    /// Its iteration budget, already capped by the policy.
    pub max_iterations: u32,
}

impl Task {
    /// The child's only user message: its goal and context.
    pub fn message(&self) -> String {
        match &self.context {
            Some(context) => format!("{}\n\nContext:\n{context}", self.goal),
            None => self.goal.clone(),
        }
    }
}

/// Reads a call's arguments: `{goal, context?, tools?, max_iterations?}` or `{tasks: [...]}`
/// with at most `max_parallel` tasks. The error is the text for the model.
pub fn parse_tasks(args: &Value, policy: &DelegationPolicy) -> Result<Vec<Task>, String> {
    let Some(map) = args.as_object() else {
        return Err("Error: the arguments must be an object with `goal` or `tasks`.".into());
    };
    let tasks: Vec<&Value> = match (map.get("tasks"), map.get("goal")) {
        (Some(_), Some(_)) => {
            return Err(
                "Error: give either `goal` (one task) or `tasks` (several), not both.".into(),
            );
        }
        (Some(Value::Array(tasks)), None) => tasks.iter().collect(),
        (Some(_), None) => return Err("Error: `tasks` must be a list of tasks.".into()),
        (None, Some(_)) => vec![args],
        (None, None) => {
            return Err("Error: give the `goal` of the task, or a list of `tasks`.".into());
        }
    };
    if tasks.is_empty() {
        return Err("Error: `tasks` is empty: give at least one task.".into());
    }
    if tasks.len() > policy.max_parallel as usize {
        return Err(format!(
            "Error: {} tasks is more than the {} that may run at once ([delegation] \
             max_parallel); nothing was started. Split them over several calls.",
            tasks.len(),
            policy.max_parallel
        ));
    }
    tasks
        .into_iter()
        .enumerate()
        .map(|(i, task)| {
            parse_task(task, policy).map_err(|e| format!("Error: task {}: {e}", i + 1))
        })
        .collect()
}

fn parse_task(task: &Value, policy: &DelegationPolicy) -> Result<Task, String> {
    let Some(map) = task.as_object() else {
        return Err("a task must be an object with a `goal`".into());
    };
    if let Some(key) = map
        .keys()
        .find(|key| {
            !matches!(
                key.as_str(),
                "goal" | "context" | "tools" | "max_iterations"
            )
        })
        .filter(|key| !key.starts_with('_'))
    {
        return Err(format!("unknown field `{key}`"));
    }
    let goal = match map.get("goal") {
        Some(Value::String(goal)) if !goal.trim().is_empty() => goal.trim().to_string(),
        Some(Value::String(_)) | None => return Err("give its `goal`".into()),
        Some(_) => return Err("`goal` must be text".into()),
    };
    if goal.chars().count() > MAX_GOAL_CHARS {
        return Err(format!(
            "the goal is longer than {MAX_GOAL_CHARS} characters"
        ));
    }
    let context = match map.get("context") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) if c.trim().is_empty() => None,
        Some(Value::String(c)) if c.chars().count() > MAX_CONTEXT_CHARS => {
            return Err(format!(
                "the context is longer than {MAX_CONTEXT_CHARS} characters"
            ));
        }
        Some(Value::String(c)) => Some(c.trim().to_string()),
        Some(_) => return Err("`context` must be text".into()),
    };
    let tools = match map.get("tools") {
        None | Some(Value::Null) => None,
        Some(Value::Array(names)) => Some(
            names
                .iter()
                .map(|n| n.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or("`tools` must be a list of tool names")?,
        ),
        Some(_) => return Err("`tools` must be a list of tool names".into()),
    };
    let max_iterations = match map.get("max_iterations") {
        None | Some(Value::Null) => policy.max_iterations,
        Some(n) => match n.as_u64() {
            Some(n) if n >= 1 => n.min(u64::from(policy.max_iterations)) as u32,
            _ => return Err("`max_iterations` must be a whole number of at least 1".into()),
        },
    };
    Ok(Task {
        goal,
        context,
        tools,
        max_iterations,
    })
}

/// The delegation depth of a session: `n` for a sub-agent's `sub-{n}-{uuid}`, 0 for any other.
pub fn depth_of(session_id: &str) -> u32 {
    session_id
        .strip_prefix("sub-")
        .and_then(|rest| rest.split_once('-'))
        .and_then(|(depth, _)| depth.parse().ok())
        .unwrap_or(0)
}

/// The tool error for a `delegate_task` call of a run at `depth` when delegation stops at
/// `max_depth`.
pub fn depth_refusal(depth: u32, max_depth: u32) -> String {
    format!(
        "Error: `delegate_task` was refused: this run is a sub-agent at depth {depth}, and \
         delegation stops at depth {max_depth} ([delegation] max_depth). Do the task yourself."
    )
}

/// The ids of the `index`-th child of call `call_id` of run `parent_run_id`: (run id, session
/// id `sub-{depth}-{uuid}`). The same inputs always give the same ids, so a parent that runs
/// its delegate step again finds its children.
pub fn child_ids(parent_run_id: &str, call_id: &str, index: usize, depth: u32) -> (String, String) {
    let mut hash = Sha256::new();
    for part in [
        "keel delegate_task",
        parent_run_id,
        call_id,
        &index.to_string(),
    ] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let digest = hash.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    let uuid = uuid::Builder::from_custom_bytes(bytes).into_uuid();
    (uuid.to_string(), format!("sub-{depth}-{uuid}"))
}

/// The tools of a child at `depth`: the parent's own (not the loop's, `is_loop_tool`, which
/// every run gets),
/// narrowed to `requested` when the task names some, without `delegate_task` at `max_depth`.
/// Names the parent does not have are an error naming them.
pub fn child_tools(
    parent: &[ToolSpec],
    requested: Option<&[String]>,
    depth: u32,
    max_depth: u32,
    is_loop_tool: &dyn Fn(&str) -> bool,
) -> Result<Vec<ToolSpec>, String> {
    let own: Vec<&ToolSpec> = parent
        .iter()
        .filter(|tool| !is_loop_tool(&tool.name))
        .collect();
    if let Some(requested) = requested {
        let missing: Vec<&str> = requested
            .iter()
            .filter(|name| !own.iter().any(|tool| &tool.name == *name))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            let have: Vec<&str> = own.iter().map(|tool| tool.name.as_str()).collect();
            return Err(format!(
                "{} not among your tools, so a sub-agent cannot have {}; yours are: {}",
                quoted(&missing),
                if missing.len() == 1 { "it" } else { "them" },
                have.join(", ")
            ));
        }
    }
    Ok(own
        .into_iter()
        .filter(|tool| requested.is_none_or(|names| names.contains(&tool.name)))
        .filter(|tool| tool.name != DELEGATE_TASK || depth < max_depth)
        .cloned()
        .collect())
}

fn quoted(names: &[&str]) -> String {
    let list: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    format!(
        "{} {}",
        list.join(", "),
        if names.len() == 1 { "is" } else { "are" }
    )
}

/// The settings of a child under `policy`, from its parent's: its own iteration budget (no
/// extensions past it), the parent's trust and rules, no human to ask, and what is left of the
/// parent's token and cost budgets. With a model of its own, its fallback chain is the
/// parent's whole chain after it.
pub fn child_settings(
    parent: &RunSettings,
    parent_spent: (u64, f64),
    policy: &DelegationPolicy,
    max_iterations: u32,
) -> RunSettings {
    let mut settings = parent.clone();
    if let Some(model) = policy
        .model
        .as_ref()
        .filter(|model| **model != parent.model)
    {
        // The children's model falls back as the parent's own does: to the parent's model,
        // then the parent's fallbacks, with the same classified retries on each.
        let parent_model = ModelTarget::new(parent.provider.clone(), parent.model.clone());
        settings.fallbacks.retain(|target| *target != parent_model);
        settings.fallbacks.insert(0, parent_model);
        settings.model = model.clone();
    }
    settings.max_iterations = max_iterations;
    settings.iteration_cap = max_iterations;
    settings.human_reachable = false;
    // Its answer goes to the parent, not to the screen.
    settings.stream = false;
    settings.delegation = Some(policy.clone());
    let (tokens, cost) = parent_spent;
    if let Some(budget) = settings.budgets.token_budget {
        settings.budgets.token_budget = Some(budget.saturating_sub(tokens));
    }
    if let Some(limit) = settings.budgets.cost_limit {
        settings.budgets.cost_limit = Some((limit - cost).max(0.0));
    }
    settings
}

/// What a parent's delegate call asks of the agent.
pub struct DelegateCall<'a> {
    /// The call's parsed arguments.
    pub args: &'a Value,
    /// The parent's call context: its run, session, user, trust and cancel token.
    pub context: &'a ToolContext,
    /// The tools offered to the parent.
    pub offered: &'a [ToolSpec],
    /// The parent's settings.
    pub settings: &'a RunSettings,
    /// The tokens and dollars the parent had spent when the batch started.
    pub spent: (u64, f64),
    /// The budget the children share with each other and their own children, when the
    /// parent's has a limit.
    pub shared: Option<std::sync::Arc<crate::budget::SharedBudget>>,
    /// The parent's events.
    pub emitter: &'a Emitter,
}

/// What a delegate call came to.
#[derive(Clone, Debug, PartialEq)]
pub struct DelegateResult {
    /// Whether every child completed.
    pub ok: bool,
    /// The tool result for the parent.
    pub content: String,
    /// What the children spent, for the parent's budgets.
    pub usage: Usage,
    /// Dollars the children spent.
    pub cost: f64,
}

/// Starts, resumes or reuses a call's children (the agent).
#[async_trait]
pub trait Delegator: Send + Sync {
    /// Runs the children of `call` to their end and reports them.
    async fn delegate(&self, call: DelegateCall<'_>) -> DelegateResult;
}

#[cfg(test)]
mod tests;
