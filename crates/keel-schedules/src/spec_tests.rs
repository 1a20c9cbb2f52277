use super::*;

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

/// The next `n` slots after `from`, each counted from the one before.
fn slots(spec: &Spec, from: &str, n: usize) -> Vec<String> {
    let mut at = utc(from);
    let mut out = Vec::new();
    for _ in 0..n {
        at = spec.next_after(at).unwrap();
        out.push(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    }
    out
}

#[test]
fn kinds_parse_and_print_as_the_store_spells_them() {
    for name in ["once", "every", "cron"] {
        assert_eq!(Kind::parse(name).unwrap().as_str(), name);
    }
    assert_eq!(
        Kind::parse("hourly"),
        Err(SpecError::UnknownKind("hourly".into()))
    );
}

#[test]
fn intervals_read_units_and_bare_seconds() {
    assert_eq!(parse_interval("90s"), Ok(90));
    assert_eq!(parse_interval("15m"), Ok(900));
    assert_eq!(parse_interval("2h"), Ok(7200));
    assert_eq!(parse_interval("1d"), Ok(86_400));
    assert_eq!(parse_interval("1h30m"), Ok(5400));
    assert_eq!(parse_interval(" 15M "), Ok(900));
    assert_eq!(parse_interval("900"), Ok(900));
    for bad in ["", "m", "15", "15x", "1.5h", "-5m", "15m3", "h1"] {
        assert!(parse_interval(bad).is_err(), "{bad:?} was accepted");
    }
    assert_eq!(parse_interval("59s"), Err(SpecError::IntervalTooShort(59)));
    assert_eq!(parse_interval("59"), Err(SpecError::IntervalTooShort(59)));
    assert_eq!(parse_interval("60s"), Ok(60));
    assert!(matches!(
        parse_interval("99999d"),
        Err(SpecError::IntervalTooLong(_))
    ));
    assert!(matches!(
        parse_interval("99999999999999999999d"),
        Err(SpecError::BadInterval(_))
    ));
    assert_eq!(format_interval(5400), "1h30m");
    assert_eq!(format_interval(90), "1m30s");
    assert_eq!(format_interval(86_400), "1d");
}

#[test]
fn every_keeps_the_interval_in_seconds_and_counts_from_the_slot_before() {
    let spec = Spec::parse("every", "15m", None).unwrap();
    assert_eq!(spec.kind(), Kind::Every);
    assert_eq!(spec.spec_text(), "900");
    assert_eq!(spec.interval_secs(), Some(900));
    assert_eq!(spec.tz_name(), None);
    // The text the store keeps parses back to the same schedule.
    let again = Spec::parse("every", &spec.spec_text(), None).unwrap();
    assert_eq!(again.interval_secs(), Some(900));
    assert_eq!(
        slots(&spec, "2026-11-29T12:00:00Z", 3),
        [
            "2026-11-29T12:15:00Z",
            "2026-11-29T12:30:00Z",
            "2026-11-29T12:45:00Z"
        ]
    );
    // Fractions of a second are dropped, so a slot keys the store the same way each time.
    let made = utc("2026-11-29T12:00:00.750Z");
    assert_eq!(spec.first_slot(made).unwrap(), utc("2026-11-29T12:15:00Z"));
    assert_eq!(spec.describe(), "every 15m");
}

#[test]
fn once_is_one_slot_then_none_and_refuses_the_past() {
    let spec = Spec::parse("once", "2026-12-01T09:00:00+01:00", Some("Europe/Berlin")).unwrap();
    assert_eq!(spec.kind(), Kind::Once);
    assert_eq!(spec.spec_text(), "2026-12-01T08:00:00Z");
    assert_eq!(spec.tz_name().as_deref(), Some("Europe/Berlin"));
    let at = utc("2026-12-01T08:00:00Z");
    assert_eq!(spec.next_after(utc("2026-11-29T00:00:00Z")), Some(at));
    assert_eq!(spec.next_after(at), None);
    assert_eq!(spec.first_slot(utc("2026-11-29T00:00:00Z")), Ok(at));
    // At the instant itself it is still its slot; a second later it is in the past.
    assert_eq!(spec.first_slot(at), Ok(at));
    assert_eq!(
        spec.first_slot(utc("2026-12-01T08:00:01Z")),
        Err(SpecError::InPast("2026-12-01T08:00:00Z".into()))
    );
    assert_eq!(spec.describe(), "once at 2026-12-01 09:00 CET");
    assert!(matches!(
        Spec::parse("once", "tomorrow at nine", None),
        Err(SpecError::BadInstant(_))
    ));
    assert!(matches!(
        Spec::parse("once", "2026-12-01 09:00", None),
        Err(SpecError::BadInstant(_))
    ));
}

#[test]
fn cron_takes_five_fields_and_a_real_zone() {
    let spec = Spec::parse("cron", " 0 9 * * 1-5 ", Some("Europe/Berlin")).unwrap();
    assert_eq!(spec.kind(), Kind::Cron);
    assert_eq!(spec.spec_text(), "0 9 * * 1-5");
    assert_eq!(spec.describe(), "cron \"0 9 * * 1-5\" (Europe/Berlin)");
    for bad in [
        "0 9 * *",
        "0 0 9 * * *",
        "0 9 * * * 2027",
        "61 * * * *",
        "x y z w v",
    ] {
        assert!(
            matches!(
                Spec::parse("cron", bad, None),
                Err(SpecError::BadCron { .. })
            ),
            "{bad:?} was accepted"
        );
    }
    assert_eq!(
        Spec::parse("cron", "0 9 * * *", Some("Mars/Olympus")).unwrap_err(),
        SpecError::UnknownZone("Mars/Olympus".into())
    );
    assert!(Spec::parse("cron", "0 0 31 2 *", None).is_err());
}

#[test]
fn cron_without_a_zone_is_read_in_utc() {
    let spec = Spec::parse("cron", "*/20 * * * *", None).unwrap();
    assert_eq!(spec.tz_name(), None);
    assert_eq!(
        slots(&spec, "2026-11-29T12:05:30Z", 3),
        [
            "2026-11-29T12:20:00Z",
            "2026-11-29T12:40:00Z",
            "2026-11-29T13:00:00Z"
        ]
    );
    // A slot is strictly after the instant given: from a slot, the next one.
    assert_eq!(
        spec.next_after(utc("2026-11-29T12:20:00Z")),
        Some(utc("2026-11-29T12:40:00Z"))
    );
}

#[test]
fn nine_every_morning_in_berlin_keeps_to_the_wall_clock_across_both_changes() {
    let spec = Spec::parse("cron", "0 9 * * *", Some("Europe/Berlin")).unwrap();
    // Spring forward: 2026-03-29, 02:00 CET becomes 03:00 CEST.
    assert_eq!(
        slots(&spec, "2026-03-27T12:00:00Z", 3),
        [
            "2026-03-28T08:00:00Z",
            "2026-03-29T07:00:00Z",
            "2026-03-30T07:00:00Z"
        ]
    );
    // Fall back: 2026-10-25, 03:00 CEST becomes 02:00 CET.
    assert_eq!(
        slots(&spec, "2026-10-23T12:00:00Z", 3),
        [
            "2026-10-24T07:00:00Z",
            "2026-10-25T08:00:00Z",
            "2026-10-26T08:00:00Z"
        ]
    );
}

#[test]
fn a_fixed_time_inside_the_berlin_spring_gap_fires_right_after_it() {
    // 02:30 does not exist on 2026-03-29 in Berlin: it fires at 03:00 CEST (01:00 UTC), once.
    let spec = Spec::parse("cron", "30 2 * * *", Some("Europe/Berlin")).unwrap();
    assert_eq!(
        slots(&spec, "2026-03-28T00:00:00Z", 3),
        [
            "2026-03-28T01:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-30T00:30:00Z"
        ]
    );
}

#[test]
fn a_fixed_time_in_the_berlin_repeated_hour_fires_once_at_its_first_pass() {
    // 02:30 happens twice on 2026-10-25 in Berlin (00:30 UTC in CEST, 01:30 UTC in CET).
    let spec = Spec::parse("cron", "30 2 * * *", Some("Europe/Berlin")).unwrap();
    assert_eq!(
        slots(&spec, "2026-10-24T00:00:00Z", 3),
        [
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-26T01:30:00Z"
        ]
    );
}

#[test]
fn a_stepped_minute_field_skips_the_spring_gap_and_runs_both_autumn_passes() {
    let spec = Spec::parse("cron", "*/30 * * * *", Some("Europe/Berlin")).unwrap();
    // 01:00 and 01:30 CET, then the clock jumps from 02:00 to 03:00 CEST.
    assert_eq!(
        slots(&spec, "2026-03-28T23:45:00Z", 4),
        [
            "2026-03-29T00:00:00Z",
            "2026-03-29T00:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:30:00Z"
        ]
    );
    // 02:00 and 02:30 in CEST, then 02:00 and 02:30 again in CET: every half hour of real
    // time, none twice, none lost.
    assert_eq!(
        slots(&spec, "2026-10-24T23:45:00Z", 5),
        [
            "2026-10-25T00:00:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-25T01:30:00Z",
            "2026-10-25T02:00:00Z"
        ]
    );
}

#[test]
fn the_first_slot_of_a_cron_schedule_is_its_next_match() {
    let spec = Spec::parse("cron", "0 9 * * *", Some("Europe/Berlin")).unwrap();
    assert_eq!(
        spec.first_slot(utc("2026-11-29T08:00:00Z")),
        Ok(utc("2026-11-30T08:00:00Z"))
    );
}
