//! What to do with a schedule's due slots: which to record missed, which to fire, and where
//! its next slot moves. Pure: the scheduler reads the store, asks [`plan`], and writes what it
//! says.
//!
//! A due slot (at or before now) is on time while `now - slot <= grace`; an on-time slot
//! always fires. A late slot (one that passed while no daemon ran, or behind a clock step) is
//! the schedule's catch-up policy's:
//! - `skip`: recorded missed; none runs;
//! - `once`: one run for all of them: the latest due slot fires and carries the late ones
//!   (they are recorded missed, each saying which slot's run caught it up);
//! - `all`: each fires, oldest first, up to the schedule's cap; the rest are recorded missed.
//!
//! Nothing is dropped silently: every due slot is either fired or recorded missed with a
//! reason. A plan lists at most [`MAX_LISTED`] slots; when more were due (a one-minute
//! schedule whose daemon was down for weeks), the policy applies to the listed ones, the first
//! unlisted slot is recorded missed saying how many more passed with it, and the next slot
//! moves past now.

use chrono::{DateTime, Duration, Utc};
use keel_platform::schedule::CatchUp;

use crate::spec::{Kind, Spec};

/// The default grace: a slot is still on time this long after it was due.
pub const DEFAULT_GRACE: Duration = Duration::seconds(60);

/// At most this many due slots are listed one by one in a plan.
pub const MAX_LISTED: usize = 1000;

/// One run to fire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedFire {
    /// The slot the run is for (its key in the store).
    pub slot: DateTime<Utc>,
    /// Late slots this run stands for too (the `once` policy), oldest first.
    pub covers: Vec<DateTime<Utc>>,
}

/// One slot to record missed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedMiss {
    /// The slot.
    pub slot: DateTime<Utc>,
    /// Why it did not run, as the API shows it.
    pub reason: String,
}

/// What to do with a schedule's due slots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Slots to record missed, oldest first.
    pub missed: Vec<PlannedMiss>,
    /// Runs to fire, oldest slot first.
    pub fires: Vec<PlannedFire>,
    /// The schedule's next slot after this plan; `None` when it has none left (a `once`
    /// schedule), the same as before when nothing was due.
    pub next_slot: Option<DateTime<Utc>>,
}

impl Plan {
    /// True when nothing was due.
    pub fn is_empty(&self) -> bool {
        self.missed.is_empty() && self.fires.is_empty()
    }
}

/// The plan for a schedule of `spec` whose next slot is `next_slot`, at `now`, with the
/// catch-up `policy` and `cap` (the most late runs `all` fires at once).
pub fn plan(
    spec: &Spec,
    next_slot: DateTime<Utc>,
    now: DateTime<Utc>,
    grace: Duration,
    policy: CatchUp,
    cap: u32,
) -> Plan {
    let mut due = Vec::new();
    let mut next = Some(next_slot);
    while let Some(slot) = next {
        if slot > now || due.len() == MAX_LISTED {
            break;
        }
        due.push(slot);
        next = spec.next_after(slot);
    }
    if due.is_empty() {
        return Plan {
            next_slot: Some(next_slot),
            ..Plan::default()
        };
    }
    // More were due than a plan lists: jump past now and say so on the last record.
    let mut unlisted = None;
    if let Some(slot) = next
        && slot <= now
    {
        unlisted = Some((slot, count_between(spec, slot, now)));
        next = first_after(spec, slot, now);
    }

    let (late, on_time): (Vec<_>, Vec<_>) = due.into_iter().partition(|slot| now - *slot > grace);
    let mut out = Plan {
        next_slot: next,
        ..Plan::default()
    };
    match policy {
        CatchUp::Skip => {
            out.missed = late
                .into_iter()
                .map(|slot| miss(slot, "missed while keel was not running (catch-up: skip)"))
                .collect();
        }
        CatchUp::Once => {
            let mut late = late;
            // The latest due slot runs once for all: an on-time one if there is one, else the
            // latest late one.
            let carrier = match on_time.last() {
                Some(slot) => *slot,
                None => late.pop().unwrap_or(next_slot),
            };
            let reason = format!(
                "missed while keel was not running; caught up by the run for {} (catch-up: once)",
                carrier.to_rfc3339()
            );
            out.missed = late.iter().map(|slot| miss(*slot, &reason)).collect();
            if on_time.is_empty() {
                out.fires.push(PlannedFire {
                    slot: carrier,
                    covers: late,
                });
            } else {
                let last = on_time.len() - 1;
                for (i, slot) in on_time.iter().enumerate() {
                    out.fires.push(PlannedFire {
                        slot: *slot,
                        covers: if i == last { late.clone() } else { Vec::new() },
                    });
                }
            }
            return finish(out, unlisted, now);
        }
        CatchUp::All => {
            let cap = usize::try_from(cap).unwrap_or(usize::MAX);
            let mut late = late.into_iter();
            for slot in late.by_ref().take(cap) {
                out.fires.push(PlannedFire {
                    slot,
                    covers: Vec::new(),
                });
            }
            let reason = format!(
                "missed while keel was not running; beyond the catch-up cap of {cap} (catch-up: all)"
            );
            out.missed = late.map(|slot| miss(slot, &reason)).collect();
        }
    }
    out.fires
        .extend(on_time.into_iter().map(|slot| PlannedFire {
            slot,
            covers: Vec::new(),
        }));
    finish(out, unlisted, now)
}

fn miss(slot: DateTime<Utc>, reason: &str) -> PlannedMiss {
    PlannedMiss {
        slot,
        reason: reason.to_owned(),
    }
}

/// Records the slots past [`MAX_LISTED`] as one missed record, on the first of them.
fn finish(
    mut plan: Plan,
    unlisted: Option<(DateTime<Utc>, Option<u64>)>,
    now: DateTime<Utc>,
) -> Plan {
    let Some((first, count)) = unlisted else {
        return plan;
    };
    let how_many = match count {
        Some(n) => format!("it and {} more slots", n.saturating_sub(1)),
        None => "it and the slots after it".to_owned(),
    };
    plan.missed.push(PlannedMiss {
        slot: first,
        reason: format!(
            "missed while keel was not running; {how_many} up to {} are not listed one by one",
            now.to_rfc3339()
        ),
    });
    plan
}

/// The first slot after `now`, counting from the due slot `from`.
fn first_after(spec: &Spec, from: DateTime<Utc>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    match (spec.kind(), spec.interval_secs()) {
        (Kind::Every, Some(secs)) => {
            let secs = i64::try_from(secs).ok()?;
            let steps = (now - from).num_seconds() / secs + 1;
            from.checked_add_signed(Duration::seconds(steps.checked_mul(secs)?))
        }
        _ => spec.next_after(now),
    }
}

/// How many slots from `from` (due) up to `now` there are, when that is cheap to know.
fn count_between(spec: &Spec, from: DateTime<Utc>, now: DateTime<Utc>) -> Option<u64> {
    let secs = i64::try_from(spec.interval_secs()?).ok()?;
    u64::try_from((now - from).num_seconds() / secs + 1).ok()
}

#[cfg(test)]
#[path = "catch_up_tests.rs"]
mod tests;
