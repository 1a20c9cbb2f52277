//! Budgets: what a run may spend in tokens and money, what it has spent, and when to warn
//! (DESIGN.md section 5). Prices are per million tokens, in US dollars, in a table that
//! configuration extends.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::provider::Usage;

mod shared;

pub use shared::{Reservation, SharedBudget};

/// Prices of one model, in USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Uncached prompt tokens.
    pub input: f64,
    /// Completion tokens.
    pub output: f64,
    /// Prompt tokens read from the cache (defaults to `input`).
    #[serde(default)]
    pub cache_read: Option<f64>,
    /// Prompt tokens written to the cache (defaults to `input`).
    #[serde(default)]
    pub cache_write: Option<f64>,
}

impl Price {
    const fn new(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Price {
        Price {
            input,
            output,
            cache_read: Some(cache_read),
            cache_write: Some(cache_write),
        }
    }

    /// The cost of `usage` at these prices. `usage.input_tokens` includes cached tokens.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cache_read_tokens + usage.cache_write_tokens;
        let fresh = usage.input_tokens.saturating_sub(cached) as f64;
        (fresh * self.input
            + usage.cache_read_tokens as f64 * self.cache_read.unwrap_or(self.input)
            + usage.cache_write_tokens as f64 * self.cache_write.unwrap_or(self.input)
            + usage.output_tokens as f64 * self.output)
            / 1_000_000.0
    }
}

/// Model prices, looked up by the longest matching name prefix (so `gpt-4o-mini-2024-07-18`
/// finds `gpt-4o-mini`). Clones share the table (every run holds one) until one is changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PriceTable {
    prices: Arc<BTreeMap<String, Price>>,
}

impl Default for PriceTable {
    /// List prices of common models (USD per million tokens) at the time of writing.
    fn default() -> Self {
        let known = [
            ("gpt-4o-mini", Price::new(0.15, 0.60, 0.075, 0.15)),
            ("gpt-4o", Price::new(2.50, 10.0, 1.25, 2.50)),
            ("gpt-4.1-nano", Price::new(0.10, 0.40, 0.025, 0.10)),
            ("gpt-4.1-mini", Price::new(0.40, 1.60, 0.10, 0.40)),
            ("gpt-4.1", Price::new(2.0, 8.0, 0.50, 2.0)),
            ("gpt-5-nano", Price::new(0.05, 0.40, 0.005, 0.05)),
            ("gpt-5-mini", Price::new(0.25, 2.0, 0.025, 0.25)),
            ("gpt-5", Price::new(1.25, 10.0, 0.125, 1.25)),
            ("o4-mini", Price::new(1.10, 4.40, 0.275, 1.10)),
            ("o3", Price::new(2.0, 8.0, 0.50, 2.0)),
            ("claude-haiku-4", Price::new(1.0, 5.0, 0.10, 1.25)),
            ("claude-3-5-haiku", Price::new(0.80, 4.0, 0.08, 1.0)),
            ("claude-sonnet-4", Price::new(3.0, 15.0, 0.30, 3.75)),
            ("claude-3-7-sonnet", Price::new(3.0, 15.0, 0.30, 3.75)),
            ("claude-opus-4", Price::new(15.0, 75.0, 1.50, 18.75)),
        ];
        PriceTable {
            prices: Arc::new(
                known
                    .into_iter()
                    .map(|(name, price)| (name.to_string(), price))
                    .collect(),
            ),
        }
    }
}

impl PriceTable {
    /// An empty table.
    pub fn empty() -> Self {
        PriceTable {
            prices: Arc::default(),
        }
    }

    /// Adds or replaces a model's price.
    pub fn set(&mut self, model: impl Into<String>, price: Price) {
        Arc::make_mut(&mut self.prices).insert(model.into(), price);
    }

    /// The price of `model`: an exact entry, else the longest entry that prefixes it.
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.prices.get(model).or_else(|| {
            self.prices
                .iter()
                .filter(|(name, _)| model.starts_with(name.as_str()))
                .max_by_key(|(name, _)| name.len())
                .map(|(_, price)| price)
        })
    }
}

