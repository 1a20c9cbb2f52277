//! Timestamps as RFC 3339 text in UTC (`2026-11-27T06:18:14.123456789Z`), written digit by
//! digit: the same text chrono writes, without `std::fmt`, whose machinery made each timestamp
//! cost more than the rest of an event's JSON. A boundary writes about a dozen (its events, its
//! checkpoint, its rows in the store).
//!
//! Years outside 0–9999 and leap seconds are rare enough to be left to chrono.

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};
use serde::Serializer;

/// How many fractional digits of the second a timestamp gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fraction {
    /// As few as say it exactly: none, 3, 6 or 9 (chrono's `SecondsFormat::AutoSi`, what its
    /// `Serialize` writes).
    Auto,
    /// Always 9, so that text order is time order (what keel's SQLite store keeps).
    Nine,
}

/// `at` as RFC 3339 text in UTC with a `Z`, its fraction as `fraction` says.
pub fn rfc3339(at: DateTime<Utc>, fraction: Fraction) -> String {
    let mut bytes = [0u8; TEXT_BYTES];
    match digits(at, fraction, &mut bytes) {
        Some(text) => text.to_owned(),
        None => chrono_text(at, fraction),
    }
}

/// Serializes a timestamp as chrono's `Serialize` does (`Fraction::Auto`), for
/// `#[serde(serialize_with = ...)]`; the text is written on the stack, not allocated.
pub fn serialize<S: Serializer>(at: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    let mut bytes = [0u8; TEXT_BYTES];
    match digits(*at, Fraction::Auto, &mut bytes) {
        Some(text) => serializer.serialize_str(text),
        None => serializer.serialize_str(&chrono_text(*at, Fraction::Auto)),
    }
}

/// The longest text [`digits`] writes: `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
const TEXT_BYTES: usize = 30;

/// Writes `at` into `bytes` and returns the text, or `None` for a year outside 0–9999 or a leap
/// second, which are left to chrono.
fn digits(at: DateTime<Utc>, fraction: Fraction, bytes: &mut [u8; TEXT_BYTES]) -> Option<&str> {
    let year = at.year();
    let nanos = at.nanosecond();
    if !(0..=9999).contains(&year) || nanos >= 1_000_000_000 {
        return None;
    }
    // Both are in range here: year 0–9999, nanos below a billion.
    put_digits(&mut bytes[0..4], year as u32);
    bytes[4] = b'-';
    put_digits(&mut bytes[5..7], at.month());
    bytes[7] = b'-';
    put_digits(&mut bytes[8..10], at.day());
    bytes[10] = b'T';
    put_digits(&mut bytes[11..13], at.hour());
    bytes[13] = b':';
    put_digits(&mut bytes[14..16], at.minute());
    bytes[16] = b':';
    put_digits(&mut bytes[17..19], at.second());
    let fraction_digits = match fraction {
        Fraction::Nine => 9,
        Fraction::Auto if nanos == 0 => 0,
        Fraction::Auto if nanos.is_multiple_of(1_000_000) => 3,
        Fraction::Auto if nanos.is_multiple_of(1_000) => 6,
        Fraction::Auto => 9,
    };
    let mut end = 19;
    if fraction_digits > 0 {
        bytes[19] = b'.';
        put_digits(&mut bytes[20..29], nanos);
        end = 20 + fraction_digits;
    }
    bytes[end] = b'Z';
    // Only ASCII digits and separators were written, so this never fails.
    std::str::from_utf8(&bytes[..=end]).ok()
}

/// What chrono writes for `at`.
fn chrono_text(at: DateTime<Utc>, fraction: Fraction) -> String {
    let format = match fraction {
        Fraction::Auto => SecondsFormat::AutoSi,
        Fraction::Nine => SecondsFormat::Nanos,
    };
    at.to_rfc3339_opts(format, true)
}

