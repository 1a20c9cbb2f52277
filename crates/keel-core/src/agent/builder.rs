//! Building an [`Agent`]: provider and fallbacks, tools, store, event sinks, limits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Agent, AgentError};
use crate::budget::{Budgets, PriceTable};
use crate::clock::Clock;
use crate::event::EventSink;
use crate::extension::{Extension, ExtensionSet};
use crate::heartbeat::HeartbeatTicker;
use crate::human::HumanChannel;
use crate::loop_guard::GuardConfig;
use crate::provider::Provider;
use crate::recovery::RetryPolicy;
use crate::registry::ToolRegistry;
use crate::run_settings::{ModelTarget, RunSettings};
use crate::store::Store;
use crate::tool::Tool;
use crate::worker::WorkerProbe;

/// How often a long step shows its worker is alive, by default.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);

/// A change the builder makes to the run settings.
type SettingsChange = Box<dyn FnOnce(&mut RunSettings) + Send>;

/// Builds an [`Agent`].
pub struct AgentBuilder {
    pub(super) human: Option<Arc<dyn HumanChannel>>,
    pub(super) heartbeat_interval: Duration,
    pub(super) reconcile: crate::reconcile::ReconcilePolicy,
    pub(super) provider: Option<Arc<dyn Provider>>,
    pub(super) model: Option<String>,
    pub(super) fallbacks: Vec<(Option<Arc<dyn Provider>>, String)>,
    pub(super) summary: Option<(Option<Arc<dyn Provider>>, String)>,
    pub(super) tools: Vec<Arc<dyn Tool>>,
    pub(super) tool_sources: Vec<Arc<dyn crate::tool_source::ToolSource>>,
    pub(super) store: Option<Arc<dyn Store>>,
    pub(super) sinks: Vec<Arc<dyn EventSink>>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) system_prompt: Option<String>,
    pub(super) max_iterations: Option<u32>,
    pub(super) tool_result_max_chars: Option<usize>,
    pub(super) max_tokens: Option<u32>,
    pub(super) stream: bool,
    pub(super) tune: Vec<SettingsChange>,
    pub(super) workers: Arc<dyn WorkerProbe>,
    pub(super) extensions: Vec<Arc<dyn Extension>>,
    pub(super) clarify: Option<crate::human::ClarifyHandler>,
    pub(super) invalid: Option<String>,
}

impl AgentBuilder {
    /// The model endpoint (required).
    pub fn provider(mut self, provider: Arc<dyn Provider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// The model to ask (required).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Adds a model to the fallback chain, on the primary provider.
    pub fn fallback_model(mut self, model: impl Into<String>) -> Self {
        self.fallbacks.push((None, model.into()));
        self
    }

    /// Adds a model of another provider to the fallback chain.
    pub fn fallback(mut self, provider: Arc<dyn Provider>, model: impl Into<String>) -> Self {
        self.fallbacks.push((Some(provider), model.into()));
        self
    }

    /// Retries and backoff of failed model calls (default: 2 retries per model).
    pub fn retry_policy(self, policy: RetryPolicy) -> Self {
        self.tune(move |s| s.retry = policy)
    }

    /// Loop-guard thresholds.
    pub fn guardrails(self, guard: GuardConfig) -> Self {
        self.tune(move |s| s.guard = guard)
    }

    /// Per-run token and cost limits.
    pub fn budgets(self, budgets: Budgets) -> Self {
        self.tune(move |s| s.budgets = budgets)
    }

    /// Model prices for the cost limit (default: list prices of common models).
    pub fn prices(self, prices: PriceTable) -> Self {
        self.tune(move |s| s.prices = prices)
    }

    /// At this age a run gets one last "summarize what you did" turn.
    pub fn soft_timeout(self, limit: Duration) -> Self {
        self.tune(move |s| s.soft_timeout = Some(limit))
    }

    /// At this age a run stops as `timed_out`.
    pub fn hard_timeout(self, limit: Duration) -> Self {
        self.tune(move |s| s.hard_timeout = Some(limit))
    }

    /// Continuation prompts after an answer cut at `max_tokens` (default 2).
    pub fn max_tokens_recoveries(self, n: u32) -> Self {
        self.tune(move |s| s.max_tokens_recoveries = n)
    }

    /// The highest `request_more_iterations` may raise the iteration limit to (default 50).
    pub fn iteration_cap(self, n: u32) -> Self {
        self.tune(move |s| s.iteration_cap = n)
    }

    /// The waits before each retry of a transient failure of an idempotent tool (default
    /// 0.5 s, 2 s, 8 s); empty turns tool retries off.
    pub fn tool_retry_delays(self, delays: Vec<Duration>) -> Self {
        self.tune(move |s| s.tool_retry_delays = delays)
    }

    /// How long a call waits for approval where a [`HumanChannel`] could answer before it is
    /// denied (default 600 s).
    pub fn approval_timeout(self, limit: Duration) -> Self {
        self.tune(move |s| s.approval_timeout = limit)
    }

    /// How the context is kept under the model's window.
    pub fn context(self, context: crate::context::ContextSettings) -> Self {
        self.tune(move |s| s.context = context)
    }

    /// Overrides the context window of every model.
    pub fn context_window(self, tokens: u32) -> Self {
        self.tune(move |s| s.context.window = Some(tokens))
    }

    /// The model that writes compaction summaries, on the primary provider (default: the run's
    /// current model).
    pub fn summary_model(mut self, model: impl Into<String>) -> Self {
        self.summary = Some((None, model.into()));
        self
    }

    /// The model that writes compaction summaries, on another provider.
    pub fn summary(mut self, provider: Arc<dyn Provider>, model: impl Into<String>) -> Self {
        self.summary = Some((Some(provider), model.into()));
        self
    }

    /// Someone to put `ask_human` questions to (e.g. the chat prompt). Without one, a run that
    /// asks waits as `waiting_on_human` until [`Agent::answer`].
    pub fn human(mut self, human: Arc<dyn HumanChannel>) -> Self {
        self.human = Some(human);
        self.tune(|s| s.human_reachable = true)
    }

    /// How often a long step shows its worker is alive (default 5 s); another process's cancel
    /// request is seen at this pace too.
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self
    }

