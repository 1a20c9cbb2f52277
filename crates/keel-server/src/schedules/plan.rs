//! Making a schedule from what an operator asked for (the API's `POST /v1/schedules` and
//! `keel schedules add` both come here), and where a resumed one starts. What a spec means is
//! keel-schedules' ([`keel_schedules::Spec`]); this checks the rest and fills in the defaults.

use chrono::{DateTime, Utc};
use keel_core::SessionInfo;
use keel_platform::MAX_TEXT_BYTES;
use keel_platform::schedule::{
    CatchUp, Creator, DEFAULT_CATCH_UP, DEFAULT_CATCH_UP_CAP, DEFAULT_MAX_FAILURES, Schedule,
    ScheduleKind, ScheduleState,
};
use keel_schedules::Spec;

/// The largest [`Schedule::catch_up_cap`] accepted.
pub const MAX_CATCH_UP_CAP: u32 = 100;

/// What a new schedule is asked to be.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScheduleRequest {
    /// `once`, `every` or `cron`.
    pub kind: String,
    /// An RFC 3339 instant, an interval (`15m`) or a 5-field cron expression.
    pub spec: String,
    /// The IANA time zone of a cron expression (and of the text's `{time}` and `{date}`).
    pub tz: Option<String>,
    /// The message each fire sends.
    pub text: String,
    /// `skip`, `once` or `all` (default [`DEFAULT_CATCH_UP`]).
    pub catch_up: Option<String>,
    /// Runs at most of one catch-up under `all` (default [`DEFAULT_CATCH_UP_CAP`]).
    pub catch_up_cap: Option<u32>,
    /// Failed fires in a row that pause it (default [`DEFAULT_MAX_FAILURES`]).
    pub max_failures: Option<u32>,
}

/// A new schedule of `conversation` (its runs are its owner's), made by `created_by` at `now`,
/// with its first slot; an error says what in `request` is wrong.
pub fn plan_schedule(
    conversation: &SessionInfo,
    request: &ScheduleRequest,
    created_by: Creator,
    now: DateTime<Utc>,
) -> Result<Schedule, String> {
    let spec = Spec::parse(&request.kind, &request.spec, request.tz.as_deref())
        .map_err(|e| e.to_string())?;
    let first = spec.first_slot(now).map_err(|e| e.to_string())?;
    let text = request.text.trim();
    if text.is_empty() {
        return Err("the text must not be empty".into());
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(format!(
            "the text is {} bytes; at most {MAX_TEXT_BYTES}",
            text.len()
        ));
    }
    let catch_up = match request.catch_up.as_deref() {
        None => DEFAULT_CATCH_UP,
        Some(name) => CatchUp::parse(name)
            .ok_or_else(|| format!("catch_up must be `skip`, `once` or `all`, not `{name}`"))?,
    };
    let catch_up_cap = request.catch_up_cap.unwrap_or(DEFAULT_CATCH_UP_CAP);
    if !(1..=MAX_CATCH_UP_CAP).contains(&catch_up_cap) {
        return Err(format!(
            "catch_up_cap must be from 1 to {MAX_CATCH_UP_CAP}, not {catch_up_cap}"
        ));
    }
    let max_failures = request.max_failures.unwrap_or(DEFAULT_MAX_FAILURES);
    if max_failures == 0 {
        return Err("max_failures must be at least 1".into());
    }
    let kind = ScheduleKind::parse(spec.kind().as_str())
        .ok_or_else(|| format!("unknown schedule kind `{}`", spec.kind()))?;
    Ok(Schedule {
        id: uuid::Uuid::now_v7().to_string(),
        session_id: conversation.id.clone(),
        owner: conversation.owner.clone(),
        created_by,
        kind,
        spec: spec.spec_text(),
        tz: spec.tz_name(),
        text: text.to_string(),
        catch_up,
        catch_up_cap,
        state: ScheduleState::Active,
        paused_reason: None,
        next_slot: Some(first),
        failures: 0,
        max_failures,
        created_at: now,
        updated_at: now,
    })
}

