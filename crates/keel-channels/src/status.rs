//! `keel channels status`: each configured channel's state (its last event, its last error, a
//! poller's offset), and its outbox: replies waiting, delivered, given up.

use keel_core::StoreError;
use keel_platform::{DaemonStore, OutboxStats};
use serde::Serialize;

/// One channel, as `keel channels status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChannelStatus {
    /// The channel's name.
    pub channel: String,
    /// Its kept state, by key.
    pub state: Vec<(String, String)>,
    /// Its outbox, counted.
    pub outbox: OutboxStats,
}

/// The status of each channel of `names`.
pub async fn status(
    store: &dyn DaemonStore,
    names: &[&str],
) -> Result<Vec<ChannelStatus>, StoreError> {
    let mut all = Vec::new();
    for name in names {
        let state = store.channel_states(name).await?;
        all.push(ChannelStatus {
            channel: name.to_string(),
            state,
            outbox: store.outbox_stats(name).await?,
        });
    }
    Ok(all)
}