/// Per-run limits and the headroom that triggers a warning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Budgets {
    /// Most tokens (input + output) a run may use.
    pub token_budget: Option<u64>,
    /// Most dollars a run may spend.
    pub cost_limit: Option<f64>,
    /// Warn when fewer tokens than this remain.
    pub reserve_tokens: u64,
    /// Warn when less than this fraction of `cost_limit` remains.
    pub reserve_cost_fraction: f64,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            token_budget: None,
            cost_limit: None,
            reserve_tokens: 512,
            reserve_cost_fraction: 0.1,
        }
    }
}

/// Where a run stands against its budgets.
#[derive(Clone, Debug, PartialEq)]
pub enum BudgetStatus {
    /// Plenty left.
    Ok,
    /// Close to a limit: the message goes to the model as a warning layer.
    Near(String),
    /// Over a limit: the run must stop.
    Exceeded(String),
}

impl Budgets {
    /// Checks `tokens` and `cost` spent so far against the limits. A cost limit that is not
    /// a finite number is no limit.
    pub fn check(&self, tokens: u64, cost: f64) -> BudgetStatus {
        if let Some(limit) = self.token_budget
            && tokens >= limit
        {
            return BudgetStatus::Exceeded(format!(
                "Stopped: the run used {tokens} tokens, reaching its token budget of {limit}."
            ));
        }
        let cost_limit = self.cost_limit.filter(|limit| limit.is_finite());
        if let Some(limit) = cost_limit
            && cost >= limit
        {
            return BudgetStatus::Exceeded(format!(
                "Stopped: the run cost ${cost:.4}, reaching its cost limit of ${limit:.4}."
            ));
        }
        if let Some(limit) = self.token_budget {
            let left = limit - tokens;
            if left <= self.reserve_tokens {
                return BudgetStatus::Near(format!(
                    "Budget notice: only about {left} tokens of this run's budget remain. Finish \
                     the task now or summarize what is done and what is left."
                ));
            }
        }
        if let Some(limit) = cost_limit {
            let left = limit - cost;
            if left <= limit * self.reserve_cost_fraction {
                return BudgetStatus::Near(format!(
                    "Budget notice: only ${left:.4} of this run's ${limit:.4} cost limit remains. \
                     Finish the task now or summarize what is done and what is left."
                ));
            }
        }
        BudgetStatus::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_match_the_longest_prefix() {
        let table = PriceTable::default();
        assert_eq!(table.price("gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
        assert_eq!(table.price("gpt-4o-2024-08-06").unwrap().input, 2.50);
        assert_eq!(
            table.price("claude-sonnet-4-5-20250929").unwrap().output,
            15.0
        );
        assert!(table.price("llama3.1").is_none());
    }

    #[test]
    fn cost_counts_cached_tokens_at_their_own_price() {
        let price = Price::new(3.0, 15.0, 0.30, 3.75);
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            cache_read_tokens: 500_000,
            cache_write_tokens: 100_000,
        };
        // 400k fresh × 3 + 500k × 0.3 + 100k × 3.75 + 100k × 15, per million.
        let expected = 1.2 + 0.15 + 0.375 + 1.5;
        assert!((price.cost(&usage) - expected).abs() < 1e-9);
    }

    #[test]
    fn limits_warn_first_then_stop() {
        let budgets = Budgets {
            token_budget: Some(1000),
            cost_limit: Some(1.0),
            ..Budgets::default()
        };
        assert_eq!(budgets.check(100, 0.1), BudgetStatus::Ok);
        assert!(
            matches!(budgets.check(600, 0.1), BudgetStatus::Near(m) if m.contains("400 tokens"))
        );
        assert!(matches!(budgets.check(100, 0.95), BudgetStatus::Near(m) if m.contains("$0.05")));
        assert!(
            matches!(budgets.check(1000, 0.1), BudgetStatus::Exceeded(m) if m.contains("1000"))
        );
        assert!(
            matches!(budgets.check(10, 1.5), BudgetStatus::Exceeded(m) if m.contains("cost limit"))
        );
        assert_eq!(
            Budgets::default().check(u64::MAX / 2, 1e9),
            BudgetStatus::Ok
        );
    }

    #[test]
    fn an_infinite_cost_limit_never_warns_nor_stops() {
        let budgets = Budgets {
            cost_limit: Some(f64::INFINITY),
            ..Budgets::default()
        };
        assert_eq!(budgets.check(100, 0.0), BudgetStatus::Ok);
        assert_eq!(budgets.check(100, 1e12), BudgetStatus::Ok);
    }
}
