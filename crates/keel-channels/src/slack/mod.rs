//! The Slack channel: the Events API over HTTP at `POST /channels/slack/events`, button presses
//! at `POST /channels/slack/interactions`, replies with `chat.postMessage`.
//!
//! Every request is verified first ([`verify`]: the `v0` HMAC of the signing secret, a
//! timestamp within five minutes); a forged or stale one is refused with 401 and a log line,
//! nothing read. A message keel answers ([`events`]) goes to the intake, which stores it and
//! queues its run in one transaction, and only then is it acknowledged (200): when the store
//! cannot take it the answer is 503, and Slack retries. Its key is the message's channel and
//! `ts`, the same in Slack's retries (`X-Slack-Retry-Num`) and in the two events Slack sends for
//! one mention (`message` and `app_mention`, with two `event_id`s): a message is taken once.
//! Replies are delivered by the courier through [`outlet::SlackOutlet`].

mod events;
mod outlet;
mod verify;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use keel_platform::{DeliveryRoute, InboundKey, IncomingMessage, Source};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::access::{Access, Allow};
use crate::config::{parse_section, secret};
use crate::decide::Pressed;
use crate::intake::{Inbound, IntakeError, Received};
use crate::outlet::{DeliveryError, Target};
use crate::runtime::{Context, StartError, Started};

pub use events::Respond;
pub use outlet::SlackOutlet;
pub use verify::{Refused, sign, verify};

/// The channel's name, in routes, the outbox and its state.
const CHANNEL: &str = "slack";
/// The largest request body taken (Slack's are a few kilobytes).
const MAX_BODY_BYTES: usize = 1 << 20;
/// Where the threads keel answers in are remembered (`{channel}:{thread_ts}`).
const THREADS: &str = "slack/threads";

/// `[channels.slack]` of `keel.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SlackConfig {
    /// The environment variable holding the bot token (`xoxb-…`).
    #[serde(default = "default_token_env")]
    bot_token_env: String,
    /// The environment variable holding the app's signing secret.
    #[serde(default = "default_secret_env")]
    signing_secret_env: String,
    /// The Web API's base.
    #[serde(default = "default_api_url")]
    api_url: String,
    /// The bot's user id (`U…`); asked of `auth.test` at start when not given.
    #[serde(default)]
    bot_user_id: Option<String>,
    /// When keel answers in channels.
    #[serde(default)]
    respond: Respond,
    /// Who may talk.
    #[serde(default)]
    allow: Allow,
    /// Who, when `allow = "allowlist"`.
    #[serde(default)]
    allowlist: Vec<String>,
}

fn default_token_env() -> String {
    "SLACK_BOT_TOKEN".into()
}

fn default_secret_env() -> String {
    "SLACK_SIGNING_SECRET".into()
}

fn default_api_url() -> String {
    "https://slack.com/api".into()
}

/// The running channel, shared by its routes.
struct Slack {
    ctx: Context,
    secret: String,
    bot: Option<String>,
    respond: Respond,
    access: Access,
    outlet: Arc<SlackOutlet>,
}

