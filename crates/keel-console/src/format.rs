//! How the console writes numbers, times and states: one wording on every page (the run page
//! uses these too). Everything returns text or escaped markup; nothing here trusts its input.

use chrono::{DateTime, Utc};
use keel_core::RunRecord;
use maud::{Markup, html};

/// How long ago `then` was at `now`, in the largest whole unit: `just now`, `5 min ago`,
/// `3 h ago`, `2 d ago`.
pub fn ago(then: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let seconds = (now - then).num_seconds();
    match seconds {
        s if s < 60 => "just now".to_string(),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86_400 => format!("{} h ago", s / 3600),
        s => format!("{} d ago", s / 86_400),
    }
}

/// A `<time>` element: `then` as [`ago`], its exact instant in `datetime` and `title`.
pub fn time_ago(then: DateTime<Utc>, now: DateTime<Utc>) -> Markup {
    let exact = then.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    html! { time datetime=(then.to_rfc3339()) title=(exact) { (ago(then, now)) } }
}

/// Dollars, to the cent above a dollar and to a hundredth of a cent below.
pub fn dollars(cost: f64) -> String {
    if cost >= 1.0 {
        format!("${cost:.2}")
    } else {
        format!("${cost:.4}")
    }
}

/// A count with its thousands separated by commas: `12,345`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A run's state as a badge, with its reason when it has one (`error: provider`).
pub fn state_badge(run: &RunRecord) -> Markup {
    let state = run.state.as_str();
    html! {
        span class={ "state state-" (state) } {
            (state)
            @if let Some(reason) = run.reason {
                ": " (reason.as_str())
            }
        }
    }
}

/// The model a run used (the one that last answered, else the one asked for).
pub fn model(run: &RunRecord) -> &str {
    run.model_used.as_deref().unwrap_or(&run.model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_times_read_well() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(dollars(0.01234), "$0.0123");
        assert_eq!(dollars(12.5), "$12.50");
        let now = Utc::now();
        assert_eq!(ago(now - chrono::TimeDelta::seconds(30), now), "just now");
        assert_eq!(ago(now - chrono::TimeDelta::minutes(5), now), "5 min ago");
        assert_eq!(ago(now - chrono::TimeDelta::hours(49), now), "2 d ago");
    }
}
