//! What a caller sets over the configuration for one invocation (the CLI's agent flags; the
//! daemon sets none). Plain data: parsing flags is the binary's business.

use std::path::PathBuf;

/// Settings given for one invocation, each winning over the environment and keel.toml.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// Provider name: built in, or a `[providers.NAME]`.
    pub provider: Option<String>,
    /// Wire API: `openai-chat`, `openai-responses` or `anthropic-messages`.
    pub api: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Base URL of the provider's API.
    pub base_url: Option<String>,
    /// Cap on model calls per turn.
    pub max_iterations: Option<u32>,
    /// Directory the file tools are confined to.
    pub workspace: Option<PathBuf>,
    /// Ask for whole answers instead of streams.
    pub no_stream: bool,
    /// Models to fall back to, in order.
    pub fallback_models: Vec<String>,
    /// Seconds before the "summarize what you did" turn.
    pub soft_timeout: Option<f64>,
    /// Seconds before the run stops as timed_out.
    pub hard_timeout: Option<f64>,
    /// Most tokens the run may use.
    pub token_budget: Option<u64>,
    /// Most dollars the run may spend.
    pub cost_limit: Option<f64>,
    /// The user the run is for.
    pub user: Option<String>,
    /// The model's context window in tokens.
    pub context_window: Option<u32>,
}
