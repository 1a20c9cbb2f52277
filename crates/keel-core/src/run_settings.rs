//! What a run may do: its model chain, limits, budgets and guardrail thresholds. Serializable,
//! so a checkpointed run carries the rules it was started with.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::budget::{Budgets, PriceTable};
use crate::context::ContextSettings;
use crate::loop_guard::GuardConfig;
pub use crate::provider::ModelTarget;
use crate::recovery::RetryPolicy;
use crate::worker::Worker;

/// Default cap on model calls per run.
pub const DEFAULT_MAX_ITERATIONS: u32 = 25;
/// Default hard cap that `request_more_iterations` may raise the limit to.
pub const DEFAULT_ITERATION_CAP: u32 = 50;
/// Default cap on the characters of one tool result.
pub const DEFAULT_TOOL_RESULT_MAX_CHARS: usize = 8000;
/// Default number of continuation prompts after an answer cut at `max_tokens`.
pub const DEFAULT_MAX_TOKENS_RECOVERIES: u32 = 2;

/// What a run may do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Provider of the primary model, for records and events.
    pub provider: String,
    /// The primary model.
    pub model: String,
    /// Models tried in order when the primary fails for good.
    #[serde(default)]
    pub fallbacks: Vec<ModelTarget>,
    /// System prompt sent first on every call.
    pub system_prompt: Option<String>,
    /// Cap on model calls.
    pub max_iterations: u32,
    /// The highest `max_iterations` may be raised to by `request_more_iterations`; at or below
    /// `max_iterations` the tool is not offered.
    #[serde(default = "default_iteration_cap")]
    pub iteration_cap: u32,
    /// Cap on the characters of one tool result; longer results are cut with a marker.
    pub tool_result_max_chars: usize,
    /// Cap on output tokens per call.
    pub max_tokens: Option<u32>,
    /// The session came from an untrusted source: side-effecting tools need a person's approval
    /// (see [`crate::approval`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untrusted: bool,
    /// The conversation's place on a platform, for tools that notify.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<crate::place::PlatformPlace>,
    /// Sampling temperature (a persona's); the provider's default when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Continuation prompts after an answer cut at `max_tokens`.
    #[serde(default = "default_max_tokens_recoveries")]
    pub max_tokens_recoveries: u32,
    /// Ask the provider for streamed answers.
    pub stream: bool,
    /// Retries and backoff for failed model calls.
    #[serde(default)]
    pub retry: RetryPolicy,
    /// Loop-guard thresholds.
    #[serde(default)]
    pub guard: GuardConfig,
    /// Token and cost limits.
    #[serde(default)]
    pub budgets: Budgets,
    /// Model prices, for the cost limit.
    #[serde(default)]
    pub prices: PriceTable,
    /// At this age the run gets one last "summarize what you did" turn.
    #[serde(default, with = "optional_millis")]
    pub soft_timeout: Option<Duration>,
    /// At this age the run stops as `timed_out`.
    #[serde(default, with = "optional_millis")]
    pub hard_timeout: Option<Duration>,
    /// Someone can answer `ask_human` (an interactive chat), so the loop guard may ask them.
    #[serde(default)]
    pub human_reachable: bool,
    /// The caller's permission: tools needing more are not offered (the owner, by default:
    /// whoever runs keel on their own machine).
    #[serde(default = "owner")]
    pub permission: crate::tool::Permission,
    /// The waits before each retry of a transient failure of an idempotent tool.
    #[serde(default = "default_tool_retry_delays", with = "millis_list")]
    pub tool_retry_delays: Vec<Duration>,
    /// How long a call waits for approval where someone could answer (a chat prompt) before
    /// it is denied.
    #[serde(default = "default_approval_timeout", with = "millis")]
    pub approval_timeout: Duration,
    /// How the context is kept under the model's window.
    #[serde(default)]
    pub context: ContextSettings,
    /// How the run was launched, in its launcher's words (the `keel` CLI keeps its launch spec
    /// here as JSON), copied to the run's record so a resume can go on the same way. keel-core
    /// never reads it; it must hold no secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<String>,
    /// The process driving the run, copied to the run's record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<Worker>,
    /// The agent's extensions, in registration order: not in checkpoints (a resumed run gets
    /// the resuming agent's).
    #[serde(skip)]
    pub extensions: crate::extension::ExtensionSet,
    /// What extensions keep with the run's settings, each under its own key (its name): the
    /// rules a feature started the run under, checkpointed with the run's frame so a restored
    /// run goes on under them. Written beside the kernel's own settings, at the top level of
    /// their JSON; the kernel never reads them.
    #[serde(flatten)]
    pub extras: std::collections::BTreeMap<String, serde_json::Value>,
}

/// The waits before each retry of a transient tool failure (seed 001): 0.5 s, 2 s, 8 s.
pub fn default_tool_retry_delays() -> Vec<Duration> {
    vec![
        Duration::from_millis(500),
        Duration::from_secs(2),
        Duration::from_secs(8),
    ]
}

/// How long a call waits for approval at a prompt before it is denied: 600 s.
pub fn default_approval_timeout() -> Duration {
    Duration::from_secs(600)
}

fn default_iteration_cap() -> u32 {
    DEFAULT_ITERATION_CAP
}

fn default_max_tokens_recoveries() -> u32 {
    DEFAULT_MAX_TOKENS_RECOVERIES
}

impl RunSettings {
    /// Defaults for a provider and model.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        RunSettings {
            provider: provider.into(),
            model: model.into(),
            fallbacks: Vec::new(),
            extensions: Default::default(),
            system_prompt: None,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            iteration_cap: DEFAULT_ITERATION_CAP,
            tool_result_max_chars: DEFAULT_TOOL_RESULT_MAX_CHARS,
            max_tokens: None,
            temperature: None,
            untrusted: false,
            place: None,
            max_tokens_recoveries: DEFAULT_MAX_TOKENS_RECOVERIES,
            stream: true,
            retry: RetryPolicy::default(),
            guard: GuardConfig::default(),
            budgets: Budgets::default(),
            prices: PriceTable::default(),
            soft_timeout: None,
            hard_timeout: None,
            human_reachable: false,
            permission: crate::tool::Permission::Owner,
            tool_retry_delays: default_tool_retry_delays(),
            approval_timeout: default_approval_timeout(),
            context: ContextSettings::default(),
            launch: None,
            worker: None,
            extras: Default::default(),
        }
    }

    /// The primary model followed by the fallbacks.
    pub fn chain(&self) -> Vec<ModelTarget> {
        let mut chain = vec![ModelTarget::new(self.provider.clone(), self.model.clone())];
        chain.extend(self.fallbacks.iter().cloned());
        chain
    }
}

mod optional_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(value.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

mod millis_list {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &[Duration], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(value.iter().map(|d| d.as_millis() as u64))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
        Ok(Vec::<u64>::deserialize(d)?
            .into_iter()
            .map(Duration::from_millis)
            .collect())
    }
}

fn owner() -> crate::tool::Permission {
    crate::tool::Permission::Owner
}
