//! Discord's Interactions endpoint, served by the daemon at `POST /channels/discord/interactions`:
//! every request is verified first (Ed25519 over `X-Signature-Timestamp` + the raw body with the
//! application's public key; a missing or forged signature, or a timestamp more than five
//! minutes off, is a 401), then:
//!
//! - PING (type 1) is answered `{"type": 1}`;
//! - a button press (MESSAGE_COMPONENT, type 3) is handed to the [`crate::decide::Decider`]
//!   with the press's own key `interaction:{id}` (a replayed interaction does nothing again:
//!   "Already done."); the presser is answered privately (an ephemeral message, flags 64);
//! - a slash command (APPLICATION_COMMAND, type 2, e.g. `/ask text: …`) becomes a message of
//!   its channel's conversation, keyed `interaction:{id}`. It is answered at once (type 4) with
//!   the question quoted, and the run's reply is posted to the channel by the courier like any
//!   other. (A deferred answer, type 5, would leave Discord's "thinking…" until edited through
//!   the interaction's token, which lapses after 15 minutes: too short for a run that waits
//!   for an approval.)

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use ed25519_dalek::{Signature, VerifyingKey};
use keel_platform::InboundKey;
use serde_json::{Value, json};

use super::message::{command_inbound, interaction_user};
use super::{CHANNEL, Discord};
use crate::intake::{IntakeError, Received};

/// The path Discord posts interactions to (the application's Interactions Endpoint URL).
pub const PATH: &str = "/channels/discord/interactions";

/// How far an interaction's timestamp may be from now, in seconds.
pub const MAX_SKEW_SECS: i64 = 300;

/// Checks interactions' signatures with the application's public key.
#[derive(Clone, Debug)]
pub struct Verifier {
    key: VerifyingKey,
}

/// Why a request was refused before being read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No signature or timestamp header, or not hex of the right length.
    #[error("the request is not signed")]
    Unsigned,
    /// The timestamp is not a number or is more than five minutes off.
    #[error("the request's timestamp is stale or malformed")]
    Stale,
    /// The signature does not match.
    #[error("the request's signature does not match")]
    Forged,
}

impl Verifier {
    /// A verifier of the public key `hex` (64 hex digits, from the application's page).
    pub fn from_hex(hex: &str) -> Result<Self, String> {
        let bytes: [u8; 32] = unhex(hex.trim())
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or("it must be 64 hex digits (the application's PUBLIC KEY)")?;
        let key =
            VerifyingKey::from_bytes(&bytes).map_err(|e| format!("not an Ed25519 key: {e}"))?;
        Ok(Verifier { key })
    }

    /// Checks `signature` (hex) over `timestamp` + `body`, `timestamp` within five minutes of
    /// `now` (Unix seconds).
    pub fn verify(
        &self,
        signature: &str,
        timestamp: &str,
        body: &[u8],
        now: i64,
    ) -> Result<(), Refusal> {
        let signature: [u8; 64] = unhex(signature.trim())
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or(Refusal::Unsigned)?;
        let at: i64 = timestamp.trim().parse().map_err(|_| Refusal::Stale)?;
        if (now - at).abs() > MAX_SKEW_SECS {
            return Err(Refusal::Stale);
        }
        let mut signed = Vec::with_capacity(timestamp.len() + body.len());
        signed.extend_from_slice(timestamp.as_bytes());
        signed.extend_from_slice(body);
        self.key
            .verify_strict(&signed, &Signature::from_bytes(&signature))
            .map_err(|_| Refusal::Forged)
    }
}

/// Bytes of `hex` (even length, hex digits only).
fn unhex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(hex.get(at..at + 2)?, 16).ok())
        .collect()
}

struct Endpoint {
    discord: Arc<Discord>,
    verifier: Verifier,
}

/// The interactions route.
pub fn routes(discord: Arc<Discord>, verifier: Verifier) -> Router {
    Router::new()
        .route(PATH, post(interaction))
        .with_state(Arc::new(Endpoint { discord, verifier }))
}

