//! The library entry point for people who embed keel: build an [`Agent`] from a provider, a
//! model, tools, a store and event sinks, then [`Agent::chat`] or [`Agent::run`].

use crate::heartbeat::HeartbeatTicker;
use crate::tool::Permission;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, SystemClock};
use crate::driver::Driver;
use crate::event::{Emitter, EventSink};
use crate::extension::{ExtensionSet, FinishedRun, RunStart};
use crate::human::HumanChannel;
use crate::message::Message;
use crate::provider::{Provider, Usage};
use crate::registry::{RegistryError, ToolRegistry};
use crate::run::{RestoreError, Run, ToolCallReport};
use crate::run_settings::RunSettings;
use crate::state::{AgentState, ErrorReason};
use crate::store::{Store, StoreError, usage_month};

mod between_turns;
mod builder;
mod child_runs;
mod internal;
mod resume;

pub use between_turns::{BetweenTurns, BetweenTurnsReport};
pub use builder::AgentBuilder;
pub use resume::{ContinueOptions, ResumeOptions, UnsafeCall};

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
    /// A checkpoint could not be turned back into a run.
    #[error(transparent)]
    Restore(#[from] RestoreError),
    /// The run cannot be resumed or answered in its state; the message says why and what to do.
    #[error("{0}")]
    NotResumable(String),
    /// The answer does not fit the question (empty, or a choice number that is no choice's);
    /// the run still waits for one.
    #[error("{0}")]
    InvalidAnswer(String),
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
    /// The run's id, when the caller chose it (e.g. to claim the session's lane first); a new
    /// one when `None`.
    pub run_id: Option<String>,
    /// What the incoming-message pipeline chose: persona settings, allowed tool modules, the
    /// session's trust and place.
    pub options: crate::run_options::RunOptions,
    /// Messages the user sends while the run works, which join it before its next model call
    /// (see [`crate::steering`]); without it they wait for their own run.
    pub steering: Option<Arc<dyn crate::steering::Steering>>,
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
    /// The question the run waits on, when it waits for a human.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The choices that question offers (`clarify`), in order; empty for a free answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    /// The tool call the run waits on, when it waits for a person's approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<crate::approval::PendingApproval>,
    /// The files the run's tools produced, returned with the answer (seed 003).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<crate::files::FileRecord>,
}

impl RunReport {
    /// The report of `run`, with the files it produced as `store` keeps them.
    async fn of(run: &Run, store: &dyn Store) -> Result<Self, StoreError> {
        let mut report = RunReport::from_run(run);
        report.files = store.run_files(run.id()).await?;
        Ok(report)
    }

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
            question: run.question().map(str::to_string),
            choices: run.question_choices().to_vec(),
            approval: run.pending_approval().cloned(),
            files: Vec::new(),
        }
    }
}

/// A configured agent: runs messages through the loop. Cheap to share behind an `Arc`; runs
/// on different sessions may proceed concurrently.
pub struct Agent {
    human: Option<Arc<dyn HumanChannel>>,
    heartbeat: HeartbeatTicker,
    reconcile: crate::reconcile::ReconcilePolicy,
    workers: Arc<dyn crate::worker::WorkerProbe>,
    providers: HashMap<String, Arc<dyn Provider>>,
    registry: Arc<ToolRegistry>,
    store: Arc<dyn Store>,
    sinks: Arc<[Arc<dyn EventSink>]>,
    clock: Arc<dyn Clock>,
    settings: RunSettings,
    chat_session: Mutex<Option<String>>,
    /// The features plugged into every run, in order.
    extensions: ExtensionSet,
}

