//! What a schedule's "when" means: one of three kinds, parsed and validated, and the slot that
//! follows an instant.
//!
//! - `once`: an RFC 3339 instant (`2026-12-01T09:00:00+01:00`); one slot, then the schedule is
//!   done.
//! - `every`: an interval, `90s`, `15m`, `2h`, `1d` (or parts of them added up, `1h30m`, or a
//!   bare number of seconds, the form the store keeps); at least [`MIN_INTERVAL_SECS`]. The
//!   slots are the first slot plus whole intervals: each slot is the one before it plus the
//!   interval, whatever time zone the schedule names.
//! - `cron`: a five-field expression (minute hour day-of-month month day-of-week) read in an
//!   IANA time zone (UTC when none is named). Daylight-saving days are the crates' business
//!   (croner over chrono-tz): a fixed time that a spring-forward skips fires at the first
//!   minute after the gap; a fixed time that a fall-back repeats fires once, at its first
//!   pass; a wildcard or stepped field (`*/30 * * * *`) fires on both passes of a repeated
//!   hour and not in a skipped one.
//!
//! Every slot is a whole second in UTC, so that it keys the store the same way each time it
//! is computed.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SubsecRound, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// The shortest interval an `every` schedule may have, in seconds.
pub const MIN_INTERVAL_SECS: u64 = 60;

/// The longest interval an `every` schedule may have, in seconds (about ten years): beyond it
/// a slot's time would not be worth computing.
pub const MAX_INTERVAL_SECS: u64 = 10 * 366 * 24 * 3600;

/// The three kinds of schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Once, at an instant.
    Once,
    /// Every interval.
    Every,
    /// On a cron expression, in a time zone.
    Cron,
}

impl Kind {
    /// The kind's name as the store, the API and the tool spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Once => "once",
            Kind::Every => "every",
            Kind::Cron => "cron",
        }
    }

    /// The kind named `name` (`once`, `every`, `cron`).
    pub fn parse(name: &str) -> Result<Kind, SpecError> {
        match name.trim() {
            "once" => Ok(Kind::Once),
            "every" => Ok(Kind::Every),
            "cron" => Ok(Kind::Cron),
            other => Err(SpecError::UnknownKind(other.to_owned())),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a schedule's "when" was refused. Each message says what was wrong and what would do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The kind is none of `once`, `every`, `cron`.
    #[error("unknown schedule kind {0:?}: expected once, every or cron")]
    UnknownKind(String),
    /// A `once` instant that is not RFC 3339.
    #[error("{0:?} is not an RFC 3339 instant (like 2026-12-01T09:00:00+01:00)")]
    BadInstant(String),
    /// An interval that cannot be read.
    #[error("{0:?} is not an interval: use a number with s, m, h or d (90s, 15m, 2h, 1d)")]
    BadInterval(String),
    /// An interval shorter than [`MIN_INTERVAL_SECS`].
    #[error("an interval of {0} s is too short: the shortest is {MIN_INTERVAL_SECS} s")]
    IntervalTooShort(u64),
    /// An interval longer than [`MAX_INTERVAL_SECS`].
    #[error("an interval of {0} s is too long: the longest is {MAX_INTERVAL_SECS} s")]
    IntervalTooLong(u64),
    /// A cron expression croner refused, or one that is not five fields.
    #[error(
        "{expr:?} is not a five-field cron expression (minute hour day month weekday): {reason}"
    )]
    BadCron {
        /// The expression as given.
        expr: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A time zone that is not an IANA name.
    #[error("unknown time zone {0:?}: use an IANA name like Europe/Berlin or UTC")]
    UnknownZone(String),
    /// A `once` instant that has already passed when the schedule is made.
    #[error("{0} is in the past")]
    InPast(String),
    /// A schedule that would never fire (a cron expression matching no date, like 30 February).
    #[error("this schedule never fires")]
    NeverFires,
}

/// What a schedule's "when" is, parsed: its kind with what the kind needs, and the time zone
/// its slots are shown in (and a cron expression is read in).
#[derive(Clone, Debug)]
pub struct Spec {
    when: When,
    tz: Tz,
    zone_named: bool,
}

#[derive(Clone, Debug)]
enum When {
    Once(DateTime<Utc>),
    Every(u64),
    Cron { expr: String, cron: Box<Cron> },
}

impl Spec {
    /// Parses a schedule's `kind`, `spec` and optional IANA time zone `tz` as the store keeps
    /// them (and as the API, the CLI and the tool take them).
    pub fn parse(kind: &str, spec: &str, tz: Option<&str>) -> Result<Spec, SpecError> {
        let (tz, zone_named) = match tz.map(str::trim).filter(|name| !name.is_empty()) {
            Some(name) => (parse_zone(name)?, true),
            None => (Tz::UTC, false),
        };
        let when = match Kind::parse(kind)? {
            Kind::Once => When::Once(parse_instant(spec)?),
            Kind::Every => When::Every(parse_interval(spec)?),
            Kind::Cron => {
                let expr = spec.trim().to_owned();
                let cron = parse_cron(&expr)?;
                When::Cron {
                    expr,
                    cron: Box::new(cron),
                }
            }
        };
        Ok(Spec {
            when,
            tz,
            zone_named,
        })
    }

    /// The schedule's kind.
    pub fn kind(&self) -> Kind {
        match self.when {
            When::Once(_) => Kind::Once,
            When::Every(_) => Kind::Every,
            When::Cron { .. } => Kind::Cron,
        }
    }

    /// The spec as the store keeps it: a `once` instant in RFC 3339 UTC, an `every` interval
    /// in seconds, a cron expression as given (trimmed).
    pub fn spec_text(&self) -> String {
        match &self.when {
            When::Once(at) => at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            When::Every(secs) => secs.to_string(),
            When::Cron { expr, .. } => expr.clone(),
        }
    }

