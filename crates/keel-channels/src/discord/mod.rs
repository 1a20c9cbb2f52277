//! The Discord channel: messages arrive through the Gateway (a WebSocket keel keeps open,
//! [`gateway`]), slash commands and button presses through the Interactions endpoint the daemon
//! serves at `POST /channels/discord/interactions` (Ed25519-signed, [`interactions`]), and
//! replies leave through the REST API ([`rest`], [`outlet`]).
//!
//! A message becomes an [`Inbound`] keyed by its Discord id (a slash command by
//! `interaction:{id}`), in its channel's conversation: a guild channel, a thread (a thread is a
//! channel of its own in Discord, so it is its own conversation) or a DM. The guild id is the
//! message's server, which chooses the persona (seed 003's cascade). In guild channels keel
//! answers when mentioned or replied to, unless `respond = "all"`; in DMs always.
//!
//! Discord does not redeliver a Gateway message: one the store cannot take at that moment is
//! logged (and noted for `keel channels status`) and lost; a redelivered one (a resumed session
//! replaying its events) is recognised by its id and dropped.

pub mod gateway;
pub mod interactions;
pub mod message;
pub mod outlet;
pub mod rest;

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::access::{Access, Allow};
use crate::config::{parse_section, secret};
use crate::intake::{Inbound, Received};
use crate::runtime::{Context, StartError, Started};

/// The channel's name, as routes, keys and the outbox name it.
pub const CHANNEL: &str = "discord";

/// Discord's REST API.
pub const DEFAULT_REST_URL: &str = "https://discord.com/api/v10";

/// How often the typing indicator is renewed while a run works (Discord shows it ~10 s).
const TYPING_EVERY: Duration = Duration::from_secs(8);

/// When keel answers in a guild channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Respond {
    /// When the bot is mentioned (`<@BOTID>`) or a message of the bot is replied to.
    #[default]
    Mentions,
    /// Every message it can read.
    All,
}

/// `[channels.discord]` as written in keel.toml.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscordConfig {
    /// The environment variable that holds the bot token.
    #[serde(default = "default_token_env")]
    pub token_env: String,
    /// The application's public key (hex), to verify interactions; without it the
    /// interactions endpoint is not served.
    #[serde(default)]
    pub public_key: Option<String>,
    /// The REST API's base URL.
    #[serde(default = "default_rest_url")]
    pub rest_url: String,
    /// The Gateway's URL; when unset, asked of `GET /gateway/bot`.
    #[serde(default)]
    pub gateway_url: Option<String>,
    /// When keel answers in guild channels.
    #[serde(default)]
    pub respond: Respond,
    /// Who may talk.
    #[serde(default)]
    pub allow: Allow,
    /// Discord user ids or usernames allowed when `allow = "allowlist"`.
    #[serde(default)]
    pub allowlist: Vec<String>,
}

fn default_token_env() -> String {
    "DISCORD_BOT_TOKEN".into()
}

fn default_rest_url() -> String {
    DEFAULT_REST_URL.into()
}

/// What the gateway, the interactions endpoint and the outlet share.
pub struct Discord {
    /// The daemon's channel context.
    pub ctx: Context,
    /// The REST client.
    pub rest: rest::Rest,
    /// Who may talk.
    pub access: Access,
    /// When keel answers in guild channels.
    pub respond: Respond,
}

/// Starts the Discord channel from its section: the gateway, the courier, and the
/// interactions route when a public key is configured.
pub async fn start(raw: &toml::Value, ctx: &Context) -> Result<Started, StartError> {
    const SECTION: &str = "channels.discord";
    let config: DiscordConfig = parse_section(SECTION, raw)?;
    let token = secret(SECTION, "bot token", &config.token_env)?;
    let verifier = match &config.public_key {
        Some(hex) => Some(
            interactions::Verifier::from_hex(hex)
                .map_err(|why| StartError::Config(format!("[{SECTION}] public_key: {why}")))?,
        ),
        None => None,
    };
    let rest = rest::Rest::new(ctx.http.clone(), &config.rest_url, &token)
        .map_err(|why| StartError::Config(format!("[{SECTION}] rest_url: {why}")))?;
    let discord = Arc::new(Discord {
        ctx: ctx.clone(),
        rest,
        access: Access {
            allow: config.allow,
            allowlist: config.allowlist.clone(),
        },
        respond: config.respond,
    });
    ctx.deliver_with(Arc::new(outlet::DiscordOutlet::new(
        discord.rest.clone(),
        ctx.state.store.clone(),
    )));
    ctx.tasks.spawn(gateway::run(
        discord.clone(),
        token,
        config.gateway_url.clone(),
    ));
    let routes = match verifier {
        Some(verifier) => Some(interactions::routes(discord, verifier)),
        None => {
            tracing::info!(
                "[channels.discord] has no public_key: slash commands and buttons are off \
                 (POST /channels/discord/interactions is not served)"
            );
            None
        }
    };
    Ok(Started { routes })
}

impl Discord {
    /// Hands `inbound` to the intake; a queued run shows Discord's typing indicator in
    /// `channel_id` while it works.
    pub async fn take(
        self: &Arc<Self>,
        inbound: Inbound,
        channel_id: &str,
    ) -> Result<Received, crate::intake::IntakeError> {
        let key = inbound.key.event_id.clone();
        let received = self.ctx.intake.receive(inbound, &self.access).await;
        match &received {
            Ok(Received::Queued { run_id, .. }) => {
                self.ctx.note_event(CHANNEL).await;
                self.keep_typing(channel_id.to_string(), run_id.clone());
            }
            Ok(other) => {
                self.ctx.note_event(CHANNEL).await;
                tracing::info!(channel = CHANNEL, event = %key, outcome = ?other,
                    "a Discord event was taken without a new run");
            }
            Err(error) => {
                self.ctx
                    .note_error(CHANNEL, &format!("event {key} was not taken: {error}"))
                    .await;
            }
        }
        received
    }

    /// Shows "keel is typing…" in `channel_id` now and every [`TYPING_EVERY`] while `run_id`
    /// is queued or running.
    fn keep_typing(self: &Arc<Self>, channel_id: String, run_id: String) {
        let this = self.clone();
        self.ctx.tasks.spawn(async move {
            loop {
                if let Err(error) = this.rest.typing(&channel_id).await {
                    tracing::debug!(channel_id, %error, "cannot show typing on Discord");
                }
                tokio::select! {
                    () = this.ctx.stop.cancelled() => return,
                    () = tokio::time::sleep(TYPING_EVERY) => {}
                }
                match this.ctx.state.store.run(&run_id).await {
                    Ok(Some(run))
                        if matches!(
                            run.state,
                            keel_core::AgentState::Queued | keel_core::AgentState::Running
                        ) => {}
                    _ => return,
                }
            }
        });
    }
}
