//! Signed webhooks: `POST /hooks/{name}` of the daemon, one `[[webhooks]]` entry per name.
//!
//! A delivery carries `X-Keel-Timestamp` (unix seconds), `X-Keel-Signature: sha256=HEX`, the
//! HMAC-SHA256 of `"{timestamp}.{delivery}.{raw body}"` keyed with the hook's secret, where
//! `delivery` is `X-Keel-Delivery` (its id, at most 200 characters): the id is signed, so a
//! captured request cannot be sent again under another id. Unsigned, forged (compared in constant
//! time) or stale (more than five minutes off) deliveries are refused with 401 and a log line;
//! an unknown hook is 404, a body over 1 MiB 413, a body that is not JSON 400. A valid one
//! becomes the hook's template rendered from the payload ([`template`]), taken by the intake as
//! an untrusted event (`event_{uuid}`, a conversation of its own) with the hook's persona and
//! modules: 202 with its run. The delivery id is recorded with the run, so a redelivery is
//! 200 `{"duplicate": true}` and runs nothing. The answer goes to the channel `deliver` names,
//! or stays for the API (`GET /v1/runs/{id}`).

pub mod template;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hmac::{Hmac, KeyInit, Mac};
use keel_platform::{DeliveryRoute, InboundKey, IncomingMessage, Source};
use keel_server::ApiError;
use serde::Deserialize;
use serde_json::json;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::access::{Access, Allow};
use crate::config::{parse_section, secret};
use crate::intake::{Inbound, IntakeError, Received};
use crate::outlet::Target;
use crate::runtime::{Context, StartError, Started};

/// The largest body a hook takes.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How far a delivery's timestamp may be from now, in seconds, either way.
pub const MAX_SKEW_SECS: i64 = 5 * 60;
/// The longest delivery id.
pub const MAX_DELIVERY_ID: usize = 200;

/// One `[[webhooks]]` entry, as written.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    /// Its name: the path `/hooks/{name}`.
    pub name: String,
    /// The environment variable holding its HMAC key.
    pub secret_env: String,
    /// The message made from a payload ([`template::render`]).
    pub template: String,
    /// The persona its runs use, by name.
    #[serde(default)]
    pub persona: Option<String>,
    /// The tool modules its runs may use.
    #[serde(default)]
    pub modules: Option<Vec<String>>,
    /// Where its runs' replies go; without it they are kept for the API only.
    #[serde(default)]
    pub deliver: Option<Deliver>,
}

/// A hook's `deliver = { channel, chat, thread }`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deliver {
    /// The channel that delivers (`telegram`, `slack`, `discord`, `email`).
    pub channel: String,
    /// The chat (a Telegram chat id, a Slack or Discord channel id, a mail address).
    pub chat: String,
    /// The thread in it, if any.
    #[serde(default)]
    pub thread: Option<String>,
}

impl Deliver {
    /// The delivery route it names.
    pub fn route(&self) -> DeliveryRoute {
        DeliveryRoute {
            channel: self.channel.clone(),
            target: Target {
                chat: self.chat.clone(),
                thread: self.thread.clone(),
                ..Target::default()
            }
            .encode(),
        }
    }
}

/// A configured hook, its secret read.
struct Hook {
    config: HookConfig,
    secret: Vec<u8>,
}

struct Hooks {
    hooks: HashMap<String, Hook>,
    ctx: Context,
}

/// Starts the webhooks of `raws` (each a `[[webhooks]]` entry): their routes.
pub async fn start(raws: &[toml::Value], ctx: &Context) -> Result<Started, StartError> {
    let mut hooks = HashMap::new();
    for raw in raws {
        let config: HookConfig = parse_section("webhooks", raw)?;
        let section = format!("[webhooks] `{}`", config.name);
        check_name(&config.name)?;
        if let Some(deliver) = &config.deliver
            && !["telegram", "slack", "discord", "email"].contains(&deliver.channel.as_str())
        {
            return Err(StartError::Config(format!(
                "{section}: deliver.channel must be telegram, slack, discord or email, not `{}`",
                deliver.channel
            )));
        }
        let key = secret(
            &format!("webhooks.{}", config.name),
            "HMAC secret",
            &config.secret_env,
        )?;
        let name = config.name.clone();
        let hook = Hook {
            config,
            secret: key.into_bytes(),
        };
        if hooks.insert(name.clone(), hook).is_some() {
            return Err(StartError::Config(format!(
                "[webhooks]: two hooks are named `{name}`; each needs its own name"
            )));
        }
    }
    let state = Arc::new(Hooks {
        hooks,
        ctx: ctx.clone(),
    });
    let routes = Router::new()
        .route("/hooks/{name}", post(receive))
        .layer(DefaultBodyLimit::disable())
        .with_state(state);
    Ok(Started {
        routes: Some(routes),
    })
}

