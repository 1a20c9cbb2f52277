use super::*;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

fn every_minute() -> Spec {
    Spec::parse("every", "1m", None).unwrap()
}

fn fire(slot: &str) -> PlannedFire {
    PlannedFire {
        slot: at(slot),
        covers: Vec::new(),
    }
}

fn slots_of(missed: &[PlannedMiss]) -> Vec<DateTime<Utc>> {
    missed.iter().map(|m| m.slot).collect()
}

/// A one-minute schedule due at 12:01 whose daemon comes back at 12:03:30: 12:01, 12:02 and
/// 12:03 have passed, each more than the grace ago except none (12:03 is 30 s old).
fn three_passed(policy: CatchUp, cap: u32, now: &str) -> Plan {
    plan(
        &every_minute(),
        at("2026-11-29T12:01:00Z"),
        at(now),
        DEFAULT_GRACE,
        policy,
        cap,
    )
}

#[test]
fn nothing_is_due_before_the_next_slot() {
    let plan = three_passed(CatchUp::All, 10, "2026-11-29T12:00:59Z");
    assert!(plan.is_empty());
    assert_eq!(plan.next_slot, Some(at("2026-11-29T12:01:00Z")));
}

#[test]
fn a_slot_on_time_fires_whatever_the_policy() {
    for policy in [CatchUp::Skip, CatchUp::Once, CatchUp::All] {
        let plan = three_passed(policy, 10, "2026-11-29T12:01:05Z");
        assert_eq!(plan.fires, [fire("2026-11-29T12:01:00Z")], "{policy:?}");
        assert!(plan.missed.is_empty());
        assert_eq!(plan.next_slot, Some(at("2026-11-29T12:02:00Z")));
    }
    // The grace is inclusive: exactly 60 s late is still on time.
    let plan = three_passed(CatchUp::Skip, 10, "2026-11-29T12:02:00Z");
    assert_eq!(
        plan.fires,
        [fire("2026-11-29T12:01:00Z"), fire("2026-11-29T12:02:00Z")]
    );
}

#[test]
fn skip_records_every_late_slot_missed_and_runs_none() {
    let plan = three_passed(CatchUp::Skip, 10, "2026-11-29T12:04:30Z");
    assert_eq!(
        slots_of(&plan.missed),
        [
            at("2026-11-29T12:01:00Z"),
            at("2026-11-29T12:02:00Z"),
            at("2026-11-29T12:03:00Z")
        ]
    );
    assert!(plan.missed[0].reason.contains("catch-up: skip"));
    // 12:04 is 30 s old: on time, it fires.
    assert_eq!(plan.fires, [fire("2026-11-29T12:04:00Z")]);
    assert_eq!(plan.next_slot, Some(at("2026-11-29T12:05:00Z")));
}

#[test]
fn skip_with_only_late_slots_fires_nothing() {
    let plan = three_passed(CatchUp::Skip, 10, "2026-11-29T12:03:59Z");
    assert_eq!(plan.missed.len(), 2, "{plan:?}");
    assert_eq!(plan.fires, [fire("2026-11-29T12:03:00Z")]);
    let plan = late_only(CatchUp::Skip, 2);
    assert_eq!(plan.missed.len(), 3);
    assert!(plan.fires.is_empty());
    assert_eq!(plan.next_slot, Some(at("2026-11-29T12:04:00Z")));
}

/// Slots 12:01, 12:02 and 12:03 all late (no grace) at 12:03:59.
fn late_only(policy: CatchUp, cap: u32) -> Plan {
    plan(
        &every_minute(),
        at("2026-11-29T12:01:00Z"),
        at("2026-11-29T12:03:59Z"),
        Duration::seconds(0),
        policy,
        cap,
    )
}

#[test]
fn once_runs_the_latest_late_slot_for_all_of_them() {
    let plan = late_only(CatchUp::Once, 10);
    assert_eq!(
        plan.fires,
        [PlannedFire {
            slot: at("2026-11-29T12:03:00Z"),
            covers: vec![at("2026-11-29T12:01:00Z"), at("2026-11-29T12:02:00Z")],
        }]
    );
    assert_eq!(
        slots_of(&plan.missed),
        [at("2026-11-29T12:01:00Z"), at("2026-11-29T12:02:00Z")]
    );
    assert!(
        plan.missed[0]
            .reason
            .contains("caught up by the run for 2026-11-29T12:03:00+00:00"),
        "{}",
        plan.missed[0].reason
    );
    assert_eq!(plan.next_slot, Some(at("2026-11-29T12:04:00Z")));
}

