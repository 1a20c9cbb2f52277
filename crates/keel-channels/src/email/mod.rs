//! The email channel: mail in by an inbound-mail webhook (`POST /channels/email/inbound`, the
//! raw MIME as the body, `Authorization: Bearer` the secret) and by IMAP polling ([`imap`]);
//! replies out by SMTP ([`smtp`]) only when `reply = true`.
//!
//! A mail is untrusted (anyone can write one, and its `From` can be forged): it is always an
//! `email_trigger`, its text fenced as untrusted, one conversation per sender and thread (the
//! thread's first `Message-ID`), and its `Message-ID` recorded with its run so a mail read
//! twice runs once. Who may trigger: by default only the senders `allowlist` names (and
//! senders linked to a user); replies are off by default, so a trigger is silent unless asked.

pub mod imap;
pub mod mime;
pub mod smtp;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use keel_platform::{DeliveryRoute, InboundKey, IncomingMessage, Source};
use keel_server::ApiError;
use serde::Deserialize;
use subtle::ConstantTimeEq;

use crate::access::{Access, Allow};
use crate::config::{parse_section, secret};
use crate::intake::{Inbound, IntakeError, Received};
use crate::outlet::Target;
use crate::runtime::{Context, StartError, Started};
use crate::webhook::{read_body, respond, warn};

/// The path of the inbound-mail webhook.
pub const INBOUND_PATH: &str = "/channels/email/inbound";

/// `[channels.email]`, as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailConfig {
    /// The account's name: the conversations' channel id (default `email`).
    #[serde(default = "default_name")]
    pub name: String,
    /// The environment variable holding the inbound webhook's bearer secret; without it there
    /// is no webhook.
    #[serde(default)]
    pub inbound_secret_env: Option<String>,
    /// The largest mail taken, in bytes (default 25 MiB); a larger one is refused unread.
    #[serde(default = "default_max_message")]
    pub max_message_bytes: usize,
    /// The IMAP server; without it there is no polling.
    #[serde(default)]
    pub imap_host: Option<String>,
    /// Its port (default 993 with TLS, 143 without).
    #[serde(default)]
    pub imap_port: Option<u16>,
    /// Whether IMAP is spoken over TLS (default true).
    #[serde(default = "yes")]
    pub imap_tls: bool,
    /// The IMAP login.
    #[serde(default)]
    pub imap_user: Option<String>,
    /// The environment variable holding the IMAP password.
    #[serde(default)]
    pub imap_password_env: Option<String>,
    /// Seconds between polls (default 60).
    #[serde(default = "default_poll")]
    pub imap_poll_secs: f64,
    /// Whether runs' answers are mailed back (default false).
    #[serde(default)]
    pub reply: bool,
    /// The SMTP server as a URL (`smtps://user:pass@host`), instead of host and port.
    #[serde(default)]
    pub smtp_url: Option<String>,
    /// The SMTP server.
    #[serde(default)]
    pub smtp_host: Option<String>,
    /// Its port.
    #[serde(default)]
    pub smtp_port: Option<u16>,
    /// `none`, `starttls` (default) or `tls`.
    #[serde(default)]
    pub smtp_tls: smtp::SmtpTls,
    /// The SMTP login.
    #[serde(default)]
    pub smtp_user: Option<String>,
    /// The environment variable holding the SMTP password.
    #[serde(default)]
    pub smtp_password_env: Option<String>,
    /// The replies' `From`.
    #[serde(default)]
    pub from: Option<String>,
    /// Who may trigger: `allowlist` (default), `everyone` or `pairing`.
    #[serde(default = "default_allow")]
    pub allow: Allow,
    /// The sender addresses allowed.
    #[serde(default)]
    pub allowlist: Vec<String>,
}

fn default_name() -> String {
    "email".into()
}
fn default_max_message() -> usize {
    25 * 1024 * 1024
}
fn yes() -> bool {
    true
}
fn default_poll() -> f64 {
    60.0
}
fn default_allow() -> Allow {
    Allow::Allowlist
}

/// What every way in shares: the intake, the rules, the limits.
pub(crate) struct Mailroom {
    ctx: Context,
    name: String,
    access: Access,
    reply: bool,
    max_message_bytes: usize,
    inbound_secret: Option<Vec<u8>>,
}

/// What became of a mail.
#[derive(Debug)]
pub(crate) enum Taken {
    /// The intake had it (queued, duplicate, refused…) or refused it for good.
    Done(Result<Received, IntakeError>),
    /// It is malformed: dropped, with the reason (logged).
    Dropped(String),
}

