//! The library entry point for people who embed keel: build an [`Agent`] from a provider, a
//! model, tools, a store and event sinks, then [`Agent::chat`] or [`Agent::run`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::budget::{Budgets, PriceTable};
use crate::clock::{Clock, SystemClock};
use crate::driver::Driver;
use crate::event::{Emitter, EventSink};
use crate::loop_guard::GuardConfig;
use crate::memory_store::MemoryStore;
use crate::message::Message;
use crate::provider::{Provider, Usage};
use crate::recovery::RetryPolicy;
use crate::registry::{RegistryError, ToolRegistry};
use crate::run::{Run, ToolCallReport};
use crate::run_settings::{ModelTarget, RunSettings};
use crate::state::{AgentState, ErrorReason};
use crate::store::{Store, StoreError, usage_month};
use crate::tool::Tool;

/// Why an agent could not be built or a run could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The builder was missing something or got something invalid.
    #[error("agent configuration: {0}")]
    Config(String),
    /// A tool could not be registered.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The store failed; the run could not be recorded.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `chat` ended without a final answer; the report says how it ended.
    #[error("the run ended as {} without a final answer: {}", .0.state, .0.error.as_deref().unwrap_or("no detail"))]
    Incomplete(Box<RunReport>),
}

/// One message to run, and how.
#[derive(Clone, Debug, Default)]
pub struct RunRequest {
    /// The user's message.
    pub message: String,
    /// The conversation to continue; a new one when `None`.
    pub session_id: Option<String>,
    /// The user, when known.
    pub user_id: Option<String>,
    /// Cancel the run by cancelling this token.
    pub cancel: Option<CancellationToken>,
}

impl RunRequest {
    /// A request to run `message` in a new conversation.
    pub fn new(message: impl Into<String>) -> Self {
        RunRequest {
            message: message.into(),
            ..Self::default()
        }
    }

    /// Continue the conversation `session_id`.
    pub fn session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// The run is for `user_id`: their monthly token budget applies and their usage is counted.
    pub fn user(mut self, user_id: impl Into<String>) -> Self {
        self.user_id = Some(user_id.into());
        self
    }

    /// Cancel the run when `token` is cancelled.
    pub fn cancel_token(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }
}

/// What a run did, as the `keel run --json` object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Run id.
    pub run_id: String,
    /// Conversation id.
    pub session_id: String,
    /// Terminal state.
    pub state: AgentState,
    /// Why it ended in `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ErrorReason>,
    /// The final answer, or the loop's note when it stopped without one.
    pub final_text: Option<String>,
    /// What went wrong, when something did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Model calls made.
    pub iterations: u32,
    /// The model that answered last (or the one asked for, when none answered).
    pub model: String,
    /// Every tool call with its outcome.
    pub tool_calls: Vec<ToolCallReport>,
    /// Tokens used.
    pub usage: Usage,
    /// Dollars spent, at the price table's prices (0 for models without a price).
    #[serde(default)]
    pub cost: f64,
}

impl RunReport {
    fn from_run(run: &Run) -> Self {
        RunReport {
            run_id: run.id().to_string(),
            session_id: run.session_id().to_string(),
            state: run.state(),
            reason: run.reason(),
            final_text: run.final_text().map(str::to_string),
            error: run.error().map(str::to_string),
            iterations: run.iteration(),
            model: run
                .model_used()
                .unwrap_or(&run.settings().model)
                .to_string(),
            tool_calls: run.tool_calls().to_vec(),
            usage: run.usage(),
            cost: run.cost(),
        }
    }
}

/// A change the builder makes to the run settings.
type SettingsChange = Box<dyn FnOnce(&mut RunSettings) + Send>;

/// Builds an [`Agent`].
pub struct AgentBuilder {
    provider: Option<Arc<dyn Provider>>,
    model: Option<String>,
    fallbacks: Vec<(Option<Arc<dyn Provider>>, String)>,
    summary: Option<(Option<Arc<dyn Provider>>, String)>,
    tools: Vec<Arc<dyn Tool>>,
    store: Option<Arc<dyn Store>>,
    sinks: Vec<Arc<dyn EventSink>>,
    clock: Arc<dyn Clock>,
    system_prompt: Option<String>,
    max_iterations: Option<u32>,
    tool_result_max_chars: Option<usize>,
    max_tokens: Option<u32>,
    stream: bool,
    tune: Vec<SettingsChange>,
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

    /// Where sessions and runs are kept (default: in memory).
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