/// Starts the Slack channel from its section: its routes, and a courier for its replies.
pub async fn start(raw: &toml::Value, ctx: &Context) -> Result<Started, StartError> {
    let section = "channels.slack";
    let config: SlackConfig = parse_section(section, raw)?;
    let token = secret(section, "bot token", &config.bot_token_env)?;
    let signing = secret(section, "signing secret", &config.signing_secret_env)?;
    let outlet = Arc::new(SlackOutlet {
        http: ctx.http.clone(),
        api_url: config.api_url.clone(),
        token,
        store: ctx.state.store.clone(),
    });
    let bot = match config.bot_user_id {
        Some(id) => Some(id),
        None => match outlet.call("auth.test", &json!({})).await {
            Ok(answer) => answer
                .get("user_id")
                .and_then(Value::as_str)
                .map(String::from),
            Err(DeliveryError::Permanent(why)) => {
                return Err(StartError::Config(format!(
                    "[{section}]: Slack refused the bot token of {}: {why}",
                    config.bot_token_env
                )));
            }
            Err(other) => {
                tracing::warn!(channel = CHANNEL, error = %other,
                    "cannot ask Slack for the bot's user id; set bot_user_id in [channels.slack]: \
                     until then, mentions are known only by app_mention events");
                None
            }
        },
    };
    tracing::info!(
        channel = CHANNEL,
        bot = bot.as_deref().unwrap_or("?"),
        "Slack is connected"
    );
    ctx.deliver_with(outlet.clone());
    let slack = Arc::new(Slack {
        ctx: ctx.clone(),
        secret: signing,
        bot,
        respond: config.respond,
        access: Access {
            allow: config.allow,
            allowlist: config.allowlist,
        },
        outlet,
    });
    let routes = Router::new()
        .route("/channels/slack/events", post(events_route))
        .route("/channels/slack/interactions", post(interactions_route))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(slack);
    Ok(Started {
        routes: Some(routes),
    })
}

/// A header's text.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

impl Slack {
    /// Checks a request's signature (a refusal is logged).
    fn check(&self, what: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), Refused> {
        let now = chrono::Utc::now().timestamp();
        let timestamp = header(headers, "x-slack-request-timestamp");
        let signature = header(headers, "x-slack-signature");
        verify(&self.secret, timestamp, signature, body, now).inspect_err(|why| {
            tracing::warn!(channel = CHANNEL, %why, "a Slack {what} request was refused");
        })
    }

    /// Takes a person's message: to the intake if keel answers it.
    async fn message(&self, message: events::Message, retry: Option<&str>) -> Response {
        let bot = self.bot.as_deref();
        let in_thread = match &message.thread_ts {
            Some(thread) if !message.direct => {
                let key = format!("{}:{thread}", message.channel);
                match self.ctx.state.store.channel_state(THREADS, &key).await {
                    Ok(known) => known.is_some(),
                    Err(error) => return self.unavailable(&error.to_string()).await,
                }
            }
            _ => false,
        };
        if !(message.direct || self.respond == Respond::All || in_thread || message.mentions(bot)) {
            tracing::debug!(channel = CHANNEL, event = %message.event_id,
                "a channel message not for keel was ignored");
            return StatusCode::OK.into_response();
        }
        let thread = message.reply_thread();
        let key = InboundKey::new(CHANNEL, format!("{}:{}", message.channel, message.ts));
        let route = DeliveryRoute {
            channel: CHANNEL.into(),
            target: Target {
                chat: message.channel.clone(),
                thread: thread.clone(),
                ..Target::default()
            }
            .encode(),
        };
        let incoming = IncomingMessage {
            platform: CHANNEL.into(),
            platform_user_id: message.user.clone(),
            platform_username: None,
            platform_server_id: Some(message.team.clone()).filter(|t| !t.is_empty()),
            platform_channel_id: message.channel.clone(),
            platform_thread_id: thread.clone(),
            text: message.clean_text(bot),
            source: Source::Chat,
            attachments: Vec::new(),
            chat_kind: keel_platform::ChatKind::of(message.direct, thread.is_some()),
        };
        let received = self
            .ctx
            .intake
            .receive(Inbound::new(key, incoming, route), &self.access)
            .await;
        match received {
            Ok(received) => {
                self.ctx.note_event(CHANNEL).await;
                tracing::info!(channel = CHANNEL, event = %message.event_id,
                    retry = retry.unwrap_or("0"), ?received, "a Slack message was taken");
                if let (Received::Queued { .. } | Received::Answered { .. }, Some(thread), false) =
                    (&received, &thread, message.direct)
                {
                    let key = format!("{}:{thread}", message.channel);
                    self.ctx.note(THREADS, &key, "1").await;
                }
                StatusCode::OK.into_response()
            }
            Err(IntakeError::Unavailable(why)) => self.unavailable(&why).await,
            Err(IntakeError::Invalid(why)) => {
                tracing::warn!(channel = CHANNEL, event = %message.event_id, %why,
                    "a Slack message was dropped");
                StatusCode::OK.into_response()
            }
        }
    }

