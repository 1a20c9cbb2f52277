//! A run's sub-agents as a tree, read back from the store: the children of each of its
//! `delegate_task` calls are found by their derived ids, so no link has to be stored.

use std::future::Future;
use std::pin::Pin;

use keel_core::store::{RunRecord, Store, StoreError};

use super::policy::MAX_PARALLEL_LIMIT;
use super::{DelegationPolicy, child_ids, depth_of, parse_tasks};

/// A sub-agent run and its own sub-agents.
#[derive(Clone, Debug)]
pub struct ChildRun {
    /// Its goal.
    pub goal: String,
    /// Its record.
    pub record: RunRecord,
    /// Its children, in call order.
    pub children: Vec<ChildRun>,
}

/// The sub-agents of `parent`, in call order, each with its own; tasks that never started
/// (a refused call, a crash before the child's first commit) are left out.
pub fn child_runs<'a>(
    store: &'a dyn Store,
    parent: &'a RunRecord,
) -> Pin<Box<dyn Future<Output = Result<Vec<ChildRun>, StoreError>> + Send + 'a>> {
    Box::pin(async move {
        let depth = depth_of(&parent.session_id) + 1;
        // Wide enough for any call that ran: the ids are what decides.
        let policy = DelegationPolicy {
            max_parallel: MAX_PARALLEL_LIMIT,
            ..DelegationPolicy::default()
        };
        let mut found = Vec::new();
        for stored in store.messages_since(&parent.session_id, 0).await? {
            if stored.run_id.as_deref() != Some(parent.id.as_str()) {
                continue;
            }
            for call in &stored.message.tool_calls {
                if call.name != super::DELEGATE_TASK {
                    continue;
                }
                let Ok(args) = serde_json::from_str(&call.arguments) else {
                    continue;
                };
                let Ok(tasks) = parse_tasks(&args, &policy) else {
                    continue;
                };
                for (index, task) in tasks.into_iter().enumerate() {
                    let (run_id, _) = child_ids(&parent.id, &call.id, index, depth);
                    if let Some(record) = store.run(&run_id).await? {
                        let children = child_runs(store, &record).await?;
                        found.push(ChildRun {
                            goal: task.goal,
                            record,
                            children,
                        });
                    }
                }
            }
        }
        Ok(found)
    })
}