    /// Checks the configuration and builds the agent.
    pub fn build(self) -> Result<Agent, AgentError> {
        let provider = self
            .provider
            .ok_or_else(|| AgentError::Config("a provider is required".into()))?;
        let model = self
            .model
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| AgentError::Config("a model is required".into()))?;
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
        Ok(Agent {
            providers,
            registry: Arc::new(registry),
            store: self.store.unwrap_or_else(|| Arc::new(MemoryStore::new())),
            sinks: self.sinks.into(),
            clock: self.clock,
            settings,
            chat_session: Mutex::new(None),
        })
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

/// A configured agent: runs messages through the loop. Cheap to share behind an `Arc`; runs
/// on different sessions may proceed concurrently.
pub struct Agent {
    providers: HashMap<String, Arc<dyn Provider>>,
    registry: Arc<ToolRegistry>,
    store: Arc<dyn Store>,
    sinks: Arc<[Arc<dyn EventSink>]>,
    clock: Arc<dyn Clock>,
    settings: RunSettings,
    chat_session: Mutex<Option<String>>,
}

impl Agent {
    /// Starts building an agent.
    pub fn builder() -> AgentBuilder {
        AgentBuilder {
            provider: None,
            model: None,
            tools: Vec::new(),
            store: None,
            sinks: Vec::new(),
            clock: Arc::new(SystemClock),
            system_prompt: None,
            max_iterations: None,
            tool_result_max_chars: None,
            max_tokens: None,
            stream: true,
            fallbacks: Vec::new(),
            summary: None,
            tune: Vec::new(),
        }
    }

    /// Sends `text` in this agent's own conversation and returns the final answer. Successive
    /// calls share history.
    pub async fn chat(&self, text: &str) -> Result<String, AgentError> {
        let session = self.chat_session.lock().ok().and_then(|s| s.clone());
        let mut request = RunRequest::new(text);
        request.session_id = session;
        let report = self.run(request).await?;
        if let Ok(mut session) = self.chat_session.lock() {
            *session = Some(report.session_id.clone());
        }
        match (report.state, &report.final_text) {
            (AgentState::Completed, Some(text)) => Ok(text.clone()),
            _ => Err(AgentError::Incomplete(Box::new(report))),
        }
    }

    /// Runs one message through the loop and reports what happened. Model and tool failures
    /// end the run in a terminal state described by the report; only a store failure is an
    /// `Err`.
    pub async fn run(&self, request: RunRequest) -> Result<RunReport, AgentError> {
        let session_id = request
            .session_id
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let run_id = uuid::Uuid::now_v7().to_string();
        self.store.ensure_session(&session_id).await?;
        // Only the live context: what the latest compaction summary replaced stays in the store.
        let history = self.store.context_messages(&session_id).await?;
        let month = usage_month(self.clock.now());
        let mut settings = self.settings.clone();
        let over_budget = match &request.user_id {
            Some(user) => {
                self.apply_monthly_budget(user, &month, &mut settings)
                    .await?
            }
            None => None,
        };
        let mut run = Run::new(
            run_id.clone(),
            session_id.clone(),
            settings,
            self.registry.specs(),
            history,
            Message::user(request.message),
            self.clock.now(),
        );
        let emitter = Emitter::new(self.sinks.clone(), self.clock.clone(), run_id, session_id);
        let cancel = request.cancel.unwrap_or_default();
        let driver = Driver {
            providers: &self.providers,
            registry: &self.registry,
            store: self.store.as_ref(),
            emitter: &emitter,
            clock: self.clock.as_ref(),
            cancel: &cancel,
            user_id: request.user_id.clone(),
        };
        match over_budget {
            // The message is still stored, and the run says why it did not start.
            Some(message) => {
                run.refuse_over_budget(message);
                driver.settle(&mut run).await?;
            }
            None => driver.drive(&mut run).await?,
        }
        if let Some(user) = &request.user_id
            && run.usage().total() > 0
        {
            self.store.add_usage(user, &month, run.usage()).await?;
        }
        Ok(RunReport::from_run(&run))
    }

    /// Checks `user`'s monthly token budget: returns why the run may not start, or caps the
    /// run's token budget at what the month has left.
    async fn apply_monthly_budget(
        &self,
        user: &str,
        month: &str,
        settings: &mut RunSettings,
    ) -> Result<Option<String>, AgentError> {
        let Some(budget) = self
            .store
            .user(user)
            .await?
            .and_then(|record| record.monthly_token_budget)
        else {
            return Ok(None);
        };
        let used = self.store.monthly_usage(user, month).await?.total();
        if used >= budget {
            return Ok(Some(format!(
                "user `{user}` has used {used} of their {budget} tokens for {month}; the budget \
                 resets at the start of next month"
            )));
        }
        let left = budget - used;
        settings.budgets.token_budget =
            Some(settings.budgets.token_budget.map_or(left, |b| b.min(left)));
        Ok(None)
    }

    /// The store this agent writes to.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The providers, by name.
    pub fn providers(&self) -> &HashMap<String, Arc<dyn Provider>> {
        &self.providers
    }

    /// The settings every run starts from.
    pub fn settings(&self) -> &RunSettings {
        &self.settings
    }
}
