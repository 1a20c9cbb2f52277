//! The agent as its runs' [`Delegator`]: starts a `delegate_task` call's children, each in its
//! own session and lane, concurrently; resumes the ones a crash interrupted and reuses the
//! answers of the ones that finished, found by their derived ids.

use async_trait::async_trait;
use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use super::{Agent, AgentError, ResumeOptions, RunReport};
use crate::delegate::{
    ChildOutcome, DelegateCall, DelegateResult, DelegationPolicy, Delegator, Task, batch_result,
    child_ids, child_settings, child_tools, depth_of, depth_refusal, parse_tasks,
};
use crate::event::EventKind;
use crate::lane::{LaneClaim, LaneOutcome};
use crate::message::Message;
use crate::provider::Usage;
use crate::run::Run;
use crate::state::AgentState;
use crate::store::RunRecord;
use crate::tool::ToolSpec;

/// One child to run: its task, tools and ids.
struct Child<'a> {
    task: &'a Task,
    tools: Vec<ToolSpec>,
    run_id: String,
    session_id: String,
    depth: u32,
}

#[async_trait]
impl Delegator for Agent {
    async fn delegate(&self, call: DelegateCall<'_>) -> DelegateResult {
        let refuse = |content: String| DelegateResult {
            ok: false,
            content,
            usage: Usage::default(),
            cost: 0.0,
        };
        let Some(policy) = call.settings.delegation.clone() else {
            return refuse("Error: `delegate_task` is not enabled for this run.".into());
        };
        let depth = depth_of(&call.context.session_id);
        if depth >= policy.max_depth {
            return refuse(depth_refusal(depth, policy.max_depth));
        }
        let tasks = match parse_tasks(call.args, &policy) {
            Ok(tasks) => tasks,
            Err(message) => return refuse(message),
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
                    return refuse(format!(
                        "Error: task {}: {why}. Nothing was started.",
                        index + 1
                    ));
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
        let runs = children
            .iter()
            .map(|child| self.run_child(&call, &policy, child));
        let ended = join_all(runs).await;
        let mut usage = Usage::default();
        let mut cost = 0.0;
        let outcomes: Vec<ChildOutcome> = ended
            .into_iter()
            .map(|(outcome, spent, dollars)| {
                usage += spent;
                cost += dollars;
                outcome
            })
            .collect();
        let (ok, content) = batch_result(&outcomes);
        DelegateResult {
            ok,
            content,
            usage,
            cost,
        }
    }
}

impl Agent {
    /// Brings one child to its end: reuses a finished one, resumes an interrupted one, starts a
    /// missing one. Returns its outcome and what it spent.
    async fn run_child(
        &self,
        call: &DelegateCall<'_>,
        policy: &DelegationPolicy,
        child: &Child<'_>,
    ) -> (ChildOutcome, Usage, f64) {
        let cancel = call.context.cancel.child_token();
        let existing = self.store.run(&child.run_id).await;
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
        // What a child found again spent before the crash is spent: it (when resumed) and its
        // siblings share what is left after it.
        if let (Ok(Some(record)), Some(pool)) = (&existing, &call.shared) {
            pool.charge(record.usage.total(), record.cost);
        }
        let ended = match existing {
            Err(error) => Err(AgentError::Store(error)),
            // Finished before: its stored answer is the answer, never a second run.
            Ok(Some(record)) if settled(&record) => Ok(record),
            Ok(Some(_)) => {
                let options = ResumeOptions {
                    // Its worker was the parent's, which is gone: this process resumes both.
                    force: true,
                    cancel: Some(cancel),
                    ..ResumeOptions::default()
                };
                self.resume_child(&child.run_id, options, call.shared.clone())
                    .await
            }
            Ok(None) => self.start_child(call, policy, child, cancel).await,
        };
        let (outcome, usage, cost) = match ended {
            Ok(record) => {
                let handoff = match record.state {
                    AgentState::Completed => None,
                    _ => self.handoff(&child.session_id).await,
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

    /// Starts a new child in its own session and lane, for the parent's user, under the
    /// parent's trust, with a fresh context of its goal alone.
    async fn start_child(
        &self,
        call: &DelegateCall<'_>,
        policy: &DelegationPolicy,
        child: &Child<'_>,
        cancel: CancellationToken,
    ) -> Result<RunRecord, AgentError> {
        let store = self.store.as_ref();
        let now = self.clock.now();
        let worker = call
            .settings
            .worker
            .as_ref()
            .map_or_else(|| "keel".to_string(), ToString::to_string);
        let claim = LaneClaim {
            session_id: &child.session_id,
            run_id: &child.run_id,
            worker: &worker,
            at: now,
            stale_after: chrono::Duration::from_std(self.reconcile.stale_after)
                .unwrap_or(chrono::Duration::MAX),
        };
        if let LaneOutcome::Busy(holder) = store.claim_session(&claim).await? {
            return Err(AgentError::NotResumable(format!(
                "its session's lane is held by run `{}`",
                holder.run_id
            )));
        }
        let settings = child_settings(call.settings, call.spent, policy, child.task.max_iterations);
        let user = call.context.user_id.clone();
        let mut run = Run::new(
            child.run_id.clone(),
            child.session_id.clone(),
            settings,
            child.tools.clone(),
            Vec::new(),
            Message::user(child.task.message()),
            now,
        )
        .with_user(user.clone())
        .with_shared_budget(call.shared.clone());
        let emitter = self.emitter(&child.run_id, &child.session_id);
        let mut driver = self.driver(&emitter, &cancel, user);
        // Nobody answers a sub-agent's question: it stops, and the parent hears why.
        driver.human = None;
        driver.drive(&mut run).await?;
        Ok(run.record(self.clock.now()))
    }

    /// Resumes an interrupted child and reads back how it ended.
    async fn resume_child(
        &self,
        run_id: &str,
        options: ResumeOptions,
        shared: Option<std::sync::Arc<crate::budget::SharedBudget>>,
    ) -> Result<RunRecord, AgentError> {
        let report: RunReport = self.resume_sharing(run_id, options, shared).await?;
        self.store
            .run(&report.run_id)
            .await?
            .ok_or_else(|| AgentError::NotResumable(format!("run `{run_id}` disappeared")))
    }

    /// The handoff a failed child left in its run journal.
    async fn handoff(&self, session_id: &str) -> Option<String> {
        self.store
            .journal(session_id)
            .await
            .ok()
            .flatten()
            .and_then(|journal| journal.handoff())
    }
}

/// True when `record` is a child's end for good: terminal, and not a timed-out run that may
/// still be resumed.
fn settled(record: &RunRecord) -> bool {
    record.state.is_terminal() && !(record.state == AgentState::TimedOut && record.resume_available)
}