    /// 503: Slack sends the event again later.
    async fn unavailable(&self, why: &str) -> Response {
        self.ctx
            .note_error(
                CHANNEL,
                &format!("an event was not taken (Slack retries it): {why}"),
            )
            .await;
        StatusCode::SERVICE_UNAVAILABLE.into_response()
    }

    /// Takes a button press: decided by the decider, the presser told privately.
    async fn press(&self, payload: &Value) -> Response {
        let str_at = |pointer: &str| payload.pointer(pointer).and_then(Value::as_str);
        if str_at("/type") != Some("block_actions") {
            tracing::info!(
                channel = CHANNEL,
                kind = str_at("/type").unwrap_or("?"),
                "an interaction keel does not take was ignored"
            );
            return StatusCode::OK.into_response();
        }
        let (Some(user), Some(value)) = (str_at("/user/id"), str_at("/actions/0/value")) else {
            tracing::warn!(
                channel = CHANNEL,
                "a Slack button press without user or value was refused"
            );
            return (StatusCode::BAD_REQUEST, "no user or value").into_response();
        };
        let Some(press_id) = str_at("/actions/0/action_ts").or(str_at("/trigger_id")) else {
            tracing::warn!(
                channel = CHANNEL,
                "a Slack button press without an id was refused"
            );
            return (StatusCode::BAD_REQUEST, "no action_ts or trigger_id").into_response();
        };
        let key = InboundKey::new(CHANNEL, format!("action:{press_id}"));
        let pressed = match self
            .ctx
            .decider
            .press(CHANNEL, CHANNEL, user, value, Some(&key))
            .await
        {
            Ok(pressed) => pressed,
            Err(error) => return self.unavailable(&error.to_string()).await,
        };
        self.ctx.note_event(CHANNEL).await;
        tracing::info!(
            channel = CHANNEL,
            user,
            ?pressed,
            "a Slack button was pressed"
        );
        if let Some(chat) = str_at("/channel/id") {
            let mut tell = json!({"channel": chat, "user": user, "text": pressed.text()});
            let thread = str_at("/container/thread_ts").or(str_at("/message/thread_ts"));
            if let Some(thread) = thread {
                tell["thread_ts"] = json!(thread);
            }
            // A decided message loses its buttons, and says who decided.
            let update = match (&pressed, payload.get("message")) {
                (Pressed::Done(done), Some(message)) => decided(chat, message, done, user),
                _ => None,
            };
            let (outlet, ctx) = (self.outlet.clone(), self.ctx.clone());
            self.ctx.tasks.spawn(async move {
                if let Err(error) = outlet.call("chat.postEphemeral", &tell).await {
                    ctx.note_error(CHANNEL, &format!("cannot tell a presser: {error}"))
                        .await;
                }
                if let Some(update) = update
                    && let Err(error) = outlet.call("chat.update", &update).await
                {
                    ctx.note_error(CHANNEL, &format!("cannot mark a message decided: {error}"))
                        .await;
                }
            });
        }
        StatusCode::OK.into_response()
    }
}

async fn events_route(
    State(slack): State<Arc<Slack>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(refused) = slack.check("Events API", &headers, &body) {
        return (StatusCode::UNAUTHORIZED, refused.to_string()).into_response();
    }
    let retry = header(&headers, "x-slack-retry-num");
    match events::parse(&body, slack.bot.as_deref()) {
        Err(why) => {
            tracing::warn!(channel = CHANNEL, %why, "a malformed Slack event was refused");
            (StatusCode::BAD_REQUEST, why).into_response()
        }
        Ok(events::Request::Challenge(challenge)) => {
            axum::Json(json!({"challenge": challenge})).into_response()
        }
        Ok(events::Request::Ignored(why)) => {
            tracing::info!(channel = CHANNEL, %why, "a Slack event was ignored");
            StatusCode::OK.into_response()
        }
        Ok(events::Request::Message(message)) => slack.message(message, retry).await,
    }
}