async fn interaction(
    State(endpoint): State<Arc<Endpoint>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    let checked = endpoint.verifier.verify(
        header("x-signature-ed25519"),
        header("x-signature-timestamp"),
        &body,
        chrono::Utc::now().timestamp(),
    );
    if let Err(refusal) = checked {
        tracing::warn!(channel = CHANNEL, %refusal, "a Discord interaction was refused");
        return (StatusCode::UNAUTHORIZED, refusal.to_string()).into_response();
    }
    let Ok(interaction) = serde_json::from_slice::<Value>(&body) else {
        tracing::warn!(
            channel = CHANNEL,
            "a signed Discord interaction that is not JSON was refused"
        );
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    match interaction["type"].as_u64() {
        Some(1) => axum::Json(json!({"type": 1})).into_response(),
        Some(2) => command(&endpoint.discord, &interaction).await,
        Some(3) => press(&endpoint.discord, &interaction).await,
        other => {
            tracing::warn!(channel = CHANNEL, kind = ?other,
                "a Discord interaction of a type keel does not handle was refused");
            (StatusCode::BAD_REQUEST, "unsupported interaction type").into_response()
        }
    }
}

/// An answer only the person who interacted sees.
fn private(text: &str) -> Response {
    axum::Json(json!({"type": 4, "data": {"content": text, "flags": 64}})).into_response()
}

async fn press(discord: &Discord, interaction: &Value) -> Response {
    let (Some(id), Some(data), Some(user)) = (
        interaction["id"].as_str(),
        interaction["data"]["custom_id"].as_str(),
        interaction_user(interaction),
    ) else {
        tracing::warn!(
            channel = CHANNEL,
            "a Discord button press without id, user or custom_id was refused"
        );
        return (StatusCode::BAD_REQUEST, "malformed component interaction").into_response();
    };
    let key = InboundKey::new(CHANNEL, format!("interaction:{id}"));
    match discord
        .ctx
        .decider
        .press(CHANNEL, CHANNEL, &user.id, data, Some(&key))
        .await
    {
        Ok(pressed) => {
            discord.ctx.note_event(CHANNEL).await;
            tracing::info!(channel = CHANNEL, interaction = id, user = %user.id, outcome = ?pressed,
                "a Discord button was pressed");
            private(pressed.text())
        }
        Err(error) => {
            discord
                .ctx
                .note_error(CHANNEL, &format!("a button press failed: {error}"))
                .await;
            (StatusCode::SERVICE_UNAVAILABLE, "try again").into_response()
        }
    }
}

async fn command(discord: &Arc<Discord>, interaction: &Value) -> Response {
    let inbound = match command_inbound(interaction) {
        Ok(inbound) => inbound,
        Err(why) => {
            tracing::warn!(
                channel = CHANNEL,
                why,
                "a Discord slash command was refused"
            );
            return private(&format!("Nothing done: {why}."));
        }
    };
    let asked: String = inbound.message.text.chars().take(1_900).collect();
    let channel_id = inbound.message.platform_channel_id.clone();
    match discord.take(inbound, &channel_id).await {
        Ok(Received::Queued { .. }) => axum::Json(json!({"type": 4, "data": {
            "content": format!("> {}", asked.replace('\n', "\n> ")),
            "allowed_mentions": {"parse": []},
        }}))
        .into_response(),
        Ok(Received::Answered { .. }) => private("Answered."),
        Ok(Received::Duplicate { .. }) => private("Already received."),
        Ok(Received::Refused) => private("You may not talk to me here."),
        Ok(Received::Pairing { code }) => private(&format!(
            "I don't know you yet. Your pairing code is {code}; ask the owner of this assistant \
             to run `keel users pair {code}`."
        )),
        Ok(Received::Busy) => private("I am busy with this conversation; try again in a moment."),
        Err(IntakeError::Invalid(why)) => private(&format!("Nothing done: {why}")),
        Err(IntakeError::Unavailable(_)) => {
            (StatusCode::SERVICE_UNAVAILABLE, "try again").into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn pair(seed: u8) -> (SigningKey, Verifier) {
        let signing = SigningKey::from_bytes(&[seed; 32]);
        let verifier = Verifier::from_hex(&hex(signing.verifying_key().as_bytes())).unwrap();
        (signing, verifier)
    }

    fn sign(key: &SigningKey, timestamp: &str, body: &[u8]) -> String {
        let mut signed = timestamp.as_bytes().to_vec();
        signed.extend_from_slice(body);
        hex(&key.sign(&signed).to_bytes())
    }

    #[test]
    fn a_signed_request_passes() {
        let (key, verifier) = pair(7);
        let body = br#"{"type":1}"#;
        let signature = sign(&key, "1700000000", body);
        assert_eq!(
            verifier.verify(&signature, "1700000000", body, 1_700_000_100),
            Ok(())
        );
    }

    #[test]
    fn forged_unsigned_and_stale_requests_are_refused() {
        let (key, verifier) = pair(7);
        let (other, _) = pair(8);
        let body = br#"{"type":1}"#;
        let now = 1_700_000_000;
        let good = sign(&key, "1700000000", body);
        // Another key, another body, another timestamp: forged.
        assert_eq!(
            verifier.verify(&sign(&other, "1700000000", body), "1700000000", body, now),
            Err(Refusal::Forged)
        );
        assert_eq!(
            verifier.verify(&good, "1700000000", br#"{"type":2}"#, now),
            Err(Refusal::Forged)
        );
        assert_eq!(
            verifier.verify(&good, "1700000001", body, now),
            Err(Refusal::Forged)
        );
        // No signature, or not hex.
        assert_eq!(
            verifier.verify("", "1700000000", body, now),
            Err(Refusal::Unsigned)
        );
        assert_eq!(
            verifier.verify("zz", "1700000000", body, now),
            Err(Refusal::Unsigned)
        );
        // Six minutes old, or from the future: stale, even with a good signature.
        let old = sign(&key, "1699999640", body);
        assert_eq!(
            verifier.verify(&old, "1699999640", body, now),
            Err(Refusal::Stale)
        );
        assert_eq!(
            verifier.verify(&good, "soon", body, now),
            Err(Refusal::Stale)
        );
    }

    #[test]
    fn public_keys_are_checked() {
        assert!(Verifier::from_hex("abcd").is_err());
        assert!(Verifier::from_hex(&"g".repeat(64)).is_err());
        let (_, verifier) = pair(1);
        assert!(Verifier::from_hex(&hex(verifier.key.as_bytes())).is_ok());
    }
}