#[test]
fn once_lets_an_on_time_slot_carry_the_late_ones() {
    let plan = three_passed(CatchUp::Once, 10, "2026-11-29T12:04:30Z");
    assert_eq!(
        plan.fires,
        [PlannedFire {
            slot: at("2026-11-29T12:04:00Z"),
            covers: vec![
                at("2026-11-29T12:01:00Z"),
                at("2026-11-29T12:02:00Z"),
                at("2026-11-29T12:03:00Z")
            ],
        }]
    );
    assert_eq!(plan.missed.len(), 3);
}

#[test]
fn all_runs_each_late_slot_in_order_up_to_the_cap() {
    let plan = late_only(CatchUp::All, 10);
    assert_eq!(
        plan.fires,
        [
            fire("2026-11-29T12:01:00Z"),
            fire("2026-11-29T12:02:00Z"),
            fire("2026-11-29T12:03:00Z")
        ]
    );
    assert!(plan.missed.is_empty());

    let capped = late_only(CatchUp::All, 2);
    assert_eq!(
        capped.fires,
        [fire("2026-11-29T12:01:00Z"), fire("2026-11-29T12:02:00Z")]
    );
    assert_eq!(slots_of(&capped.missed), [at("2026-11-29T12:03:00Z")]);
    assert!(capped.missed[0].reason.contains("cap of 2"));
}

#[test]
fn a_once_schedule_has_no_slot_after_its_own() {
    let spec = Spec::parse("once", "2026-11-29T12:00:00Z", None).unwrap();
    let slot = at("2026-11-29T12:00:00Z");
    let on_time = plan(
        &spec,
        slot,
        at("2026-11-29T12:00:01Z"),
        DEFAULT_GRACE,
        CatchUp::Skip,
        10,
    );
    assert_eq!(on_time.fires, [fire("2026-11-29T12:00:00Z")]);
    assert_eq!(on_time.next_slot, None);
    let late = plan(
        &spec,
        slot,
        at("2026-11-29T13:00:00Z"),
        DEFAULT_GRACE,
        CatchUp::Skip,
        10,
    );
    assert_eq!(slots_of(&late.missed), [slot]);
    assert!(late.fires.is_empty());
    assert_eq!(late.next_slot, None);
    let caught = plan(
        &spec,
        slot,
        at("2026-11-29T13:00:00Z"),
        DEFAULT_GRACE,
        CatchUp::Once,
        10,
    );
    assert_eq!(caught.fires, [fire("2026-11-29T12:00:00Z")]);
    assert!(caught.missed.is_empty());
}

#[test]
fn weeks_down_list_a_thousand_slots_and_say_how_many_more_passed() {
    // A one-minute schedule, down for a week: 10080 slots.
    let plan = plan(
        &every_minute(),
        at("2026-11-22T12:00:00Z"),
        at("2026-11-29T11:59:30Z"),
        DEFAULT_GRACE,
        CatchUp::Skip,
        10,
    );
    assert!(plan.fires.is_empty());
    assert_eq!(plan.missed.len(), MAX_LISTED + 1);
    let last = plan.missed.last().unwrap();
    assert_eq!(
        last.slot,
        at("2026-11-22T12:00:00Z") + Duration::minutes(1000)
    );
    assert!(
        last.reason.contains("it and 9079 more slots"),
        "{}",
        last.reason
    );
    assert_eq!(plan.next_slot, Some(at("2026-11-29T12:00:00Z")));
    // Every slot is accounted for: 1000 listed, 1 + 9079 on the summary.
    assert_eq!(1000 + 1 + 9079, 7 * 24 * 60);
}

#[test]
fn a_cron_schedule_down_long_jumps_to_its_next_match() {
    let spec = Spec::parse("cron", "* * * * *", None).unwrap();
    let plan = plan(
        &spec,
        at("2026-11-22T12:00:00Z"),
        at("2026-11-29T11:59:30Z"),
        DEFAULT_GRACE,
        CatchUp::All,
        3,
    );
    assert_eq!(plan.fires.len(), 3);
    assert_eq!(plan.missed.len(), MAX_LISTED - 3 + 1);
    assert!(
        plan.missed
            .last()
            .unwrap()
            .reason
            .contains("the slots after it")
    );
    assert_eq!(plan.next_slot, Some(at("2026-11-29T12:00:00Z")));
}
