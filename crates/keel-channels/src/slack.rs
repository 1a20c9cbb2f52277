//! The slack channel (being built: issue 33).

use crate::runtime::{Context, StartError, Started};

/// Starts the slack channel from its section.
pub async fn start(raw: &toml::Value, ctx: &Context) -> Result<Started, StartError> {
    let _ = raw;
    let _ = ctx;
    Err(StartError::Config(
        "[channels.slack] is not available in this build yet".into(),
    ))
}
