//! A run's budgets as part of a tree of runs: what the child runs it starts spend, counted
//! against its own budgets ([`BatchSpend`]), and the budget a child run shares with its parent
//! and the children running beside it ([`SharedBudget`]).

use std::sync::{Arc, Mutex};

use super::{Run, Step};
use crate::budget::{Budgets, Reservation, SharedBudget};
use crate::provider::Usage;
use crate::state::AgentState;

/// The run's part in a shared budget: the budget, and the room held for the call under way.
#[derive(Default)]
pub(super) struct Share {
    pool: Option<Arc<SharedBudget>>,
    held: Option<Reservation>,
}

impl Clone for Share {
    /// A copy shares the budget but holds no room: the call under way is the original's.
    fn clone(&self) -> Self {
        Share {
            pool: self.pool.clone(),
            held: None,
        }
    }
}

impl std::fmt::Debug for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Share")
            .field("shared", &self.pool.is_some())
            .field("held", &self.held.is_some())
            .finish()
    }
}

/// What the child runs started during one tool batch of a run spend: the driver begins it
/// before the batch ([`BatchSpend::begin`]) and adds what it took to the run after
/// ([`Run::add_child_usage`]). Tools that start child runs read from it what the parent had
/// spent and the budget the batch's children share.
#[derive(Default)]
pub struct BatchSpend(Mutex<Batch>);

#[derive(Default)]
struct Batch {
    /// The run's tokens and dollars when the batch started.
    spent_before: (u64, f64),
    /// The run's budgets.
    budgets: Budgets,
    /// What a call of the run cost on average, until a child's own calls say otherwise.
    per_call: (u64, f64),
    /// The budget the batch's children share: the run's own shared one when it is a child
    /// itself, else made from what its budgets have left when a child first asks for it.
    shared: Option<Option<Arc<SharedBudget>>>,
    /// What the batch's children spent.
    children: (Usage, f64),
}

impl BatchSpend {
    /// A batch of `run` starts: what it has spent so far, and the budget its children will
    /// share — so that children running at the same time draw on one remainder, not each on
    /// the whole of it.
    pub fn begin(&self, run: &Run) {
        let (tokens, cost) = (run.usage().total(), run.cost());
        let calls = u64::from(run.iteration().max(1));
        let batch = Batch {
            spent_before: (tokens, cost),
            budgets: run.settings().budgets.clone(),
            per_call: (tokens / calls, cost / calls as f64),
            shared: run.shared_budget().map(|pool| Some(Arc::clone(pool))),
            children: (Usage::default(), 0.0),
        };
        if let Ok(mut slot) = self.0.lock() {
            *slot = batch;
        }
    }

    /// The tokens and dollars the run had spent when the batch started.
    pub fn spent_before(&self) -> (u64, f64) {
        self.0.lock().map(|b| b.spent_before).unwrap_or_default()
    }

    /// The budget the batch's children share with each other and their own children, when
    /// the run's budgets have a limit.
    pub fn shared(&self) -> Option<Arc<SharedBudget>> {
        let mut batch = self.0.lock().ok()?;
        let Batch {
            spent_before,
            budgets,
            per_call,
            shared,
            ..
        } = &mut *batch;
        shared
            .get_or_insert_with(|| SharedBudget::new(budgets, *spent_before, *per_call))
            .clone()
    }

    /// A child run of the batch spent `usage` and `cost`.
    pub fn add(&self, usage: Usage, cost: f64) {
        if let Ok(mut batch) = self.0.lock() {
            batch.children.0 += usage;
            batch.children.1 += cost;
        }
    }

    /// What the batch's children spent, leaving nothing.
    pub fn take(&self) -> (Usage, f64) {
        self.0
            .lock()
            .map(|mut batch| std::mem::take(&mut batch.children))
            .unwrap_or_default()
    }
}

impl Run {
    /// Adds what the run's child runs spent to its usage and cost, so its token and cost
    /// budgets see it. Not a charge of its own: each child's calls are in the token log
    /// already, under the child's run and the same user.
    pub fn add_child_usage(&mut self, (usage, cost): (Usage, f64)) {
        self.usage += usage;
        self.cost += cost;
    }

    /// The run draws on `pool` too, a budget it shares with its parent and the child runs
    /// running beside it: before each model call it holds room for the call there, and stops
    /// as `budget_exceeded` when none is left.
    pub fn with_shared_budget(mut self, pool: Option<Arc<SharedBudget>>) -> Self {
        self.share = Share { pool, held: None };
        self
    }

    /// The budget the run shares with its parent and siblings, when it is a child run that
    /// runs beside others under a limit.
    pub fn shared_budget(&self) -> Option<&Arc<SharedBudget>> {
        self.share.pool.as_ref()
    }

    /// Before a model call: holds room for it in the shared budget, or ends the run as
    /// `budget_exceeded` with the budget's note. `None`: go on.
    pub(super) fn reserve_shared_budget(&mut self) -> Option<Step> {
        let pool = self.share.pool.clone()?;
        // The room of the previous call (if it failed and was never settled) is given back.
        self.share.held = None;
        match pool.reserve(self.context_tokens()) {
            Ok(reservation) => {
                self.share.held = Some(reservation);
                None
            }
            Err(message) => Some(self.fail(AgentState::BudgetExceeded, None, message)),
        }
    }

    /// A model call of the run spent `tokens` and `cost`: the shared budget counts it.
    pub(super) fn settle_shared_budget(&mut self, tokens: u64, cost: f64) {
        match (self.share.held.take(), &self.share.pool) {
            (Some(reservation), _) => reservation.settle(tokens, cost),
            (None, Some(pool)) => pool.charge(tokens, cost),
            (None, None) => {}
        }
    }
}
