//! Starting the configured channels inside `keel serve`: each platform's receiving side (a
//! poller, a gateway, HTTP routes under the daemon) and a [`Courier`] for its outbox, all
//! stopped together when the daemon stops.

use std::sync::Arc;

use axum::Router;
use chrono::Utc;
use keel_server::AppState;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ChannelsConfig;
use crate::courier::{Courier, CourierPolicy};
use crate::decide::Decider;
use crate::intake::Intake;
use crate::outlet::Outlet;

/// Why the channels could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A section is wrong or a secret is missing; the text says which and how.
    #[error("{0}")]
    Config(String),
    /// Something else (the HTTP client, the store).
    #[error("{0}")]
    Other(String),
}

/// What every channel is given: the daemon, the intake and decider over it, an HTTP client,
/// the stop signal and a tracker for its tasks.
#[derive(Clone)]
pub struct Context {
    /// The daemon's state: store, engine, hub, inbox.
    pub state: AppState,
    /// Turns events into runs.
    pub intake: Arc<Intake>,
    /// Hands button presses to the engine.
    pub decider: Arc<Decider>,
    /// The HTTP client for platform APIs (TLS set up as the providers' is).
    pub http: reqwest::Client,
    /// Cancelled when the daemon stops.
    pub stop: CancellationToken,
    /// Tasks the daemon waits for when it stops.
    pub tasks: TaskTracker,
    /// How couriers pace themselves.
    pub courier: CourierPolicy,
}

impl Context {
    /// Notes an event received on `channel`, for `keel channels status`.
    pub async fn note_event(&self, channel: &str) {
        self.note(channel, "last_event_at", &Utc::now().to_rfc3339())
            .await;
    }

    /// Notes an error of `channel` (logged too), for `keel channels status`.
    pub async fn note_error(&self, channel: &str, error: &str) {
        tracing::error!(channel, error, "channel error");
        self.note(
            channel,
            "last_error",
            &format!("{}: {error}", Utc::now().to_rfc3339()),
        )
        .await;
    }

    /// Notes a value of `channel`'s state.
    pub async fn note(&self, channel: &str, key: &str, value: &str) {
        if let Err(error) = self
            .state
            .store
            .set_channel_state(channel, key, value, Utc::now())
            .await
        {
            tracing::error!(channel, %error, "cannot keep a channel's state");
        }
    }

    /// Starts a courier for `outlet`'s outbox.
    pub fn deliver_with(&self, outlet: Arc<dyn Outlet>) {
        let courier = Courier::new(self.state.store.clone(), outlet, self.courier.clone());
        let (stop, tasks) = (self.stop.clone(), self.tasks.clone());
        self.tasks.spawn(courier.run(stop, tasks));
    }
}

/// What a started platform gives back.
#[derive(Default)]
pub struct Started {
    /// Its HTTP routes (events, interactions, inbound mail, hooks), served by the daemon
    /// without its API keys: each checks its platform's signature itself.
    pub routes: Option<Router>,
}

/// The running channels.
pub struct Running {
    /// Every channel's HTTP routes, to serve beside the API.
    pub routes: Router,
    /// The channels' names, started.
    pub names: Vec<String>,
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Running {
    /// Stops every channel and waits for its tasks (a send under way finishes).
    pub async fn shutdown(self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// A webhook's `deliver` must name a configured channel: its replies would wait for ever.
fn check_deliveries(config: &ChannelsConfig) -> Result<(), StartError> {
    let configured = config.names();
    for hook in &config.webhooks {
        let channel = hook
            .get("deliver")
            .and_then(|deliver| deliver.get("channel"))
            .and_then(|channel| channel.as_str());
        if let Some(channel) = channel
            && !configured.contains(&channel)
        {
            let name = hook.get("name").and_then(|n| n.as_str()).unwrap_or("?");
            return Err(StartError::Config(format!(
                "[[webhooks]] `{name}` delivers to `{channel}`, which is not configured: add a \
                 [channels.{channel}] table, or remove its `deliver`"
            )));
        }
    }
    Ok(())
}

/// Starts every channel `config` names, on the daemon's `state`.
pub async fn start(state: AppState, config: &ChannelsConfig) -> Result<Running, StartError> {
    check_deliveries(config)?;
    let http = keel_providers::build_client(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_secs(90),
    )
    .map_err(|e| StartError::Other(e.to_string()))?;
    let ctx = Context {
        intake: Arc::new(
            Intake::new(
                state.store.clone(),
                state.engine.clone(),
                state.inbox.clone(),
            )
            .with_lane_policies(config.lane_policies.clone()),
        ),
        decider: Arc::new(Decider::new(state.store.clone(), state.engine.clone())),
        state,
        http,
        stop: CancellationToken::new(),
        tasks: TaskTracker::new(),
        courier: config.courier.clone(),
    };
    let mut routes = Router::new();
    let mut names = Vec::new();
    let mut add = |name: &str, started: Started| {
        names.push(name.to_string());
        if let Some(more) = started.routes {
            routes = std::mem::take(&mut routes).merge(more);
        }
    };
    if let Some(raw) = &config.telegram {
        add("telegram", crate::telegram::start(raw, &ctx).await?);
    }
    if let Some(raw) = &config.slack {
        add("slack", crate::slack::start(raw, &ctx).await?);
    }
    if let Some(raw) = &config.discord {
        add("discord", crate::discord::start(raw, &ctx).await?);
    }
    if let Some(raw) = &config.email {
        add("email", crate::email::start(raw, &ctx).await?);
    }
    if !config.webhooks.is_empty() {
        add(
            "webhooks",
            crate::webhook::start(&config.webhooks, &ctx).await?,
        );
    }
    Ok(Running {
        routes,
        names,
        stop: ctx.stop,
        tasks: ctx.tasks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_must_deliver_to_a_configured_channel() {
        let hooks: Vec<toml::Value> = vec![
            toml::from_str(
                "name = \"deploys\"\ndeliver = { channel = \"telegram\", chat = \"1\" }",
            )
            .unwrap(),
        ];
        let none = ChannelsConfig::from_toml(&toml::Table::new(), &hooks).unwrap();
        let error = check_deliveries(&none).unwrap_err().to_string();
        assert!(
            error.contains("`deploys` delivers to `telegram`"),
            "{error}"
        );
        let channels: toml::Table = toml::from_str("[telegram]\ntoken_env = \"T\"").unwrap();
        let with = ChannelsConfig::from_toml(&channels, &hooks).unwrap();
        assert!(check_deliveries(&with).is_ok());
    }
}
