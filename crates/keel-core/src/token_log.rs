//! The token log (seed 003, step 8b): one row per model call — who, where, which model, how
//! many tokens, what it cost. A run's boundary commit writes its calls' rows and adds them to
//! the user's month in the same transaction, so the log always sums to the runs' usage and a
//! monthly budget sees every call as soon as it is durable. Reading the log back (summed per user
//! and model) is keel-platform's.

use chrono::{DateTime, Datelike, TimeZone, Utc};
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

/// The month key usage is counted under: `YYYY-MM` in UTC. A new month starts from zero.
pub fn usage_month(at: DateTime<Utc>) -> String {
    at.format("%Y-%m").to_string()
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

/// Why `user`, who has used `used` of their monthly `budget` tokens in the month of `now`, may
/// not run now; `None` while some is left. The one wording of a spent budget: a run's refusal
/// and a schedule's refused slot say the same.
pub fn budget_spent(user: &str, used: u64, budget: u64, now: DateTime<Utc>) -> Option<String> {
    (used >= budget).then(|| {
        format!(
            "user `{user}` has used {used} of their {budget} tokens for {}; the budget resets \
             at {}",
            usage_month(now),
            budget_resets_at(now).format("%Y-%m-%d %H:%M UTC")
        )
    })
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
}