/// Writes `value` in decimal into `slot`, zero-padded on the left to its width (the value is
/// known to fit).
fn put_digits(slot: &mut [u8], mut value: u32) {
    for byte in slot.iter_mut().rev() {
        *byte = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDate, TimeZone};
    use proptest::prelude::*;

    /// The oracle: chrono's `Serialize` for `Auto`, its RFC 3339 with nine digits for `Nine`.
    fn what_chrono_writes(at: DateTime<Utc>, fraction: Fraction) -> String {
        match fraction {
            Fraction::Auto => serde_json::to_value(at)
                .unwrap()
                .as_str()
                .unwrap()
                .to_string(),
            Fraction::Nine => at.to_rfc3339_opts(SecondsFormat::Nanos, true),
        }
    }

    #[derive(serde::Serialize)]
    struct Stamped {
        #[serde(serialize_with = "serialize")]
        at: DateTime<Utc>,
    }

    /// Both fractions, and the serializer, against chrono.
    fn both(at: DateTime<Utc>) {
        for fraction in [Fraction::Auto, Fraction::Nine] {
            assert_eq!(
                rfc3339(at, fraction),
                what_chrono_writes(at, fraction),
                "{at:?}"
            );
        }
        assert_eq!(
            serde_json::to_value(Stamped { at }).unwrap()["at"],
            serde_json::to_value(at).unwrap(),
            "{at:?}"
        );
    }

    #[test]
    fn the_text_is_chronos_at_the_edges() {
        // A leap second (nanos past a billion) only at a minute's 59th second.
        let at = |y, mo, d, h, mi, s, n| {
            NaiveDate::from_ymd_opt(y, mo, d)
                .unwrap()
                .and_hms_nano_opt(h, mi, s, n)
                .map(|naive| Utc.from_utc_datetime(&naive))
        };
        let mut leap_seconds = 0;
        for nanos in [
            0,
            1,
            999_999_999,
            1_000,
            120_000,
            5_000_000,
            100_000_000,
            123_456_789,
            1_500_000_000,
        ] {
            for (y, mo, d, h, mi, s) in [
                (0, 1, 1, 0, 0, 0),
                (9, 2, 3, 4, 5, 6),
                (1970, 1, 1, 0, 0, 0),
                (2024, 2, 29, 23, 59, 59),
                (2026, 11, 27, 6, 18, 14),
                (9999, 12, 31, 23, 59, 59),
                // Outside the fast path: chrono's own text.
                (-1, 12, 31, 23, 59, 59),
                (10000, 1, 1, 0, 0, 0),
                (-262_143, 1, 1, 0, 0, 0),
            ] {
                if let Some(at) = at(y, mo, d, h, mi, s, nanos) {
                    leap_seconds += usize::from(at.nanosecond() >= 1_000_000_000);
                    both(at);
                }
            }
        }
        assert_eq!(leap_seconds, 3, "leap seconds among the cases");
        both(DateTime::<Utc>::MIN_UTC);
        both(DateTime::<Utc>::MAX_UTC);
    }

    #[test]
    fn serializing_writes_what_chrono_writes_and_reads_back() {
        let at = Utc.with_ymd_and_hms(2026, 11, 27, 6, 18, 14).unwrap()
            + chrono::Duration::nanoseconds(123_400);
        let json = serde_json::to_string(&Stamped { at }).unwrap();
        assert_eq!(
            json,
            format!("{{\"at\":{}}}", serde_json::to_string(&at).unwrap())
        );
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        let back: DateTime<Utc> = serde_json::from_value(back["at"].clone()).unwrap();
        assert_eq!(back, at);
    }

    proptest! {
        #[test]
        fn any_instant_is_written_as_chrono_writes_it(
            seconds in -70_000_000_000i64..260_000_000_000i64,
            nanos in prop_oneof![
                Just(0u32),
                (0u32..1_000).prop_map(|ms| ms * 1_000_000),
                (0u32..1_000_000).prop_map(|us| us * 1_000),
                0u32..1_000_000_000,
                1_000_000_000u32..2_000_000_000,
            ],
        ) {
            if let Some(at) = DateTime::from_timestamp(seconds, nanos) {
                both(at);
            }
        }
    }
}
