//! `keel serve`'s metrics beyond the API's own `/metrics`: the channels whose outbox backlog is
//! reported, and with `[telemetry] metrics_bind` a listener serving `/metrics` without a key.

use std::path::Path;

use anyhow::Context;
use keel_server::AppState;
use keel_server::metrics::route::KeylessMetrics;

/// Tells the metrics which `channels` run, and starts the keyless `/metrics` listener when
/// `[telemetry] metrics_bind` is set (printing its address).
pub async fn start(
    config_file: Option<&Path>,
    home: &Path,
    state: &AppState,
    channels: Option<&[String]>,
) -> anyhow::Result<Option<KeylessMetrics>> {
    if let Some(channels) = channels {
        state.engine.metrics().set_channels(channels);
    }
    let telemetry = keel_config::telemetry_settings::load(config_file, home)?;
    let Some(bind) = telemetry.metrics_bind else {
        return Ok(None);
    };
    let listener = KeylessMetrics::start(bind, state.clone())
        .await
        .with_context(|| format!("cannot listen on {bind} ([telemetry] metrics_bind)"))?;
    println!(
        "keel serve: metrics without a key on http://{}/metrics",
        listener.addr
    );
    Ok(Some(listener))
}