/// The next slot of a schedule resumed at `now`: the first after `now` (the slots it was paused
/// through are not missed, they were never due), or, for a `once` whose instant passed while it
/// was paused, that instant, so its catch-up policy decides (it is never dropped unseen).
pub fn resume_slot(
    schedule: &Schedule,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, String> {
    let spec = Spec::parse(
        schedule.kind.as_str(),
        &schedule.spec,
        schedule.tz.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    Ok(spec.next_after(now).or(schedule.next_slot))
}

/// What an operator does to a schedule's state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Change<'a> {
    /// Pause it, saying who did (`paused by {by}`).
    Pause {
        /// Who paused it.
        by: &'a str,
    },
    /// Resume it ([`resume_slot`]); an active one stays as it is.
    Resume,
}

/// What [`state_change`] makes of a schedule: its state, why it is paused, and its next slot
/// when that changes.
#[derive(Clone, Debug, PartialEq)]
pub struct StateChange {
    /// The state it takes.
    pub state: ScheduleState,
    /// Why it is paused.
    pub reason: Option<String>,
    /// Its new next slot; `None` keeps the one it has.
    pub next_slot: Option<DateTime<Utc>>,
}

/// The state `schedule` takes when an operator applies `change` at `now`; an error (a
/// conflict) when it is done, having no slot left.
pub fn state_change(
    schedule: &Schedule,
    change: Change<'_>,
    now: DateTime<Utc>,
) -> Result<StateChange, String> {
    if schedule.state == ScheduleState::Done {
        return Err(format!(
            "schedule `{}` is done: it has no slot left",
            schedule.id
        ));
    }
    Ok(match change {
        Change::Pause { by } => StateChange {
            state: ScheduleState::Paused,
            reason: Some(format!("paused by {by}")),
            next_slot: None,
        },
        Change::Resume => StateChange {
            state: ScheduleState::Active,
            reason: None,
            next_slot: match schedule.state {
                ScheduleState::Paused => resume_slot(schedule, now)?,
                _ => None,
            },
        },
    })
}

/// A schedule's "when" for people (`every 15m`, `cron "0 9 * * *" (Europe/Berlin)`), or its
/// stored spec when it cannot be read.
pub fn describe(schedule: &Schedule) -> String {
    Spec::parse(
        schedule.kind.as_str(),
        &schedule.spec,
        schedule.tz.as_deref(),
    )
    .map(|spec| spec.describe())
    .unwrap_or_else(|_| format!("{} {}", schedule.kind, schedule.spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn conversation() -> SessionInfo {
        SessionInfo {
            id: "c1".into(),
            created_at: Utc::now(),
            updated_at: Utc::now(),
            title: None,
            message_count: 0,
            owner: Some("ann".into()),
            lane_policy: Default::default(),
            place: None,
            trusted: true,
        }
    }

    fn request(kind: &str, spec: &str) -> ScheduleRequest {
        ScheduleRequest {
            kind: kind.into(),
            spec: spec.into(),
            text: " standup ".into(),
            ..ScheduleRequest::default()
        }
    }

    #[test]
    fn a_schedule_is_made_with_its_first_slot_and_the_defaults() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 8, 30, 0).unwrap();
        let made = plan_schedule(
            &conversation(),
            &request("every", "15m"),
            Creator::Operator,
            now,
        )
        .unwrap();
        assert_eq!(made.spec, "900");
        assert_eq!(made.text, "standup");
        assert_eq!(made.owner.as_deref(), Some("ann"));
        assert_eq!(made.next_slot, Some(now + chrono::Duration::minutes(15)));
        assert_eq!(
            (made.catch_up, made.catch_up_cap, made.max_failures),
            (DEFAULT_CATCH_UP, 10, 3)
        );
        let cron = ScheduleRequest {
            tz: Some("Europe/Berlin".into()),
            catch_up: Some("all".into()),
            ..request("cron", "0 9 * * *")
        };
        let made = plan_schedule(&conversation(), &cron, Creator::Operator, now).unwrap();
        // 09:00 in Berlin is 08:00 UTC in winter: tomorrow's.
        assert_eq!(
            made.next_slot,
            Some(Utc.with_ymd_and_hms(2026, 3, 2, 8, 0, 0).unwrap())
        );
        assert_eq!(made.tz.as_deref(), Some("Europe/Berlin"));
        assert_eq!(describe(&made), "cron \"0 9 * * *\" (Europe/Berlin)");
    }

    #[test]
    fn what_is_wrong_is_said() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 8, 30, 0).unwrap();
        let refused = |request: ScheduleRequest| {
            plan_schedule(&conversation(), &request, Creator::Operator, now).unwrap_err()
        };
        assert!(refused(request("every", "10s")).contains("too short"));
        assert!(refused(request("once", "2020-01-01T00:00:00Z")).contains("in the past"));
        assert!(refused(request("weekly", "x")).contains("unknown schedule kind"));
        let empty = ScheduleRequest {
            text: "  ".into(),
            ..request("every", "1h")
        };
        assert!(refused(empty).contains("empty"));
        let policy = ScheduleRequest {
            catch_up: Some("sometimes".into()),
            ..request("every", "1h")
        };
        assert!(refused(policy).contains("catch_up"));
        let cap = ScheduleRequest {
            catch_up_cap: Some(0),
            ..request("every", "1h")
        };
        assert!(refused(cap).contains("catch_up_cap"));
    }

    #[test]
    fn a_resumed_schedule_starts_after_now_and_a_passed_once_keeps_its_slot() {
        let made_at = Utc.with_ymd_and_hms(2026, 3, 1, 8, 0, 0).unwrap();
        let every = plan_schedule(
            &conversation(),
            &request("every", "1h"),
            Creator::Operator,
            made_at,
        )
        .unwrap();
        let later = made_at + chrono::Duration::hours(5);
        assert_eq!(
            resume_slot(&every, later).unwrap(),
            Some(later + chrono::Duration::hours(1))
        );
        let once = plan_schedule(
            &conversation(),
            &request("once", "2026-03-01T09:00:00Z"),
            Creator::Operator,
            made_at,
        )
        .unwrap();
        assert_eq!(resume_slot(&once, later).unwrap(), once.next_slot);
    }
}
