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
//! The [`Delegation`] extension answers the calls through the kernel's
//! [`Extension::call_tool`] hook; the children are started, resumed or reused through the
//! kernel's [`ChildRuns`](keel_core::child_run::ChildRuns) (the agent), and what they spend
//! is counted in the batch's [`BatchSpend`](keel_core::run::BatchSpend). The rest holds what
//! needs no I/O: the policy, the tool's spec and arguments, depth and ids, and the wording of
//! results.

use async_trait::async_trait;
use keel_core::extension::{Extension, RunStart, ToolCallSite};
use keel_core::message::ToolCall;
use keel_core::run_settings::RunSettings;
use keel_core::session_kind::SessionKind;
use serde::Deserialize;
use serde_json::Value;

mod batch;
mod children;
mod outcome;
mod policy;
mod spec;
mod task;
mod tree;

pub use children::{child_ids, child_settings, child_tools};
pub use outcome::{ChildOutcome, batch_result};
pub use policy::{
    DEFAULT_MAX_DEPTH, DEFAULT_MAX_ITERATIONS, DEFAULT_MAX_PARALLEL, DelegationPolicy,
};
pub use spec::{DELEGATION_MODULE, DelegateTaskTool, delegate_task_spec};
pub use task::{Task, parse_tasks};
pub use tree::{ChildRun, child_runs};

/// The name of the delegation tool.
pub const DELEGATE_TASK: &str = "delegate_task";

/// The extension's name, and the key of the policy a run keeps in its settings
/// ([`RunSettings::extras`]).
const NAME: &str = "delegation";

/// Delegation plugged into the loop: every run of the agent starts under `policy`, which it
/// keeps in its settings (so a restored run and its children go on under the one it started
/// with), and its `delegate_task` calls start, resume or reuse its children.
pub struct Delegation {
    policy: DelegationPolicy,
}

impl Delegation {
    /// Delegation within `policy`.
    pub fn new(policy: DelegationPolicy) -> Self {
        Delegation { policy }
    }
}

#[async_trait]
impl Extension for Delegation {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn prepare(&self, start: &mut RunStart<'_>) {
        keep_policy(start.settings, &self.policy);
    }

    fn runs_tool(&self, tool: &str) -> bool {
        tool == DELEGATE_TASK
    }

    async fn call_tool(
        &self,
        call: &ToolCall,
        args: &Value,
        site: &ToolCallSite<'_>,
    ) -> Option<Result<String, String>> {
        if call.name != DELEGATE_TASK {
            return None;
        }
        // A run that did not start under a policy, or a driver with no one to run children:
        // the registry's tool says delegation runs only inside an agent's loop.
        let policy = policy_of(site.settings)?;
        let children = site.children?;
        let call = batch::DelegateCall {
            args,
            context: site.context,
            offered: site.offered,
            settings: site.settings,
            spend: site.spend,
            children,
            emitter: site.emitter,
        };
        // Never abandoned on cancel: the children see the cancel themselves and end as
        // cancelled, so none is left running without its parent.
        let (ok, content) = batch::delegate(&policy, call).await;
        Some(if ok { Ok(content) } else { Err(content) })
    }

    fn refuse_unoffered(&self, call: &ToolCall, site: &ToolCallSite<'_>) -> Option<String> {
        if call.name != DELEGATE_TASK {
            return None;
        }
        // Worded here only where a call offered would have been answered here.
        site.children?;
        let policy = policy_of(site.settings)?;
        Some(depth_refusal(
            depth_of(&site.context.session_id),
            policy.max_depth,
        ))
    }
}

/// The policy a run started under, when it may delegate.
pub fn policy_of(settings: &RunSettings) -> Option<DelegationPolicy> {
    DelegationPolicy::deserialize(settings.extras.get(NAME)?).ok()
}

/// Keeps `policy` in `settings`, for the run and its children.
fn keep_policy(settings: &mut RunSettings, policy: &DelegationPolicy) {
    if let Ok(value) = serde_json::to_value(policy) {
        settings.extras.insert(NAME.to_string(), value);
    }
}

/// The delegation depth of a session: `n` for a sub-agent's `sub-{n}-{uuid}`, 0 for any other.
pub fn depth_of(session_id: &str) -> u32 {
    SessionKind::of(session_id).depth()
}

/// The tool error for a `delegate_task` call of a run at `depth` when delegation stops at
/// `max_depth`.
pub fn depth_refusal(depth: u32, max_depth: u32) -> String {
    format!(
        "Error: `delegate_task` was refused: this run is a sub-agent at depth {depth}, and \
         delegation stops at depth {max_depth} ([delegation] max_depth). Do the task yourself."
    )
}

#[cfg(test)]
mod tests;
