//! A budget shared by a run and its sub-agents while they run at the same time.
//!
//! Each child used to get the whole of what its parent had left, so three concurrent children
//! could spend three times it. Now the parent's remainder becomes one [`SharedBudget`] that the
//! children (and theirs) draw from: before each model call a run reserves that call's likely
//! size, and is refused when what is spent and reserved already reaches the limit; after the
//! call its real usage replaces the reservation. Calls start only while the limit is not
//! reached counting every call in flight, so the tree overshoots by at most about one call.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::Budgets;

/// What a run and its concurrent sub-agents may still spend together: tokens, dollars, or both.
#[derive(Debug)]
pub struct SharedBudget {
    tokens: Option<u64>,
    cost: Option<f64>,
    ledger: Mutex<Ledger>,
}

/// What the sharers spent and hold, and the largest call seen (the size a call is assumed to
/// have before it is made).
#[derive(Debug, Default)]
struct Ledger {
    spent_tokens: u64,
    spent_cost: f64,
    reserved_tokens: u64,
    reserved_cost: f64,
    call_tokens: u64,
    call_cost: f64,
}

impl SharedBudget {
    /// The remainder of `budgets` once `spent` (tokens, dollars) is used, to be shared; `None`
    /// when `budgets` has no limit. `per_call` (tokens, dollars) is the size a call is assumed
    /// to have until a larger one is seen: the parent's own calls so far, on average.
    pub fn new(budgets: &Budgets, spent: (u64, f64), per_call: (u64, f64)) -> Option<Arc<Self>> {
        let tokens = budgets
            .token_budget
            .map(|limit| limit.saturating_sub(spent.0));
        let cost = budgets
            .cost_limit
            .filter(|limit| limit.is_finite())
            .map(|limit| (limit - spent.1).max(0.0));
        if tokens.is_none() && cost.is_none() {
            return None;
        }
        Some(Arc::new(SharedBudget {
            tokens,
            cost,
            ledger: Mutex::new(Ledger {
                call_tokens: per_call.0,
                call_cost: per_call.1.max(0.0),
                ..Ledger::default()
            }),
        }))
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // The ledger is plain numbers, consistent after every update: a panic elsewhere
        // while it was held leaves nothing half-written.
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds room for one model call of about `estimate` tokens (at least the largest call
    /// seen), or says why no call may start: what is spent and held by calls in flight already
    /// reaches a limit.
    pub fn reserve(self: &Arc<Self>, estimate: u64) -> Result<Reservation, String> {
        let mut ledger = self.ledger();
        if let Some(limit) = self.tokens {
            let used = ledger.spent_tokens + ledger.reserved_tokens;
            if used >= limit {
                return Err(format!(
                    "Stopped: the token budget this sub-agent shares with its parent run and \
                     the other sub-agents is spent: {} of the {limit} tokens left when the \
                     sub-agents started are used{}.",
                    ledger.spent_tokens,
                    held(
                        ledger.reserved_tokens.to_string(),
                        ledger.reserved_tokens > 0
                    ),
                ));
            }
        }
        if let Some(limit) = self.cost {
            let used = ledger.spent_cost + ledger.reserved_cost;
            if used >= limit {
                return Err(format!(
                    "Stopped: the cost limit this sub-agent shares with its parent run and the \
                     other sub-agents is spent: ${:.4} of the ${limit:.4} left when the \
                     sub-agents started is used{}.",
                    ledger.spent_cost,
                    held(
                        format!("${:.4}", ledger.reserved_cost),
                        ledger.reserved_cost > 0.0
                    ),
                ));
            }
        }
        let tokens = estimate.max(ledger.call_tokens);
        let cost = ledger.call_cost;
        ledger.reserved_tokens += tokens;
        ledger.reserved_cost += cost;
        Ok(Reservation {
            pool: Arc::clone(self),
            tokens,
            cost,
        })
    }

    /// Counts spending no reservation held: a call made without one (a summary, a memory
    /// flush), or a finished child's run found again after a crash.
    pub fn charge(&self, tokens: u64, cost: f64) {
        let mut ledger = self.ledger();
        ledger.spend(tokens, cost);
    }

    /// What the sharers have spent: (tokens, dollars).
    pub fn spent(&self) -> (u64, f64) {
        let ledger = self.ledger();
        (ledger.spent_tokens, ledger.spent_cost)
    }

    /// What was left to share when the sharing started: (tokens, dollars).
    pub fn limits(&self) -> (Option<u64>, Option<f64>) {
        (self.tokens, self.cost)
    }
}

impl Ledger {
    fn spend(&mut self, tokens: u64, cost: f64) {
        let cost = if cost.is_finite() { cost.max(0.0) } else { 0.0 };
        self.spent_tokens = self.spent_tokens.saturating_add(tokens);
        self.spent_cost += cost;
        self.call_tokens = self.call_tokens.max(tokens);
        self.call_cost = self.call_cost.max(cost);
    }
}

fn held(amount: String, any: bool) -> String {
    if any {
        format!(", and {amount} more are held by calls in flight")
    } else {
        String::new()
    }
}

/// Room held for one model call; [`Reservation::settle`] replaces it with what the call spent,
/// and dropping it unsettled (the call failed, the run ended) gives the room back.
#[derive(Debug)]
pub struct Reservation {
    pool: Arc<SharedBudget>,
    tokens: u64,
    cost: f64,
}

impl Reservation {
    /// The call spent `tokens` and `cost`: that is counted, and the room held is given back.
    pub fn settle(self, tokens: u64, cost: f64) {
        self.pool.ledger().spend(tokens, cost);
        // Drop gives back the room.
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut ledger = self.pool.ledger();
        ledger.reserved_tokens = ledger.reserved_tokens.saturating_sub(self.tokens);
        ledger.reserved_cost = (ledger.reserved_cost - self.cost).max(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(limit: u64) -> Budgets {
        Budgets {
            token_budget: Some(limit),
            ..Budgets::default()
        }
    }

    #[test]
    fn no_limit_nothing_to_share() {
        assert!(SharedBudget::new(&Budgets::default(), (10, 1.0), (5, 0.1)).is_none());
        let infinite = Budgets {
            cost_limit: Some(f64::INFINITY),
            ..Budgets::default()
        };
        assert!(SharedBudget::new(&infinite, (0, 0.0), (0, 0.0)).is_none());
    }

    #[test]
    fn calls_in_flight_hold_room_so_only_one_call_can_overshoot() {
        // 2500 budget, 1000 spent by the parent in one call: 1500 to share.
        let pool = SharedBudget::new(&tokens(2500), (1000, 0.0), (1000, 0.0)).unwrap();
        assert_eq!(pool.limits(), (Some(1500), None));
        let a = pool.reserve(10).unwrap();
        let b = pool.reserve(10).unwrap();
        // 2000 held ≥ 1500: a third concurrent call may not start.
        let refused = pool.reserve(10).unwrap_err();
        assert!(refused.contains("shares with its parent run"), "{refused}");
        assert!(refused.contains("2000 more are held"), "{refused}");
        a.settle(1000, 0.0);
        b.settle(1000, 0.0);
        assert_eq!(pool.spent(), (2000, 0.0));
        let spent = pool.reserve(10).unwrap_err();
        assert!(spent.contains("2000 of the 1500 tokens"), "{spent}");
        assert!(!spent.contains("held"), "{spent}");
    }

    #[test]
    fn a_failed_call_gives_its_room_back() {
        let pool = SharedBudget::new(&tokens(100), (0, 0.0), (60, 0.0)).unwrap();
        let a = pool.reserve(0).unwrap();
        let _b = pool.reserve(0).unwrap();
        assert!(pool.reserve(0).is_err());
        drop(a);
        assert!(
            pool.reserve(0).is_ok(),
            "the dropped reservation's room is free"
        );
        assert_eq!(pool.spent(), (0, 0.0));
    }

    #[test]
    fn the_largest_call_seen_sizes_the_next_reservation() {
        let pool = SharedBudget::new(&tokens(1000), (0, 0.0), (0, 0.0)).unwrap();
        pool.reserve(5).unwrap().settle(700, 0.0);
        // 700 spent, and calls are now assumed to be 700: one more may start, not two.
        let _next = pool.reserve(5).unwrap();
        assert!(pool.reserve(5).is_err());
    }

    #[test]
    fn a_cost_limit_is_shared_the_same_way() {
        let budgets = Budgets {
            cost_limit: Some(1.0),
            ..Budgets::default()
        };
        let pool = SharedBudget::new(&budgets, (0, 0.4), (0, 0.6)).unwrap();
        let a = pool.reserve(0).unwrap();
        let refused = pool.reserve(0).unwrap_err();
        assert!(refused.contains("cost limit"), "{refused}");
        a.settle(0, 0.7);
        assert!(pool.reserve(0).is_err(), "$0.70 of $0.60 is spent");
        pool.charge(0, f64::NAN);
        assert_eq!(pool.spent().1, 0.7);
    }
}