impl Agent {
    /// Starts building an agent.
    pub fn builder() -> AgentBuilder {
        AgentBuilder {
            provider: None,
            model: None,
            tools: Vec::new(),
            tool_sources: Vec::new(),
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
            human: None,
            heartbeat_interval: builder::DEFAULT_HEARTBEAT_INTERVAL,
            reconcile: crate::reconcile::ReconcilePolicy::default(),
            workers: Arc::new(crate::worker::NoProbe),
            extensions: Vec::new(),
            clarify: None,
            invalid: None,
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
        let run_id = request
            .run_id
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        self.store.ensure_session(&session_id).await?;
        // A new session a run for a user starts is that user's (their searches find it).
        if let Some(user) = &request.user_id {
            self.store.adopt_session(&session_id, user).await?;
        }
        let session = self.store.session(&session_id).await?;
        let stored_before = session.as_ref().map_or(0, |session| session.message_count);
        // Only the live context: what the latest compaction summary replaced stays in the store.
        let history = self.store.context_messages(&session_id).await?;
        let (mut settings, tools, over_budget) = self
            .frame(
                &session_id,
                session.as_ref(),
                request.user_id.as_deref(),
                &request.options,
            )
            .await?;
        // The prompt the run is checked against on resume is the configured one, before the
        // persona's and the per-message sections.
        let base_prompt_hash = crate::run::prompt_hash(self.settings.system_prompt.as_deref());
        let mut journal = self.store.journal(&session_id).await?.unwrap_or_default();
        let mut start = RunStart {
            session_id: &session_id,
            session: session.as_ref(),
            user_id: request.user_id.as_deref(),
            message: &request.message,
            model_named: request.options.model.is_some(),
            settings: &mut settings,
            tools: &tools,
            journal: &mut journal,
            journal_changed: false,
            turn_sections: Vec::new(),
            events: Vec::new(),
            opening_events: Vec::new(),
            refusal: over_budget,
        };
        for extension in self.extensions.iter() {
            extension.prepare(&mut start).await;
        }
        let RunStart {
            journal_changed,
            turn_sections,
            events: shaped,
            opening_events,
            refusal: over_budget,
            ..
        } = start;
        let mut run = Run::new(
            run_id.clone(),
            session_id.clone(),
            settings,
            tools,
            history,
            Message::user(request.message),
            self.clock.now(),
        )
        .with_journal(journal)
        .with_user(request.user_id.clone())
        .with_prompt_hash(base_prompt_hash)
        .with_opening_events(opening_events);
        if journal_changed {
            run = run.with_journal_changed();
        }
        for section in turn_sections {
            run = run.with_turn_sections(section);
        }
        let emitter = self.emitter(&run_id, &session_id);
        for kind in shaped {
            emitter.emit(kind);
        }
        let cancel = request.cancel.unwrap_or_default();
        let mut driver = self.driver(&emitter, &cancel, request.user_id.clone());
        driver.steering = request.steering.as_deref();
        match over_budget {
            // The message is still stored, and the run says why it did not start.
            Some(message) => {
                run.refuse_over_budget(message);
                driver.settle(&mut run).await?;
            }
            None => {
                driver.drive(&mut run).await?;
                self.learn_from(&run, stored_before, &emitter).await;
            }
        }
        Ok(RunReport::of(&run, self.store.as_ref()).await?)
    }

    /// The settings and tools a run of `session_id` for `user_id` starts from, with what the
    /// incoming-message pipeline chose (`options`), before the extensions prepare it; and why
    /// it may not start (the user's monthly budget is spent).
    async fn frame(
        &self,
        session_id: &str,
        session: Option<&crate::store::SessionInfo>,
        user_id: Option<&str>,
        options: &crate::run_options::RunOptions,
    ) -> Result<(RunSettings, Vec<crate::tool::ToolSpec>, Option<String>), AgentError> {
        let month = usage_month(self.clock.now());
        let mut settings = self.settings.clone();
        // A run for no user is the machine's owner's; a stored user's is at their level, on
        // their budget; an unknown user is a guest.
        let (over_budget, permission) = match user_id {
            Some(user) => {
                let record = self.store.user(user).await?;
                let over = self
                    .apply_monthly_budget(user, record.as_ref(), &month, &mut settings)
                    .await?;
                (over, record.map_or(Permission::Guest, |r| r.permission))
            }
            None => (None, Permission::Owner),
        };
        settings.permission = permission;
        options.apply(&mut settings);
        // A session is untrusted by its kind (`email_trigger`, `event_…`) or as stored.
        settings.untrusted = settings.untrusted
            || crate::session_kind::SessionKind::of(session_id).untrusted()
            || session.is_some_and(|session| !session.trusted);
        if settings.place.is_none() {
            settings.place = session.and_then(|session| session.place.clone());
        }
        // A tool source (an MCP server) still starting is waited for, within its own bound.
        self.registry.ready().await;
        let tools: Vec<_> = self
            .registry
            .specs()
            .into_iter()
            .filter(|tool| tool.required_permission <= settings.permission)
            .filter(|tool| options.allows(tool))
            .collect();
        Ok((settings, tools, over_budget))
    }

    /// Hands a run that has ended to the extensions, with the messages it stored. Its outcome
    /// is final: what they do is said in their events, never in the run.
    async fn learn_from(&self, run: &Run, stored_before: u64, emitter: &Emitter) {
        if self.extensions.is_empty() {
            return;
        }
        let messages: Vec<crate::store::StoredMessage> = match self
            .store
            .messages_since(run.session_id(), stored_before + 1)
            .await
        {
            Ok(messages) => messages
                .into_iter()
                .filter(|stored| stored.run_id.as_deref() == Some(run.id()))
                .collect(),
            Err(e) => {
                tracing::warn!(
                    run = run.id(),
                    "extensions cannot read the run's messages: {e}"
                );
                return;
            }
        };
        let finished = FinishedRun {
            user_id: run.user_id(),
            session_id: run.session_id(),
            run_id: run.id(),
            trusted: !run.settings().untrusted,
            messages: &messages,
        };
        for extension in self.extensions.iter() {
            for kind in extension.finished(&finished).await {
                emitter.send(&emitter.stamp(kind));
            }
        }
    }

    /// The emitter of one run: to every sink, keeping events for the store.
    fn emitter(&self, run_id: &str, session_id: &str) -> Emitter {
        Emitter::new(self.sinks.clone(), self.clock.clone(), run_id, session_id).keeping()
    }

    fn driver<'a>(
        &'a self,
        emitter: &'a Emitter,
        cancel: &'a CancellationToken,
        user_id: Option<String>,
    ) -> Driver<'a> {
        Driver {
            providers: &self.providers,
            registry: &self.registry,
            store: self.store.as_ref(),
            emitter,
            clock: self.clock.as_ref(),
            cancel,
            user_id,
            human: self.human.as_deref(),
            heartbeat: &self.heartbeat,
            children: Some(self),
            steering: None,
        }
    }

    /// Checks `user`'s monthly token budget: returns why the run may not start, or caps the
    /// run's token budget at what the month has left.
    async fn apply_monthly_budget(
        &self,
        user: &str,
        record: Option<&crate::store::UserRecord>,
        month: &str,
        settings: &mut RunSettings,
    ) -> Result<Option<String>, AgentError> {
        let Some(budget) = record.and_then(|record| record.monthly_token_budget) else {
            return Ok(None);
        };
        let used = self.store.monthly_usage(user, month).await?.total();
        if let Some(spent) = crate::token_log::budget_spent(user, used, budget, self.clock.now()) {
            return Ok(Some(spent));
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

    /// The modules of the agent's tools, sorted, each once: what a persona's
    /// `allowed_modules` may name.
    pub fn tool_modules(&self) -> Vec<String> {
        self.registry.modules()
    }

    /// The settings every run starts from.
    pub fn settings(&self) -> &RunSettings {
        &self.settings
    }
}