    /// The time zone the slots are shown in (and a cron expression is read in).
    pub fn tz(&self) -> Tz {
        self.tz
    }

    /// The time zone's name when one was given, as the store keeps it.
    pub fn tz_name(&self) -> Option<String> {
        self.zone_named.then(|| self.tz.name().to_owned())
    }

    /// An `every` schedule's interval in seconds.
    pub fn interval_secs(&self) -> Option<u64> {
        match self.when {
            When::Every(secs) => Some(secs),
            _ => None,
        }
    }

    /// The first slot strictly after `t`, or `None` when there is none (a `once` schedule at
    /// or before `t`). For `every` the slots are counted from `t`: give it the previous slot
    /// (or, for the first slot, the time the schedule was made).
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let t = t.trunc_subsecs(0);
        match &self.when {
            When::Once(at) => (*at > t).then_some(*at),
            When::Every(secs) => {
                let step = chrono::Duration::seconds(i64::try_from(*secs).ok()?);
                t.checked_add_signed(step)
            }
            When::Cron { cron, .. } => {
                let local = t.with_timezone(&self.tz);
                let next = cron.find_next_occurrence(&local, false).ok()?;
                Some(next.with_timezone(&Utc).trunc_subsecs(0))
            }
        }
    }

    /// The first slot of a schedule made at `now`: a `once` instant (refused when it has
    /// passed), `now` plus the interval, or the cron expression's first match after `now`.
    pub fn first_slot(&self, now: DateTime<Utc>) -> Result<DateTime<Utc>, SpecError> {
        match &self.when {
            When::Once(at) if *at < now.trunc_subsecs(0) => Err(SpecError::InPast(
                at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            )),
            When::Once(at) => Ok(*at),
            _ => self.next_after(now).ok_or(SpecError::NeverFires),
        }
    }

    /// A short description for people: `once at 2026-12-01 09:00 CET`, `every 15m`,
    /// `cron "0 9 * * 1-5" (Europe/Berlin)`.
    pub fn describe(&self) -> String {
        match &self.when {
            When::Once(at) => format!(
                "once at {}",
                at.with_timezone(&self.tz).format("%Y-%m-%d %H:%M %Z")
            ),
            When::Every(secs) => format!("every {}", format_interval(*secs)),
            When::Cron { expr, .. } => format!("cron \"{expr}\" ({})", self.tz.name()),
        }
    }
}

/// Reads an IANA time zone name (`Europe/Berlin`, `UTC`).
pub fn parse_zone(name: &str) -> Result<Tz, SpecError> {
    Tz::from_str(name.trim()).map_err(|_| SpecError::UnknownZone(name.trim().to_owned()))
}

/// Reads an RFC 3339 instant, to the whole second.
pub fn parse_instant(text: &str) -> Result<DateTime<Utc>, SpecError> {
    DateTime::parse_from_rfc3339(text.trim())
        .map(|at| at.with_timezone(&Utc).trunc_subsecs(0))
        .map_err(|_| SpecError::BadInstant(text.trim().to_owned()))
}

/// Reads an interval: a bare number of seconds (`900`), or numbers each with a unit `s`, `m`,
/// `h` or `d`, added up (`90s`, `15m`, `1h30m`, `1d`). Between [`MIN_INTERVAL_SECS`] and
/// [`MAX_INTERVAL_SECS`].
pub fn parse_interval(text: &str) -> Result<u64, SpecError> {
    let trimmed = text.trim();
    let bad = || SpecError::BadInterval(trimmed.to_owned());
    let total = if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        trimmed.parse::<u64>().map_err(|_| bad())?
    } else {
        let mut total: u64 = 0;
        let mut number: Option<u64> = None;
        for ch in trimmed.chars() {
            if let Some(digit) = ch.to_digit(10) {
                let so_far = number.unwrap_or(0);
                number = Some(
                    so_far
                        .checked_mul(10)
                        .and_then(|n| n.checked_add(u64::from(digit)))
                        .ok_or_else(bad)?,
                );
                continue;
            }
            let unit = match ch.to_ascii_lowercase() {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86_400,
                _ => return Err(bad()),
            };
            let part = number.take().ok_or_else(bad)?;
            total = part
                .checked_mul(unit)
                .and_then(|secs| total.checked_add(secs))
                .ok_or_else(bad)?;
        }
        if number.is_some() || trimmed.is_empty() {
            return Err(bad());
        }
        total
    };
    if total < MIN_INTERVAL_SECS {
        return Err(SpecError::IntervalTooShort(total));
    }
    if total > MAX_INTERVAL_SECS {
        return Err(SpecError::IntervalTooLong(total));
    }
    Ok(total)
}

/// An interval in seconds written the short way: `90s`, `15m`, `2h`, `1d`, `1h30m`.
pub fn format_interval(secs: u64) -> String {
    if secs == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    let mut rest = secs;
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

/// Reads a five-field cron expression (no seconds, no year field).
fn parse_cron(expr: &str) -> Result<Cron, SpecError> {
    let bad = |reason: String| SpecError::BadCron {
        expr: expr.to_owned(),
        reason,
    };
    if !expr.starts_with('@') && expr.split_whitespace().count() != 5 {
        return Err(bad(format!(
            "it has {} fields",
            expr.split_whitespace().count()
        )));
    }
    let cron = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| bad(e.to_string()))?;
    // A pattern no date matches (31 February) is refused now rather than found out later.
    let probe = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).single();
    if let Some(probe) = probe
        && cron.find_next_occurrence(&probe, false).is_err()
    {
        return Err(SpecError::NeverFires);
    }
    Ok(cron)
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
