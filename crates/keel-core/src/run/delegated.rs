//! What a run's sub-agents spent, counted against the run's own budgets.

use super::Run;
use crate::provider::Usage;

impl Run {
    /// Adds what the run's sub-agents spent to its usage and cost, so its token and cost
    /// budgets see it. Not a charge of its own: each child's calls are in the token log
    /// already, under the child's run and the same user.
    pub fn add_delegated_usage(&mut self, usage: Usage, cost: f64) {
        self.usage += usage;
        self.cost += cost;
    }
}
