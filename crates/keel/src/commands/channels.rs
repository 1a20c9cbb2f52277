//! `keel channels status`: the configured channels' state and outboxes, read from the store
//! (the daemon may be running: the store is shared).

use std::path::Path;
use std::process::ExitCode;

use crate::cli::{ChannelsAction, ChannelsArgs};
use crate::config::{ConfigError, keel_home};
use crate::setup;

/// Runs `keel channels`.
pub async fn channels(config_file: Option<&Path>, args: ChannelsArgs) -> anyhow::Result<ExitCode> {
    let home = keel_home()?;
    let (channels, webhooks) = keel_config::serve_settings::load_channels(config_file, &home)?;
    let config =
        keel_channels::ChannelsConfig::from_toml(&channels, &webhooks).map_err(ConfigError)?;
    let ChannelsAction::Status { json } = args.action;
    let names = config.names();
    if names.is_empty() {
        println!(
            "no channels are configured: add a [channels.telegram] (or slack, discord, email) \
             or [[webhooks]] table to keel.toml (see the README's Channels section)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let store = setup::open_store(&home).await?;
    for status in keel_channels::status::status(store.as_ref(), &names).await? {
        if json {
            println!("{}", serde_json::to_string(&status)?);
            continue;
        }
        let state = |key: &str| {
            status
                .state
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let outbox = &status.outbox;
        println!(
            "{}: last event {}, {} repl{} waiting{}, {} delivered, {} given up",
            status.channel,
            state("last_event_at").unwrap_or("never"),
            outbox.pending,
            if outbox.pending == 1 { "y" } else { "ies" },
            outbox.oldest_pending_at.map_or(String::new(), |at| format!(
                " (oldest from {})",
                at.to_rfc3339()
            )),
            outbox.delivered,
            outbox.failed,
        );
        if let Some(error) = state("last_error") {
            println!("  last error: {error}");
        }
        if let Some(error) = &outbox.last_error {
            println!("  last delivery error: {error}");
        }
        for (key, value) in &status.state {
            if !matches!(key.as_str(), "last_event_at" | "last_error") {
                println!("  {key}: {value}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
