//! Answering one `delegate_task` call: its children are started, resumed or reused, each in its
//! own session and lane, concurrently, through the kernel's [`ChildRuns`]. A child interrupted
//! by a crash is resumed, and the answer of one that finished is reused, found by its derived
//! ids.

use futures::future::join_all;
use keel_core::child_run::{ChildRunSpec, ChildRuns};
use keel_core::event::{Emitter, EventKind};
use keel_core::provider::Usage;
use keel_core::run::BatchSpend;
use keel_core::run_settings::RunSettings;
use keel_core::state::AgentState;
use keel_core::store::RunRecord;
use keel_core::tool::{ToolContext, ToolSpec};
use serde_json::Value;

use super::{
    ChildOutcome, DelegationPolicy, Task, batch_result, child_ids, child_settings, child_tools,
    depth_of, depth_refusal, parse_tasks,
};

/// What a parent's delegate call has to work with.
pub(super) struct DelegateCall<'a> {
    /// The call's parsed arguments.
    pub args: &'a Value,
    /// The parent's call context: its run, session, user, trust and cancel token.
    pub context: &'a ToolContext,
    /// The tools offered to the parent.
    pub offered: &'a [ToolSpec],
    /// The parent's settings.
    pub settings: &'a RunSettings,
    /// What the parent had spent when the batch started, the budget the batch's children
    /// share, and where what they spend is counted.
    pub spend: &'a BatchSpend,
    /// Who runs the children.
    pub children: &'a dyn ChildRuns,
    /// The parent's events.
    pub emitter: &'a Emitter,
}

/// One child to run: its task, tools and ids.
struct Child<'a> {
    task: &'a Task,
    tools: Vec<ToolSpec>,
    run_id: String,
    session_id: String,
    depth: u32,
}

/// Runs the children of `call` to their end and reports them: `(ok, content)` for the parent.
/// What they spent is added to the batch's spend.
pub(super) async fn delegate(policy: &DelegationPolicy, call: DelegateCall<'_>) -> (bool, String) {
    let depth = depth_of(&call.context.session_id);
    if depth >= policy.max_depth {
        return (false, depth_refusal(depth, policy.max_depth));
    }
    let tasks = match parse_tasks(call.args, policy) {
        Ok(tasks) => tasks,
        Err(message) => return (false, message),
    };
    // Every task is checked before any starts: a bad one starts none.
    let mut children = Vec::with_capacity(tasks.len());
    for (index, task) in tasks.iter().enumerate() {
        let tools = match child_tools(
            call.offered,
            task.tools.as_deref(),
            depth + 1,
            policy.max_depth,
            &|name| call.settings.extensions.is_loop_tool(name, call.settings),
        ) {
            Ok(tools) => tools,
            Err(why) => {
                return (
                    false,
                    format!("Error: task {}: {why}. Nothing was started.", index + 1),
                );
            }
        };
        let (run_id, session_id) = child_ids(
            &call.context.run_id,
            &call.context.call_id,
            index,
            depth + 1,
        );
        children.push(Child {
            task,
            tools,
            run_id,
            session_id,
            depth: depth + 1,
        });
    }
    let runs = children.iter().map(|child| run_child(&call, policy, child));
    let outcomes: Vec<ChildOutcome> = join_all(runs)
        .await
        .into_iter()
        .map(|(outcome, usage, cost)| {
            call.spend.add(usage, cost);
            outcome
        })
        .collect();
    batch_result(&outcomes)
}

/// Brings one child to its end: reuses a finished one, resumes an interrupted one, starts a
/// missing one. Returns its outcome and what it spent.
async fn run_child(
    call: &DelegateCall<'_>,
    policy: &DelegationPolicy,
    child: &Child<'_>,
) -> (ChildOutcome, Usage, f64) {
    let cancel = call.context.cancel.child_token();
    let existing = call.children.store().run(&child.run_id).await;
    let how = match &existing {
        Ok(Some(record)) if settled(record) => "reuse",
        Ok(Some(_)) => "resume",
        _ => "start",
    };
    call.emitter.emit(EventKind::DelegateStarted {
        call_id: call.context.call_id.clone(),
        child_run_id: child.run_id.clone(),
        child_session_id: child.session_id.clone(),
        goal: child.task.goal.clone(),
        depth: child.depth,
        how: how.to_string(),
    });
    let shared = call.spend.shared();
    // What a child found again spent before the crash is spent: it (when resumed) and its
    // siblings share what is left after it.
    if let (Ok(Some(record)), Some(pool)) = (&existing, &shared) {
        pool.charge(record.usage.total(), record.cost);
    }
    let ended = match existing {
        Err(error) => Err(error.to_string()),
        // Finished before: its stored answer is the answer, never a second run.
        Ok(Some(record)) if settled(&record) => Ok(record),
        Ok(Some(_)) => call.children.resume(&child.run_id, shared, cancel).await,
        Ok(None) => {
            let spec = ChildRunSpec {
                run_id: child.run_id.clone(),
                session_id: child.session_id.clone(),
                settings: child_settings(
                    call.settings,
                    call.spend.spent_before(),
                    policy,
                    child.task.max_iterations,
                ),
                tools: child.tools.clone(),
                message: child.task.message(),
                user_id: call.context.user_id.clone(),
                shared,
                cancel,
            };
            call.children.start(spec).await
        }
    };
    let (outcome, usage, cost) = match ended {
        Ok(record) => {
            let handoff = match record.state {
                AgentState::Completed => None,
                _ => handoff(call.children, &child.session_id).await,
            };
            let outcome = ChildOutcome {
                goal: child.task.goal.clone(),
                run_id: child.run_id.clone(),
                state: record.state,
                reason: record.reason,
                final_text: record.final_text.clone(),
                error: record.error.clone(),
                iterations: record.iterations,
                handoff,
            };
            (outcome, record.usage, record.cost)
        }
        Err(error) => {
            let why = format!("the sub-agent could not be run: {error}");
            let outcome = ChildOutcome::not_run(&child.task.goal, &child.run_id, why);
            (outcome, Usage::default(), 0.0)
        }
    };
    call.emitter.emit(EventKind::DelegateFinished {
        call_id: call.context.call_id.clone(),
        child_run_id: child.run_id.clone(),
        state: outcome.state,
        iterations: outcome.iterations,
        usage,
    });
    (outcome, usage, cost)
}

/// The handoff a failed child left in its run journal.
async fn handoff(children: &dyn ChildRuns, session_id: &str) -> Option<String> {
    children
        .store()
        .journal(session_id)
        .await
        .ok()
        .flatten()
        .and_then(|journal| journal.handoff())
}

/// True when `record` is a child's end for good: terminal, and not a timed-out run that may
/// still be resumed.
fn settled(record: &RunRecord) -> bool {
    record.state.is_terminal() && !(record.state == AgentState::TimedOut && record.resume_available)
}
