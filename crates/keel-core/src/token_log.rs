//! The token log (seed 003, step 8b): one row per model call — who, where, which model, how
//! many tokens, what it cost. A run's boundary commit writes its calls' rows and adds them to
//! the user's month in the same transaction, so the log always sums to the runs' usage and a
//! monthly budget sees every call as soon as it is durable.

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::provider::Usage;

/// One model call's spend, as a run records it for its next commit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenCharge {
    /// The user the run is for; `None` for a run for no user (counted, never budgeted).
    pub user_id: Option<String>,
    /// The model that answered.
    pub model: String,
    /// Tokens it used.
    pub usage: Usage,
    /// Dollars, at the price table's prices (0 for a model without a price).
    pub cost: f64,
    /// When the answer arrived.
    pub at: DateTime<Utc>,
}

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

/// The month key usage is counted under: `YYYY-MM` in UTC. A new month starts from zero.
pub fn usage_month(at: DateTime<Utc>) -> String {
    at.format("%Y-%m").to_string()
}

/// Whether `month` is a month key (`YYYY-MM`).
pub fn is_usage_month(month: &str) -> bool {
    month.len() == 7 && NaiveDate::parse_from_str(&format!("{month}-01"), "%Y-%m-%d").is_ok()
}

/// When the month of `at` ends and budgets reset: the first of the next month, 00:00 UTC.
pub fn budget_resets_at(at: DateTime<Utc>) -> DateTime<Utc> {
    let (year, month) = if at.month() == 12 {
        (at.year() + 1, 1)
    } else {
        (at.year(), at.month() + 1)
    };
    Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0)
        .single()
        .unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_reset_on_the_first_of_next_month_utc() {
        let at = Utc.with_ymd_and_hms(2026, 11, 24, 15, 0, 0).unwrap();
        assert_eq!(
            budget_resets_at(at).to_rfc3339(),
            "2026-12-01T00:00:00+00:00"
        );
        let december = Utc.with_ymd_and_hms(2026, 12, 31, 23, 59, 59).unwrap();
        assert_eq!(
            budget_resets_at(december).to_rfc3339(),
            "2027-01-01T00:00:00+00:00"
        );
        assert_eq!(usage_month(december), "2026-12");
    }

    #[test]
    fn month_keys_are_checked() {
        assert!(is_usage_month("2026-11"));
        for bad in ["2026-13", "2026-1", "26-11", "2026-11-01", "", "abcd-ef"] {
            assert!(!is_usage_month(bad), "{bad}");
        }
    }
}