/// A hook's name: 1 to 64 letters, digits, `-` and `_` (it is a URL path segment).
fn check_name(name: &str) -> Result<(), StartError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(StartError::Config(format!(
            "[webhooks]: the name `{name}` must be 1 to 64 letters, digits, `-` or `_`"
        )))
    }
}

/// The signature header's value for delivery `delivery` of `body` sent at `timestamp` with
/// `secret`: `sha256=` and the hex HMAC-SHA256 of `"{timestamp}.{delivery}.{body}"`.
pub fn signature(secret: &[u8], timestamp: &str, delivery: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes any key");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(delivery.as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut hex = String::with_capacity(7 + digest.len() * 2);
    hex.push_str("sha256=");
    for byte in digest.iter() {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// Whether `given` is `secret`'s signature of delivery `delivery` of `body` at `timestamp`
/// (constant time).
pub fn verify(secret: &[u8], timestamp: &str, delivery: &str, body: &[u8], given: &str) -> bool {
    let expected = signature(secret, timestamp, delivery, body);
    let given = given.trim().to_ascii_lowercase();
    expected.as_bytes().ct_eq(given.as_bytes()).into()
}

/// Why a delivery's timestamp is refused, if it is: not a number, or more than
/// [`MAX_SKEW_SECS`] from `now`.
pub fn check_timestamp(timestamp: &str, now: i64) -> Result<(), String> {
    let Ok(at) = timestamp.trim().parse::<i64>() else {
        return Err("X-Keel-Timestamp must be unix seconds".into());
    };
    if (now - at).abs() > MAX_SKEW_SECS {
        return Err(format!(
            "X-Keel-Timestamp is {}s from now; at most {MAX_SKEW_SECS}s is accepted (a stale \
             or replayed delivery)",
            now - at
        ));
    }
    Ok(())
}

/// Logs a refusal or a drop (`keel serve` writes it on stderr).
pub(crate) fn warn(line: &str) {
    tracing::warn!("{line}");
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn refuse(hook: &str, why: String) -> Response {
    warn(&format!(
        "a delivery of the webhook `{hook}` was refused: {why}"
    ));
    ApiError::unauthorized(why).into_response()
}

/// Reads `body` up to `limit` bytes; over it (declared or sent) is 413.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    what: &str,
) -> Result<axum::body::Bytes, Response> {
    let too_large = || {
        warn(&format!(
            "{what} was refused: its body is over {limit} bytes"
        ));
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the body is over {limit} bytes, the most {what} may hold"),
        )
        .into_response()
    };
    let declared = header(headers, "content-length").and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| too_large())
}

/// The HTTP answer to what the intake did with an event.
pub(crate) fn respond(what: &str, received: Result<Received, IntakeError>) -> Response {
    match received {
        Ok(Received::Queued {
            run_id,
            conversation_id,
        }) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({"run_id": run_id, "conversation_id": conversation_id})),
        )
            .into_response(),
        Ok(Received::Answered { run_id }) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({"run_id": run_id, "answered": true})),
        )
            .into_response(),
        Ok(Received::Duplicate { run_id }) => (
            StatusCode::OK,
            axum::Json(json!({"duplicate": true, "run_id": run_id})),
        )
            .into_response(),
        Ok(Received::Refused) | Ok(Received::Pairing { .. }) => {
            (StatusCode::ACCEPTED, axum::Json(json!({"refused": true}))).into_response()
        }
        Ok(Received::Busy) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "lane_full",
            "the conversation's queue is full; deliver it again later",
        )
        .into_response(),
        Err(IntakeError::Invalid(why)) => {
            warn(&format!("{what} was dropped: {why}"));
            ApiError::invalid(why).into_response()
        }
        Err(IntakeError::Unavailable(why)) => {
            warn(&format!("{what} was not taken (deliver it again): {why}"));
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", why).into_response()
        }
    }
}

