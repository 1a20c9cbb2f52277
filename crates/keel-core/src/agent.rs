//! The library entry point for people who embed keel: build an [`Agent`] from a provider, a
//! model, tools, a store and event sinks, then [`Agent::chat`] or [`Agent::run`].

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, SystemClock};
use crate::driver::Driver;
use crate::event::{Emitter, EventSink};
use crate::memory_store::MemoryStore;
use crate::message::Message;
use crate::provider::{Provider, Usage};
use crate::registry::{RegistryError, ToolRegistry};
use crate::run::{Run, RunSettings, ToolCallReport};
use crate::state::{AgentState, ErrorReason};
use crate::store::{Store, StoreError};
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
        }
    }
}

/// Builds an [`Agent`].
pub struct AgentBuilder {
    provider: Option<Arc<dyn Provider>>,
    model: Option<String>,
    tools: Vec<Arc<dyn Tool>>,
    store: Option<Arc<dyn Store>>,
    sinks: Vec<Arc<dyn EventSink>>,
    clock: Arc<dyn Clock>,
    system_prompt: Option<String>,
    max_iterations: Option<u32>,
    tool_result_max_chars: Option<usize>,
    max_tokens: Option<u32>,
    stream: bool,
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
        Ok(Agent {
            provider,
            registry: Arc::new(registry),
            store: self.store.unwrap_or_else(|| Arc::new(MemoryStore::new())),
            sinks: self.sinks.into(),
            clock: self.clock,
            settings,
            chat_session: Mutex::new(None),
        })
    }
}

/// A configured agent: runs messages through the loop. Cheap to share behind an `Arc`; runs
/// on different sessions may proceed concurrently.
pub struct Agent {
    provider: Arc<dyn Provider>,
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
        let history: Vec<Message> = self
            .store
            .messages(&session_id)
            .await?
            .into_iter()
            .map(|stored| stored.message)
            .collect();
        let mut run = Run::new(
            run_id.clone(),
            session_id.clone(),
            self.settings.clone(),
            self.registry.specs(),
            history,
            Message::user(request.message),
            self.clock.now(),
        );
        let emitter = Emitter::new(self.sinks.clone(), self.clock.clone(), run_id, session_id);
        let cancel = request.cancel.unwrap_or_default();
        let driver = Driver {
            provider: self.provider.as_ref(),
            registry: &self.registry,
            store: self.store.as_ref(),
            emitter: &emitter,
            clock: self.clock.as_ref(),
            cancel: &cancel,
            user_id: request.user_id,
        };
        driver.drive(&mut run).await?;
        Ok(RunReport::from_run(&run))
    }

    /// The store this agent writes to.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The settings every run starts from.
    pub fn settings(&self) -> &RunSettings {
        &self.settings
    }
}