    /// When a run counts as abandoned: a resume refuses a run whose heartbeat is fresher than
    /// `stale_after` (unless forced).
    pub fn reconcile_policy(mut self, policy: crate::reconcile::ReconcilePolicy) -> Self {
        self.reconcile = policy;
        self
    }

    /// Someone can answer `ask_human` (an interactive chat).
    pub fn human_reachable(self, reachable: bool) -> Self {
        self.tune(move |s| s.human_reachable = reachable)
    }

    fn tune(mut self, change: impl FnOnce(&mut RunSettings) + Send + 'static) -> Self {
        self.tune.push(Box::new(change));
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds tools.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Adds a source of tools that may change while the agent lives (an MCP server's): each
    /// run offers its tools as they are when the run starts.
    pub fn tool_source(mut self, source: Arc<dyn crate::tool_source::ToolSource>) -> Self {
        self.tool_sources.push(source);
        self
    }

    /// Where sessions and runs are kept (required): `keel_store::MemoryStore` for one process,
    /// `keel_store::SqliteStore` to keep them.
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Adds an event sink.
    pub fn event_sink(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.sinks.push(sink);
        self
    }

    /// The clock for timestamps (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The system prompt.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Cap on model calls per run (default 25).
    pub fn max_iterations(mut self, n: u32) -> Self {
        self.max_iterations = Some(n);
        self
    }

    /// Cap on the characters of one tool result (default 8000).
    pub fn tool_result_max_chars(mut self, n: usize) -> Self {
        self.tool_result_max_chars = Some(n);
        self
    }

    /// Cap on output tokens per model call.
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }

    /// Ask for streamed answers (default true).
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// How this process is named on the runs it drives, and how to tell whether another run's
    /// worker is alive (default: [`NoProbe`](crate::worker::NoProbe): heartbeats only).
    pub fn worker_probe(mut self, probe: Arc<dyn WorkerProbe>) -> Self {
        self.workers = probe;
        self
    }

    /// How runs are launched, in the launcher's words, kept on their records (see
    /// [`RunSettings::launch`]). Never a secret.
    pub fn launch(self, launch: impl Into<String>) -> Self {
        let launch = launch.into();
        self.tune(move |s| s.launch = Some(launch))
    }

    /// Marks what the builder was given as wrong: [`build`](Self::build) fails with
    /// `why` as a configuration error (the first one marked). For builder methods of features,
    /// which check what they are given and cannot fail themselves.
    pub fn invalid(mut self, why: impl Into<String>) -> Self {
        self.invalid.get_or_insert_with(|| why.into());
        self
    }

    /// Plugs a feature into every run (see [`crate::extension`]): extensions are asked in the
    /// order they were added.
    pub fn extension(mut self, extension: Arc<dyn Extension>) -> Self {
        self.extensions.push(extension);
        self
    }

    /// Adds a section source to every run's system prompt or turn context, after the base
    /// prompt and the sections added before it (an extension, in the order added).
    pub fn prompt_part(self, part: Arc<dyn crate::prompt_parts::PromptPart>) -> Self {
        self.extension(Arc::new(crate::prompt_parts::PartExtension(part)))
    }

    /// A handler that answers the questions the model asks the human: `clarify` (with its
    /// choices) and `ask_human` (none). It gets the [`Question`](crate::human::Question) and
    /// returns the answer (for choices: a choice's number or text, or free text), or `None`
    /// when it cannot answer now; then the [`human`](Self::human) channel is asked, and
    /// without one the run waits as `waiting_on_human` until [`Agent::answer`].
    pub fn on_clarify<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(crate::human::Question) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Option<String>> + Send + 'static,
    {
        self.clarify = Some(Arc::new(move |question| Box::pin(handler(question))));
        self.tune(|s| s.human_reachable = true)
    }

    /// Checks the configuration and builds the agent.
    pub fn build(self) -> Result<Agent, AgentError> {
        let provider = self
            .provider
            .ok_or_else(|| AgentError::Config("a provider is required".into()))?;
        let model = self
            .model
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| AgentError::Config("a model is required".into()))?;
        if self.heartbeat_interval.is_zero() {
            return Err(AgentError::Config(
                "heartbeat_interval must be above zero".into(),
            ));
        }
        if self.max_iterations == Some(0) {
            return Err(AgentError::Config(
                "max_iterations must be at least 1".into(),
            ));
        }
        if self.tool_result_max_chars == Some(0) {
            return Err(AgentError::Config(
                "tool_result_max_chars must be at least 1".into(),
            ));
        }
        let mut registry = ToolRegistry::new();
        for tool in self.tools {
            registry.register(tool)?;
        }
        for source in self.tool_sources {
            registry.add_source(source);
        }
        let mut settings = RunSettings::new(provider.name(), model);
        settings.system_prompt = self.system_prompt;
        settings.max_tokens = self.max_tokens;
        settings.stream = self.stream;
        if let Some(n) = self.max_iterations {
            settings.max_iterations = n;
        }
        if let Some(n) = self.tool_result_max_chars {
            settings.tool_result_max_chars = n;
        }
        for change in self.tune {
            change(&mut settings);
        }
        if let Some(why) = self.invalid {
            return Err(AgentError::Config(why));
        }
        settings.worker = self.workers.this_process();
        let extensions = ExtensionSet::new(self.extensions);
        check_loop_tools(&extensions, &settings)?;
        settings.extensions = extensions.clone();
        let mut providers: HashMap<String, Arc<dyn Provider>> = HashMap::new();
        providers.insert(provider.name().to_string(), provider.clone());
        for (fallback_provider, model) in self.fallbacks {
            let target = register(&mut providers, &provider, fallback_provider, model)?;
            settings.fallbacks.push(target);
        }
        if let Some((summary_provider, model)) = self.summary {
            let target = register(&mut providers, &provider, summary_provider, model)?;
            settings.context.summary_model = Some(target);
        }
        let store = self.store.ok_or_else(|| {
            AgentError::Config(
                "a store is required (keel_store::MemoryStore keeps runs in memory)".into(),
            )
        })?;
        Ok(Agent {
            providers,
            registry: Arc::new(registry),
            store,
            sinks: self.sinks.into(),
            clock: self.clock,
            settings,
            chat_session: Mutex::new(None),
            human: match self.clarify {
                Some(handler) => Some(Arc::new(crate::human::HandlerChannel {
                    handler,
                    fallback: self.human,
                })),
                None => self.human,
            },
            heartbeat: HeartbeatTicker::new(self.heartbeat_interval),
            reconcile: self.reconcile,
            workers: self.workers,
            extensions,
        })
    }

