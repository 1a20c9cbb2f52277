//! A `delegate_task` call's arguments: one task, or a batch of at most `max_parallel`.

use serde_json::Value;

use super::DelegationPolicy;

/// Longest goal and context a task may carry, in characters.
const MAX_GOAL_CHARS: usize = 4_000;
const MAX_CONTEXT_CHARS: usize = 32_000;

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
