//! Where the loop meets delegation: the driver gives its executor a [`Delegation`], which
//! answers the run's `delegate_task` calls through the agent and keeps what the children spent
//! for the parent's budgets.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::{DelegateCall, DelegateResult, Delegator};
use crate::budget::SharedBudget;
use crate::event::Emitter;
use crate::provider::Usage;
use crate::run::Run;
use crate::run_settings::RunSettings;
use crate::tool::{ToolContext, ToolSpec};

/// One run's delegation: who starts its children, and what they spent in the current batch.
pub struct Delegation<'a> {
    delegator: &'a dyn Delegator,
    settings: RunSettings,
    /// What the parent had spent when the batch started; set by the driver.
    spent_before: Mutex<(u64, f64)>,
    /// The budget the batch's children share (with their own children): the parent's own
    /// shared budget when it is a sub-agent itself, else what its budgets have left.
    shared: Mutex<Option<Arc<SharedBudget>>>,
    /// What the batch's children spent; taken by the driver after the batch.
    children: Mutex<(Usage, f64)>,
}

impl<'a> Delegation<'a> {
    /// The delegation of a run with `settings`.
    pub fn new(delegator: &'a dyn Delegator, settings: RunSettings) -> Self {
        Delegation {
            delegator,
            settings,
            spent_before: Mutex::new((0, 0.0)),
            shared: Mutex::new(None),
            children: Mutex::new((Usage::default(), 0.0)),
        }
    }

    /// A batch of `run` starts: what it has spent so far, and the budget its children will
    /// share — so that children running at the same time draw on one remainder, not each on
    /// the whole of it.
    pub fn begin_batch(&self, run: &Run) {
        let (tokens, cost) = (run.usage().total(), run.cost());
        if let Ok(mut spent) = self.spent_before.lock() {
            *spent = (tokens, cost);
        }
        let shared = match run.shared_budget() {
            Some(pool) => Some(Arc::clone(pool)),
            None => {
                // Until a child's call says otherwise, a call is assumed as large as the
                // parent's own, on average.
                let calls = u64::from(run.iteration().max(1));
                let per_call = (tokens / calls, cost / calls as f64);
                SharedBudget::new(&self.settings.budgets, (tokens, cost), per_call)
            }
        };
        if let Ok(mut slot) = self.shared.lock() {
            *slot = shared;
        }
    }

    /// What the children of the batch spent, leaving nothing.
    pub fn take_spent(&self) -> (Usage, f64) {
        self.children
            .lock()
            .map(|mut spent| std::mem::take(&mut *spent))
            .unwrap_or_default()
    }

    /// Answers one `delegate_task` call: `(ok, content)` for the parent.
    pub async fn call(
        &self,
        args: &Value,
        context: &ToolContext,
        offered: &[ToolSpec],
        emitter: &Emitter,
    ) -> (bool, String) {
        let spent = self.spent_before.lock().map(|s| *s).unwrap_or_default();
        let shared = self.shared.lock().ok().and_then(|slot| slot.clone());
        let DelegateResult {
            ok,
            content,
            usage,
            cost,
        } = self
            .delegator
            .delegate(DelegateCall {
                args,
                context,
                offered,
                settings: &self.settings,
                spent,
                shared,
                emitter,
            })
            .await;
        if let Ok(mut children) = self.children.lock() {
            children.0 += usage;
            children.1 += cost;
        }
        (ok, content)
    }

    /// The refusal for a run whose depth allows no `delegate_task`.
    pub fn refusal(&self, session_id: &str) -> String {
        let max = self.settings.delegation.as_ref().map_or(0, |p| p.max_depth);
        super::depth_refusal(super::depth_of(session_id), max)
    }
}
