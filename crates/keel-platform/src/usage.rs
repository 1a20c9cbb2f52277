//! Reading the token log back (seed 003, step 8b): a month of model calls summed per user and
//! model, for the daemon's usage report. Writing it is the run's: each boundary commit writes
//! its calls' rows ([`keel_core::token_log::TokenCharge`]).

use chrono::NaiveDate;
use keel_core::Usage;
use serde::{Deserialize, Serialize};

/// Which part of the token log to sum.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UsageQuery {
    /// Only this user's calls.
    pub user_id: Option<String>,
    /// The month, `YYYY-MM` (UTC).
    pub month: String,
}

/// The calls of one user with one model in a month, summed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageLine {
    /// The user; `None` for runs for no user.
    pub user_id: Option<String>,
    /// The model.
    pub model: String,
    /// Model calls.
    pub calls: u64,
    /// Tokens.
    pub usage: Usage,
    /// Dollars.
    pub cost: f64,
}

/// Whether `month` is a month key (`YYYY-MM`).
pub fn is_usage_month(month: &str) -> bool {
    month.len() == 7 && NaiveDate::parse_from_str(&format!("{month}-01"), "%Y-%m-%d").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn month_keys_are_checked() {
        assert!(is_usage_month("2026-11"));
        for bad in ["2026-13", "2026-1", "26-11", "2026-11-01", "", "abcd-ef"] {
            assert!(!is_usage_month(bad), "{bad}");
        }
    }
}