impl Mailroom {
    /// Takes a raw mail.
    pub(crate) async fn take(&self, raw: &[u8]) -> Taken {
        let max_attachment = self.ctx.state.inbox.settings().max_attachment_bytes;
        let mail = match mime::parse(raw, max_attachment) {
            Ok(mail) => mail,
            Err(why) => {
                warn(&format!("email `{}`: a mail was dropped: {why}", self.name));
                return Taken::Dropped(why);
            }
        };
        let mut text = format!(
            "From: {}\nSubject: {}\n\n{}",
            match &mail.from_name {
                Some(name) => format!("{name} <{}>", mail.from),
                None => mail.from.clone(),
            },
            mail.subject,
            mail.text.trim()
        );
        for dropped in &mail.dropped {
            text.push_str(&format!(
                "\n\n[An attachment was dropped for its size: {dropped}.]"
            ));
        }
        let route = self.reply.then(|| DeliveryRoute {
            channel: "email".into(),
            target: Target {
                chat: mail.from.clone(),
                thread: Some(mail.message_id.clone()),
                subject: Some(mail.subject.clone()),
                references: Some(mail.references.clone()),
                reply_to: None,
            }
            .encode(),
        });
        let inbound = Inbound {
            key: InboundKey::new("email", mail.message_id.clone()),
            message: IncomingMessage {
                platform: "email".into(),
                platform_user_id: mail.from.clone(),
                platform_username: None,
                platform_server_id: None,
                platform_channel_id: self.name.clone(),
                platform_thread_id: Some(mail.thread.clone()),
                text,
                source: Source::EmailTrigger,
                attachments: mail.attachments,
                chat_kind: keel_platform::ChatKind::Dm,
            },
            route,
            persona: None,
            modules: None,
        };
        let received = self.ctx.intake.receive(inbound, &self.access).await;
        match &received {
            Ok(Received::Refused) => warn(&format!(
                "email `{}`: a mail from {}, a sender not on [channels.email] allowlist, was \
                     dropped",
                self.name, mail.from
            )),
            Ok(_) => self.ctx.note_event("email").await,
            Err(_) => {}
        }
        Taken::Done(received)
    }
}

/// Starts the email channel from `[channels.email]`.
pub async fn start(raw: &toml::Value, ctx: &Context) -> Result<Started, StartError> {
    let config: EmailConfig = parse_section("channels.email", raw)?;
    let section = "channels.email";
    keel_platform::place::check_platform_text("name", &config.name, false)
        .map_err(|why| StartError::Config(format!("[{section}]: {why}")))?;
    if config.inbound_secret_env.is_none() && config.imap_host.is_none() {
        return Err(StartError::Config(format!(
            "[{section}] needs a way for mail to come in: `inbound_secret_env` (the inbound-mail \
             webhook at {INBOUND_PATH}) or `imap_host` (polling)"
        )));
    }
    let inbound_secret = match &config.inbound_secret_env {
        Some(variable) => Some(secret(section, "inbound webhook secret", variable)?.into_bytes()),
        None => None,
    };
    let room = Arc::new(Mailroom {
        ctx: ctx.clone(),
        name: config.name.clone(),
        access: Access {
            allow: config.allow,
            allowlist: config
                .allowlist
                .iter()
                .map(|a| a.trim().to_lowercase())
                .collect(),
        },
        reply: config.reply,
        max_message_bytes: config.max_message_bytes,
        inbound_secret,
    });
    if config.reply {
        let password = match &config.smtp_password_env {
            Some(variable) => Some(secret(section, "SMTP password", variable)?),
            None => None,
        };
        let from = config.from.clone().ok_or_else(|| {
            StartError::Config(format!(
                "[{section}] reply = true needs `from`, the replies' address"
            ))
        })?;
        let outlet = smtp::SmtpOutlet::new(&smtp::SmtpSettings {
            url: config.smtp_url.clone(),
            host: config.smtp_host.clone(),
            port: config.smtp_port,
            tls: config.smtp_tls,
            user: config.smtp_user.clone(),
            password,
            from,
        })
        .map_err(|why| StartError::Config(format!("[{section}]: {why}")))?;
        ctx.deliver_with(Arc::new(outlet));
    }
    if let Some(host) = &config.imap_host {
        let password = match &config.imap_password_env {
            Some(variable) => secret(section, "IMAP password", variable)?,
            None => String::new(),
        };
        let settings = imap::ImapSettings {
            host: host.clone(),
            port: config
                .imap_port
                .unwrap_or(if config.imap_tls { 993 } else { 143 }),
            tls: config.imap_tls,
            user: config.imap_user.clone().unwrap_or_default(),
            password,
            every: Duration::from_secs_f64(config.imap_poll_secs.max(0.001)),
        };
        let (room, stop) = (room.clone(), ctx.stop.clone());
        ctx.tasks.spawn(imap::poll(settings, room, stop));
    }
    let routes = room.inbound_secret.is_some().then(|| {
        Router::new()
            .route(INBOUND_PATH, post(inbound))
            .layer(DefaultBodyLimit::disable())
            .with_state(room.clone())
    });
    Ok(Started { routes })
}

async fn inbound(State(room): State<Arc<Mailroom>>, headers: HeaderMap, body: Body) -> Response {
    let Some(expected) = &room.inbound_secret else {
        return ApiError::not_found("this path").into_response();
    };
    let given = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .trim();
    if !bool::from(given.as_bytes().ct_eq(expected)) {
        warn("an inbound mail was refused: no or a wrong bearer secret");
        return ApiError::unauthorized(
            "the inbound-mail webhook needs `Authorization: Bearer` and the secret \
             [channels.email] inbound_secret_env names",
        )
        .into_response();
    }
    let raw = match read_body(&headers, body, room.max_message_bytes, "an inbound mail").await {
        Ok(raw) => raw,
        Err(response) => return response,
    };
    match room.take(&raw).await {
        Taken::Dropped(why) => {
            ApiError::invalid(format!("the mail was dropped: {why}")).into_response()
        }
        Taken::Done(received) => respond("an inbound mail", received),
    }
}