async fn interactions_route(
    State(slack): State<Arc<Slack>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(refused) = slack.check("interaction", &headers, &body) {
        return (StatusCode::UNAUTHORIZED, refused.to_string()).into_response();
    }
    let payload = std::str::from_utf8(&body)
        .ok()
        .and_then(|form| form_value(form, "payload"))
        .and_then(|json| serde_json::from_str::<Value>(&json).ok());
    let Some(payload) = payload else {
        tracing::warn!(
            channel = CHANNEL,
            "a malformed Slack interaction was refused"
        );
        return (StatusCode::BAD_REQUEST, "no JSON payload").into_response();
    };
    slack.press(&payload).await
}

/// The `chat.update` body that takes the buttons off a decided `message` of `chat` and says what
/// `user` decided (`done`); `None` when the message has no `ts`.
fn decided(chat: &str, message: &Value, done: &str, user: &str) -> Option<Value> {
    let ts = message.get("ts")?.as_str()?;
    let mut blocks: Vec<Value> = message
        .get("blocks")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) != Some("actions"))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    blocks.push(json!({"type": "context", "elements": [
        {"type": "mrkdwn", "text": format!("{done} (<@{user}>)")}
    ]}));
    let text = message.get("text").and_then(Value::as_str).unwrap_or(done);
    Some(json!({"channel": chat, "ts": ts, "text": text, "blocks": blocks}))
}

/// The value of field `name` of a form-encoded body.
fn form_value(form: &str, name: &str) -> Option<String> {
    form.split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .and_then(|(_, value)| percent_decode(value))
}

/// `+` as a space, `%XX` as its byte; `None` when malformed or not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_payloads_are_decoded() {
        let form = "a=1&payload=%7B%22type%22%3A%22block_actions%22%2C%22x%22%3A%22a+b%22%7D";
        assert_eq!(
            form_value(form, "payload").as_deref(),
            Some(r#"{"type":"block_actions","x":"a b"}"#)
        );
        assert_eq!(form_value(form, "none"), None);
        assert_eq!(form_value("payload=%zz", "payload"), None);
        assert_eq!(form_value("payload=%e", "payload"), None);
    }

    #[test]
    fn a_decided_message_loses_its_buttons() {
        let message = json!({"ts": "5.1", "text": "Run `ls`?", "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "Run `ls`?"}},
            {"type": "actions", "elements": []}
        ]});
        let update = decided("C1", &message, "Approved.", "U1").unwrap();
        assert_eq!(
            update,
            json!({"channel": "C1", "ts": "5.1", "text": "Run `ls`?", "blocks": [
                {"type": "section", "text": {"type": "mrkdwn", "text": "Run `ls`?"}},
                {"type": "context", "elements": [{"type": "mrkdwn", "text": "Approved. (<@U1>)"}]}
            ]})
        );
        assert_eq!(decided("C1", &json!({}), "Approved.", "U1"), None);
    }

    #[test]
    fn the_section_takes_defaults_and_refuses_unknown_keys() {
        let raw: toml::Value = toml::from_str("respond = \"all\"").unwrap();
        let config: SlackConfig = parse_section("channels.slack", &raw).unwrap();
        assert_eq!(config.respond, Respond::All);
        assert_eq!(config.api_url, "https://slack.com/api");
        assert_eq!(config.bot_token_env, "SLACK_BOT_TOKEN");
        let raw: toml::Value = toml::from_str("token = \"xoxb\"").unwrap();
        let error = parse_section::<SlackConfig>("channels.slack", &raw).unwrap_err();
        assert!(error.to_string().contains("token"), "{error}");
    }
}