async fn receive(
    State(hooks): State<Arc<Hooks>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(hook) = hooks.hooks.get(&name) else {
        return ApiError::not_found(format!("the webhook `{name}`")).into_response();
    };
    let (Some(timestamp), Some(given)) = (
        header(&headers, "x-keel-timestamp"),
        header(&headers, "x-keel-signature"),
    ) else {
        return refuse(
            &name,
            "unsigned: X-Keel-Timestamp and X-Keel-Signature are required".into(),
        );
    };
    if let Err(why) = check_timestamp(timestamp, chrono::Utc::now().timestamp()) {
        return refuse(&name, why);
    }
    let body = match read_body(&headers, body, MAX_BODY_BYTES, "a webhook delivery").await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let delivery = header(&headers, "x-keel-delivery")
        .unwrap_or_default()
        .trim();
    if delivery.is_empty() || delivery.chars().count() > MAX_DELIVERY_ID {
        warn(&format!(
            "a delivery of the webhook `{name}` was refused: no usable X-Keel-Delivery"
        ));
        return ApiError::invalid(format!(
            "X-Keel-Delivery (the delivery's id, 1 to {MAX_DELIVERY_ID} characters) is required"
        ))
        .into_response();
    }
    if !verify(&hook.secret, timestamp, delivery, &body, given) {
        return refuse(
            &name,
            "the signature does not match: X-Keel-Signature must be sha256= and the hex \
             HMAC-SHA256 of \"{timestamp}.{delivery}.{body}\" keyed with the hook's secret"
                .into(),
        );
    }
    let payload: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(payload) => payload,
        Err(error) => {
            warn(&format!(
                "a delivery of the webhook `{name}` was refused: its body is not JSON: {error}"
            ));
            return ApiError::invalid(format!("the body is not JSON: {error}")).into_response();
        }
    };
    let config = &hook.config;
    let inbound = Inbound {
        key: InboundKey::new(format!("hook:{name}"), delivery),
        message: IncomingMessage {
            platform: "webhook".into(),
            platform_user_id: name.clone(),
            platform_username: None,
            platform_server_id: None,
            platform_channel_id: name.clone(),
            platform_thread_id: None,
            text: template::render(&config.template, &payload),
            source: Source::Event,
            attachments: Vec::new(),
            chat_kind: keel_platform::ChatKind::Dm,
        },
        route: config.deliver.as_ref().map(Deliver::route),
        persona: config.persona.clone(),
        modules: config.modules.clone(),
    };
    // The signature is the access check: whoever holds the secret may trigger the hook.
    let access = Access {
        allow: Allow::Everyone,
        allowlist: Vec::new(),
    };
    let received = hooks.ctx.intake.receive(inbound, &access).await;
    if received.is_ok() {
        hooks.ctx.note_event("webhooks").await;
    }
    respond(&format!("a delivery of the webhook `{name}`"), received)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_match_a_known_vector_and_differ_otherwise() {
        // As `openssl dgst -sha256 -hmac s3cret` computes it over `1700000000.d-1.{"a":1}`.
        let body = b"{\"a\":1}";
        assert_eq!(
            signature(b"s3cret", "1700000000", "d-1", body),
            "sha256=761bfc55e91102e942060687b506b7bd16e4725f47d76f159cc448cbe3056197"
        );
        let good = signature(b"s3cret", "1700000000", "d-1", body);
        assert!(verify(b"s3cret", "1700000000", "d-1", body, &good));
        let upper = good.to_uppercase().replace("SHA256=", "sha256=");
        assert!(verify(b"s3cret", "1700000000", "d-1", body, &upper));
        assert!(!verify(b"other", "1700000000", "d-1", body, &good));
        assert!(!verify(b"s3cret", "1700000001", "d-1", body, &good));
        // The same request under another delivery id: a replay, refused.
        assert!(!verify(b"s3cret", "1700000000", "d-2", body, &good));
        assert!(!verify(b"s3cret", "1700000000", "d-1", b"{\"a\":2}", &good));
        assert!(!verify(b"s3cret", "1700000000", "d-1", body, "sha256="));
        assert!(!verify(b"s3cret", "1700000000", "d-1", body, ""));
    }

    #[test]
    fn timestamps_within_five_minutes_only() {
        assert!(check_timestamp("1000", 1000 + 300).is_ok());
        assert!(check_timestamp("1000", 1000 - 300).is_ok());
        assert!(check_timestamp("1000", 1000 + 301).is_err());
        assert!(check_timestamp("1000", 1000 - 301).is_err());
        assert!(check_timestamp("soon", 1000).is_err());
    }

    #[test]
    fn deliver_becomes_a_route_without_it_none() {
        let raw: toml::Value = toml::from_str(
            "name = \"deploys\"\nsecret_env = \"X\"\ntemplate = \"{{ a }}\"\n\
             deliver = { channel = \"telegram\", chat = \"123\", thread = \"7\" }\n",
        )
        .unwrap();
        let config: HookConfig = parse_section("webhooks", &raw).unwrap();
        let route = config.deliver.unwrap().route();
        assert_eq!(route.channel, "telegram");
        let target = Target::decode(&route.target).unwrap();
        assert_eq!(
            (target.chat.as_str(), target.thread.as_deref()),
            ("123", Some("7"))
        );
        let bare: toml::Value =
            toml::from_str("name = \"n\"\nsecret_env = \"X\"\ntemplate = \"t\"\n").unwrap();
        let config: HookConfig = parse_section("webhooks", &bare).unwrap();
        assert!(config.deliver.as_ref().map(Deliver::route).is_none());
        let unknown: toml::Value =
            toml::from_str("name = \"n\"\nsecret_env = \"X\"\ntemplate = \"t\"\nsecret = \"x\"\n")
                .unwrap();
        assert!(parse_section::<HookConfig>("webhooks", &unknown).is_err());
    }

    #[test]
    fn names_are_url_safe() {
        assert!(check_name("deploys_prod-2").is_ok());
        for bad in ["", "a/b", "a b", "é", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
