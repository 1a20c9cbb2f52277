//! A run's budgets as part of a tree of runs: what its sub-agents spent, counted against its
//! own budgets, and the budget a sub-agent shares with its parent and the sub-agents running
//! beside it ([`SharedBudget`]).

use std::sync::Arc;

use super::{Run, Step};
use crate::budget::{Reservation, SharedBudget};
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

impl Run {
    /// Adds what the run's sub-agents spent to its usage and cost, so its token and cost
    /// budgets see it. Not a charge of its own: each child's calls are in the token log
    /// already, under the child's run and the same user.
    pub fn add_delegated_usage(&mut self, usage: Usage, cost: f64) {
        self.usage += usage;
        self.cost += cost;
    }

    /// The run draws on `pool` too, a budget it shares with its parent and the sub-agents
    /// running beside it: before each model call it holds room for the call there, and stops
    /// as `budget_exceeded` when none is left.
    pub fn with_shared_budget(mut self, pool: Option<Arc<SharedBudget>>) -> Self {
        self.share = Share { pool, held: None };
        self
    }

    /// The budget the run shares with its parent and siblings, when it is a sub-agent that
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
