//! The message a fire sends: the schedule's text with `{time}` and `{date}` filled in with the
//! slot's time in the schedule's zone, and, for a catch-up run that stands for missed slots
//! too, a line saying which.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// `template` with `{time}` (`09:00`) and `{date}` (`2026-12-01`) of `slot` in `tz`; a run
/// that `covers` missed slots says so on a line of its own after it.
pub fn render(template: &str, slot: DateTime<Utc>, tz: Tz, covers: &[DateTime<Utc>]) -> String {
    let local = slot.with_timezone(&tz);
    let mut text = template
        .replace("{time}", &local.format("%H:%M").to_string())
        .replace("{date}", &local.format("%Y-%m-%d").to_string());
    if !covers.is_empty() {
        let shown: Vec<String> = covers
            .iter()
            .map(|at| at.with_timezone(&tz).format("%Y-%m-%d %H:%M").to_string())
            .collect();
        text.push_str(&format!(
            "\n\n(Scheduled for {}; this one run also stands for {} earlier time{} missed while \
             keel was not running: {}.)",
            local.format("%Y-%m-%d %H:%M %Z"),
            covers.len(),
            if covers.len() == 1 { "" } else { "s" },
            shown.join(", ")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn time_and_date_are_the_slots_in_the_schedules_zone() {
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        assert_eq!(
            render(
                "Standup at {time} on {date}",
                at("2026-11-30T23:30:00Z"),
                tz,
                &[]
            ),
            "Standup at 00:30 on 2026-12-01"
        );
        assert_eq!(
            render("no placeholders", at("2026-11-30T23:30:00Z"), tz, &[]),
            "no placeholders"
        );
    }

    #[test]
    fn a_catch_up_run_names_the_slots_it_stands_for() {
        let text = render(
            "Water the plants",
            at("2026-11-29T12:03:00Z"),
            Tz::UTC,
            &[at("2026-11-29T12:01:00Z"), at("2026-11-29T12:02:00Z")],
        );
        assert_eq!(
            text,
            "Water the plants\n\n(Scheduled for 2026-11-29 12:03 UTC; this one run also stands \
             for 2 earlier times missed while keel was not running: 2026-11-29 12:01, \
             2026-11-29 12:02.)"
        );
    }
}
