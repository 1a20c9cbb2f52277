//! The webhook channel (being built: issue 33).

use crate::runtime::{Context, StartError, Started};

/// Starts the webhook channel from its section.
pub async fn start(raws: &[toml::Value], ctx: &Context) -> Result<Started, StartError> {
    let _ = raws;
    let _ = ctx;
    Err(StartError::Config(
        "[webhooks] is not available in this build yet".into(),
    ))
}
