//! Slack's request signatures: `X-Slack-Signature: v0=hex(HMAC-SHA256(signing secret,
//! "v0:{X-Slack-Request-Timestamp}:{raw body}"))`, checked in constant time, with the timestamp
//! no more than five minutes away from now (either way), so a captured request cannot be
//! replayed later.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// How far a request's timestamp may be from now, in seconds.
pub const MAX_SKEW_SECS: i64 = 5 * 60;

/// Why a request's signature was refused (each logged as is).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A header is missing or unreadable.
    #[error("the request has no readable {0} header")]
    Missing(&'static str),
    /// The timestamp is too old or too far ahead.
    #[error("the request's timestamp is {0} s away from now (at most 300 s are accepted)")]
    Stale(i64),
    /// The signature does not match.
    #[error("the request's signature does not match the signing secret")]
    Forged,
}

/// The `v0=…` signature of `body` sent at `timestamp` under `secret` (what Slack sends; the
/// tests sign their requests with it).
pub fn sign(secret: &str, timestamp: &str, body: &[u8]) -> String {
    let digest = mac(secret, timestamp, body).finalize().into_bytes();
    let mut out = String::with_capacity(3 + 64);
    out.push_str("v0=");
    for byte in digest {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

fn mac(secret: &str, timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    mac
}

/// Checks a request's `timestamp` and `signature` headers (as sent) over its raw `body`, at
/// `now` (Unix seconds).
pub fn verify(
    secret: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), Refused> {
    let timestamp = timestamp.ok_or(Refused::Missing("X-Slack-Request-Timestamp"))?;
    let at: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| Refused::Missing("X-Slack-Request-Timestamp"))?;
    let skew = now.saturating_sub(at);
    if skew.abs() > MAX_SKEW_SECS {
        return Err(Refused::Stale(skew));
    }
    let signature = signature.ok_or(Refused::Missing("X-Slack-Signature"))?;
    let Some(given) = signature.strip_prefix("v0=").and_then(unhex) else {
        return Err(Refused::Forged);
    };
    mac(secret, timestamp, body)
        .verify_slice(&given)
        .map_err(|_| Refused::Forged)
}

/// Lowercase or uppercase hex to bytes.
fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example of Slack's documentation ("Verifying requests from Slack").
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const TIMESTAMP: &str = "1531420618";
    const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIGNATURE: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
    const NOW: i64 = 1531420618 + 10;

    #[test]
    fn the_documented_vector_signs_and_verifies() {
        assert_eq!(sign(SECRET, TIMESTAMP, BODY.as_bytes()), SIGNATURE);
        let ok = verify(
            SECRET,
            Some(TIMESTAMP),
            Some(SIGNATURE),
            BODY.as_bytes(),
            NOW,
        );
        assert_eq!(ok, Ok(()));
        let upper = format!("v0={}", SIGNATURE[3..].to_uppercase());
        assert_eq!(
            verify(SECRET, Some(TIMESTAMP), Some(&upper), BODY.as_bytes(), NOW),
            Ok(())
        );
    }

    #[test]
    fn a_changed_body_secret_or_signature_is_forged() {
        let body = format!("{BODY}x");
        let refused = |secret, signature, body: &str| {
            verify(
                secret,
                Some(TIMESTAMP),
                Some(signature),
                body.as_bytes(),
                NOW,
            )
        };
        assert_eq!(refused(SECRET, SIGNATURE, &body), Err(Refused::Forged));
        assert_eq!(refused("another", SIGNATURE, BODY), Err(Refused::Forged));
        let mut flipped = SIGNATURE.to_string();
        flipped.replace_range(10..11, "0");
        assert_eq!(refused(SECRET, &flipped, BODY), Err(Refused::Forged));
        assert_eq!(refused(SECRET, "v1=abcd", BODY), Err(Refused::Forged));
        assert_eq!(refused(SECRET, "v0=zz", BODY), Err(Refused::Forged));
        assert_eq!(
            refused(SECRET, &SIGNATURE[..40], BODY),
            Err(Refused::Forged)
        );
    }

    #[test]
    fn stale_or_future_timestamps_are_refused() {
        let check = |now| {
            verify(
                SECRET,
                Some(TIMESTAMP),
                Some(SIGNATURE),
                BODY.as_bytes(),
                now,
            )
        };
        let at = 1531420618;
        assert_eq!(check(at + 300), Ok(()));
        assert_eq!(check(at + 301), Err(Refused::Stale(301)));
        assert_eq!(check(at - 301), Err(Refused::Stale(-301)));
    }

    #[test]
    fn missing_headers_are_named() {
        let body = BODY.as_bytes();
        assert_eq!(
            verify(SECRET, None, Some(SIGNATURE), body, NOW),
            Err(Refused::Missing("X-Slack-Request-Timestamp"))
        );
        assert_eq!(
            verify(SECRET, Some("soon"), Some(SIGNATURE), body, NOW),
            Err(Refused::Missing("X-Slack-Request-Timestamp"))
        );
        assert_eq!(
            verify(SECRET, Some(TIMESTAMP), None, body, NOW),
            Err(Refused::Missing("X-Slack-Signature"))
        );
    }
}
