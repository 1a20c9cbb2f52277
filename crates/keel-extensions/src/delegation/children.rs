//! What a child of a `delegate_task` call is: its ids, derived so a parent finds it again, its
//! tools and its settings.

use keel_core::run_settings::{ModelTarget, RunSettings};
use keel_core::session_kind::child_session_id;
use keel_core::tool::ToolSpec;
use sha2::{Digest, Sha256};

use super::{DELEGATE_TASK, DelegationPolicy};

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
    let run_id = uuid.to_string();
    let session_id = child_session_id(depth, &run_id);
    (run_id, session_id)
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
    super::keep_policy(&mut settings, policy);
    let (tokens, cost) = parent_spent;
    if let Some(budget) = settings.budgets.token_budget {
        settings.budgets.token_budget = Some(budget.saturating_sub(tokens));
    }
    if let Some(limit) = settings.budgets.cost_limit {
        settings.budgets.cost_limit = Some((limit - cost).max(0.0));
    }
    settings
}