    /// A context strategy of your own, which decides instead of the built-in one
    /// ([`ContextSettings::strategy`](crate::context::ContextSettings::strategy)) what a run
    /// does when its context crosses the threshold (see [`crate::context_strategy`]). Runs'
    /// checkpoints name it; a run resumed by an agent that registers a strategy of the same
    /// name goes on with it, by one that does not with the built-in one. Call it after
    /// [`context`](Self::context), which replaces all the context settings.
    pub fn context_strategy(
        self,
        strategy: Arc<dyn crate::context_strategy::ContextStrategy>,
    ) -> Self {
        let custom = crate::context_strategy::CustomStrategy::new(strategy);
        self.tune(move |s| s.context.custom = Some(custom))
    }
}

/// Adds `provider` (or the primary one) to `providers` and names the target.
fn register(
    providers: &mut HashMap<String, Arc<dyn Provider>>,
    primary: &Arc<dyn Provider>,
    provider: Option<Arc<dyn Provider>>,
    model: String,
) -> Result<ModelTarget, AgentError> {
    let provider = provider.unwrap_or_else(|| primary.clone());
    let name = provider.name().to_string();
    if let Some(existing) = providers.get(&name)
        && !Arc::ptr_eq(existing, &provider)
    {
        return Err(AgentError::Config(format!(
            "two different providers are named `{name}`; give each its own name"
        )));
    }
    providers.insert(name.clone(), provider);
    Ok(ModelTarget::new(name, model))
}

/// Refuses two extensions that offer a loop tool of the same name (or one named `ask_human`):
/// the model could not tell which one it calls.
fn check_loop_tools(extensions: &ExtensionSet, settings: &RunSettings) -> Result<(), AgentError> {
    let mut names: Vec<(String, &'static str)> = Vec::new();
    for extension in extensions.iter() {
        for spec in extension.loop_tools(settings) {
            if spec.name == crate::agent_tools::ASK_HUMAN {
                return Err(AgentError::Config(format!(
                    "extension `{}` offers `ask_human`, which the loop answers itself",
                    extension.name()
                )));
            }
            if let Some((_, other)) = names.iter().find(|(name, _)| *name == spec.name) {
                return Err(AgentError::Config(format!(
                    "extensions `{other}` and `{}` both offer the tool `{}`",
                    extension.name(),
                    spec.name
                )));
            }
            names.push((spec.name, extension.name()));
        }
    }
    Ok(())
}
