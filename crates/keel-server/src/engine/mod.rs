//! The run engine: every accepted message is a queued run in its conversation's lane; the
//! engine starts each lane's runs one at a time in arrival order (the store's lane claim is the
//! guard across processes), at most `workers` at once, resumes what a dead worker left at start
//! and every few minutes, and stops at the runs' next boundaries on shutdown.

mod approval_timeout;
mod between_turns;
mod control;
mod drive;
mod lanes;
mod policies;
mod report;
mod shared;
mod sink;
mod sizes;
mod steer;
mod submit;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::Utc;
use keel_core::reconcile::{ReconcilePolicy, ReconcileReport, reconcile_with};
use keel_core::worker::{NoProbe, WorkerProbe};
use keel_core::{
    Agent, AgentState, ApprovalDecision, EventSink, LanePolicy, ResumeOptions, RunRecord,
    RunReport, StoreError,
};
use keel_platform::DaemonStore;
use keel_platform::RunFilter;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::live::LiveEvents;
use crate::metrics::Metrics;
pub use control::{Boundaries, RunControl};
use lanes::Lanes;
pub use report::stored_report;
pub use shared::DISPATCH_EVERY;
pub use sizes::EngineSizes;
pub use steer::STEERED;

/// How the engine runs.
#[derive(Clone)]
pub struct EngineOptions {
    /// Runs driven at once; the rest wait in their lanes.
    pub workers: usize,
    /// Runs a lane may hold queued; beyond, a message is refused (429).
    pub queue_limit: usize,
    /// The policy of conversations made without one.
    pub default_lane_policy: LanePolicy,
    /// How long shutdown waits for runs to reach their next boundary.
    pub shutdown_grace: Duration,
    /// How often the reconciler runs after the one at start.
    pub reconcile_every: Duration,
    /// When a run's worker counts as gone, and paused runs' cancel timeout.
    pub reconcile: ReconcilePolicy,
    /// Who this process is, for lane claims (e.g. `host:pid`).
    pub worker: String,
    /// Provider of the runs, for queued runs' records.
    pub provider: String,
    /// Model of the runs, for queued runs' records.
    pub model: String,
    /// Tells whether a run's recorded worker process is still alive.
    pub probe: Arc<dyn WorkerProbe>,
    /// A conversation with a delivery route whose context stands above this share of the
    /// window after a completed run is compacted before its next message (seed 004's gateway
    /// compression); 0 never.
    pub compact_between_turns: f64,
    /// Under `collect`: how long the first message of an idle lane waits for more before its
    /// run starts (restarted by each message).
    pub collect_quiet: Duration,
    /// Under `collect`: the most messages one run carries; beyond, the oldest are left out of
    /// its text (and it says so).
    pub collect_cap: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            workers: 256,
            queue_limit: 16,
            default_lane_policy: LanePolicy::Queue,
            shutdown_grace: Duration::from_secs(30),
            reconcile_every: Duration::from_secs(300),
            reconcile: ReconcilePolicy::default(),
            worker: format!("pid:{}", std::process::id()),
            provider: String::new(),
            model: String::new(),
            probe: Arc::new(NoProbe),
            compact_between_turns: 0.85,
            collect_quiet: Duration::from_millis(1500),
            collect_cap: 20,
        }
    }
}

/// Why the engine refused a request.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The lane's queue is full.
    #[error(
        "conversation `{conversation}` already has {queued} message(s) waiting; try again later"
    )]
    LaneFull {
        /// The conversation.
        conversation: String,
        /// Runs waiting in its lane.
        queued: usize,
        /// Seconds to wait before trying again.
        retry_after: u64,
    },
    /// The conversation's policy is `reject` and its lane is busy: nothing was queued.
    #[error(
        "conversation `{conversation}` is still working on an earlier message; send this one \
         again when it has answered"
    )]
    Busy {
        /// The conversation.
        conversation: String,
        /// The run it is working on, when one runs here.
        running: Option<String>,
    },
    /// The platform event was received before, as this run: nothing was queued.
    #[error("this event was received before, as run `{run_id}`")]
    Duplicate {
        /// The run the first delivery became.
        run_id: String,
    },
    /// The daemon is shutting down.
    #[error("keel serve is shutting down and takes no new runs; try again when it is back")]
    ShuttingDown,
    /// No such run.
    #[error("run `{0}` not found")]
    NotFound(String),
    /// The run is not in a state that allows it.
    #[error("{0}")]
    Conflict(String),
    /// The answer does not fit the question the run waits on (empty, or no choice's number).
    #[error("{0}")]
    InvalidAnswer(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A message accepted: its run, and how many runs are ahead of it in its lane.
#[derive(Clone, Debug, PartialEq)]
pub struct Submitted {
    /// The run the message became.
    pub run_id: String,
    /// Runs ahead of it (the running one and those queued before it).
    pub position: usize,
}

/// What shutdown did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ShutdownReport {
    /// Runs stopped at a boundary, left resumable.
    pub interrupted: usize,
    /// Runs still going when the grace period ended (the reconciler finds them next start).
    pub abandoned: usize,
}

/// How a stored run is driven again.
enum Continue {
    Answer(String),
    /// The decision about the call it names.
    Approve(String, ApprovalDecision),
    Resume(ResumeOptions),
}

/// The engine: lanes, workers, the reconciler. Shared behind an `Arc`.
pub struct Engine {
    store: Arc<dyn DaemonStore>,
    live: Arc<dyn LiveEvents>,
    options: EngineOptions,
    agent: OnceLock<Arc<Agent>>,
    boundaries: Arc<Boundaries>,
    permits: Arc<Semaphore>,
    accepting: AtomicBool,
    lanes: Mutex<Lanes>,
    reports: Mutex<HashMap<String, watch::Sender<Option<RunReport>>>>,
    /// Lane events of runs not started yet, told when their streams open.
    lane_events: Mutex<HashMap<String, keel_core::EventKind>>,
    interrupted: Mutex<usize>,
    tasks: TaskTracker,
    stopping: CancellationToken,
    metrics: Arc<Metrics>,
    /// Wakes the dispatcher of a shared store's queue (see `shared.rs`).
    dispatch: Arc<tokio::sync::Notify>,
}

impl Engine {
    /// An engine on `store` telling `live` about its runs. Give the agent that runs them to
    /// [`Engine::start`]; that agent must have [`Engine::sink`] among its event sinks.
    pub fn new(
        store: Arc<dyn DaemonStore>,
        live: Arc<dyn LiveEvents>,
        options: EngineOptions,
    ) -> Arc<Self> {
        Arc::new(Engine {
            permits: Arc::new(Semaphore::new(options.workers.max(1))),
            store,
            live,
            options,
            agent: OnceLock::new(),
            boundaries: Arc::new(Boundaries::default()),
            accepting: AtomicBool::new(false),
            lanes: Mutex::new(Lanes::new()),
            reports: Mutex::new(HashMap::new()),
            lane_events: Mutex::new(HashMap::new()),
            interrupted: Mutex::new(0),
            tasks: TaskTracker::new(),
            stopping: CancellationToken::new(),
            metrics: Arc::new(Metrics::new()),
            dispatch: Arc::new(tokio::sync::Notify::new()),
        })
    }

    /// The event sink the agent must have, so the engine knows where each run is (and the
    /// daemon's metrics count what the runs do).
    pub fn sink(&self) -> Arc<dyn EventSink> {
        Arc::new(sink::EngineSink {
            boundaries: self.boundaries.clone(),
            metrics: self.metrics.clone(),
        })
    }

    /// The daemon's metrics (`GET /metrics`).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The model runs use when nothing names another (`[model]`'s name; empty when unset).
    pub fn model(&self) -> &str {
        &self.options.model
    }

    /// The policy of conversations made without one.
    pub fn default_lane_policy(&self) -> LanePolicy {
        self.options.default_lane_policy
    }

    /// Starts: one reconciler pass, the runs it can resume without a human, the queued runs;
    /// then the periodic reconciler.
    pub async fn start(self: &Arc<Self>, agent: Arc<Agent>) -> Result<ReconcileReport, StoreError> {
        let _ = self.agent.set(agent);
        let report = self.reconcile_once().await?;
        self.accepting.store(true, Ordering::SeqCst);
        self.resume_abandoned().await?;
        self.watch_waiting_approvals().await?;
        // Shared by many workers, the queue is taken by the dispatcher; alone, it is read back.
        self.start_shared();
        for session in self.sessions_to_read_back().await? {
            let queued = self.store.queued_runs(&session).await?;
            {
                let mut lanes = self.lock_lanes();
                let lane = lanes.entry(session.clone()).or_default();
                for run in queued {
                    if !lane.queued.iter().any(|q| q.run_id == run.run_id) {
                        self.watch_report(&run.run_id);
                        lane.queued.push_back(run);
                    }
                }
            }
            self.pump(&session);
        }
        self.keep_up_metrics();
        let engine = Arc::downgrade(self);
        // Shared, a dead worker's runs are found within half the staleness.
        let every = if self.shared() {
            (self.options.reconcile.stale_after / 2)
                .min(self.options.reconcile_every)
                .max(Duration::from_millis(100))
        } else {
            self.options.reconcile_every
        };
        let stopping = self.stopping.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.tick().await;
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = stopping.cancelled() => return,
                }
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                if let Err(error) = engine.reconcile_once().await {
                    tracing::error!(%error, "the reconciler failed");
                } else if let Err(error) = engine.resume_abandoned().await {
                    tracing::error!(%error, "resuming abandoned runs failed");
                }
            }
        });
        Ok(report)
    }

    /// Whether the engine takes runs (started, not shutting down).
    pub fn accepting(&self) -> bool {
        self.accepting.load(Ordering::SeqCst)
    }

    /// Cancels a run: a queued one at once (it never starts), a running one at its next safe
    /// point. Returns the state it is in now.
    pub async fn cancel(self: &Arc<Self>, run_id: &str) -> Result<AgentState, EngineError> {
        let queued_here = self
            .lock_lanes()
            .values_mut()
            .any(|lane| lane.remove(run_id));
        // Queued here, or queued in the store by another process and not started here.
        let queued_elsewhere = || async {
            self.boundaries.get(run_id).is_none()
                && self
                    .store
                    .run(run_id)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|r| r.state == AgentState::Queued)
        };
        if (queued_here || queued_elsewhere().await)
            && self.store.cancel_queued(run_id, Utc::now()).await?
        {
            self.metrics.runs_ended_queued("queued", 1);
            self.publish_stored(run_id).await;
            return Ok(AgentState::Cancelled);
        }
        if let Some(control) = self.boundaries.get(run_id) {
            control.cancel.cancel();
            self.store.request_cancel(run_id, Utc::now()).await?;
            return Ok(AgentState::Running);
        }
        let run = self
            .store
            .run(run_id)
            .await?
            .ok_or_else(|| EngineError::NotFound(run_id.to_string()))?;
        if run.state.is_terminal() {
            return Err(EngineError::Conflict(format!(
                "run `{run_id}` already ended as {}",
                run.state
            )));
        }
        self.store.request_cancel(run_id, Utc::now()).await?;
        Ok(run.state)
    }

    /// Answers the question a paused run waits on; the run goes on in the background.
    pub async fn answer(self: &Arc<Self>, run_id: &str, text: String) -> Result<(), EngineError> {
        let run = self.continuable(run_id).await?;
        if run.state != AgentState::WaitingOnHuman || run.reason.is_some() {
            return Err(EngineError::Conflict(format!(
                "run `{run_id}` is {} and waits for no answer",
                run.state
            )));
        }
        let choices = report::asked_choices(self.store.as_ref(), run_id).await?;
        if let Err(reason) = keel_core::human::resolve(&text, &choices) {
            return Err(EngineError::InvalidAnswer(reason));
        }
        if !self.continue_run(run.id, run.session_id, Continue::Answer(text)) {
            return Err(EngineError::Conflict(format!("run `{run_id}` is running")));
        }
        Ok(())
    }

    /// Gives a run waiting for approval of tool call `call_id` the decision; it goes on in the
    /// background. A decision about another call than the one it waits on (a stale one) is a
    /// conflict and decides nothing.
    pub async fn approve(
        self: &Arc<Self>,
        run_id: &str,
        call_id: &str,
        decision: ApprovalDecision,
    ) -> Result<(), EngineError> {
        let run = self.continuable(run_id).await?;
        let pending = if run.state == AgentState::WaitingOnHuman && run.reason.is_none() {
            report::pending_approval(self.store.as_ref(), run_id).await?
        } else {
            None
        };
        let Some(pending) = pending else {
            return Err(EngineError::Conflict(format!(
                "run `{run_id}` is {} and waits for no approval",
                if run.state == AgentState::WaitingOnHuman && run.reason.is_none() {
                    "waiting for an answer to its question".to_string()
                } else {
                    run.state.to_string()
                }
            )));
        };
        keel_core::approval::check_decision(run_id, &pending, call_id)
            .map_err(EngineError::Conflict)?;
        let how = Continue::Approve(call_id.to_string(), decision);
        if !self.continue_run(run.id, run.session_id, how) {
            return Err(EngineError::Conflict(format!("run `{run_id}` is running")));
        }
        Ok(())
    }

    /// Resumes a run a dead worker left, or one halted for a decision; it goes on in the
    /// background.
    pub async fn resume(
        self: &Arc<Self>,
        run_id: &str,
        options: ResumeOptions,
    ) -> Result<(), EngineError> {
        let run = self.continuable(run_id).await?;
        let halted = run.state == AgentState::WaitingOnHuman && run.reason.is_some();
        let abandoned = run.state == AgentState::TimedOut && run.resume_available;
        let orphaned = matches!(run.state, AgentState::Running | AgentState::WaitingForTool)
            && keel_core::reconcile::abandoned(
                &run,
                Utc::now(),
                &self.options.reconcile,
                self.options.probe.as_ref(),
            )
            .is_some();
        if !(halted || abandoned || orphaned) {
            return Err(EngineError::Conflict(format!(
                "run `{run_id}` is {} and cannot be resumed",
                run.state
            )));
        }
        if !self.continue_run(run.id, run.session_id, Continue::Resume(options)) {
            return Err(EngineError::Conflict(format!("run `{run_id}` is running")));
        }
        Ok(())
    }

    /// The report of a run once it ends or waits for a human (waiting for it when it is queued
    /// or running here).
    pub async fn wait(&self, run_id: &str) -> Result<RunReport, EngineError> {
        let receiver = self
            .lock_reports()
            .get(run_id)
            .map(watch::Sender::subscribe);
        if let Some(mut receiver) = receiver {
            loop {
                if let Some(report) = receiver.borrow_and_update().clone() {
                    return Ok(report);
                }
                if receiver.changed().await.is_err() {
                    break;
                }
            }
        }
        if self.shared() {
            // Driven by another worker: its report comes through the store.
            return self.report_from_store(run_id).await;
        }
        self.report(run_id).await
    }

    /// The report of a run that ended or waits for a human, from the store.
    pub async fn report(&self, run_id: &str) -> Result<RunReport, EngineError> {
        if let Some(report) = stored_report(self.store.as_ref(), run_id).await? {
            return Ok(report);
        }
        match self.store.run(run_id).await? {
            Some(run) => Err(EngineError::Conflict(format!(
                "run `{run_id}` is {}: its report comes when it ends",
                run.state
            ))),
            None => Err(EngineError::NotFound(run_id.to_string())),
        }
    }

    /// Stops taking runs, asks every run to stop at its next boundary (resumable), and waits
    /// for them up to the grace period.
    pub async fn shutdown(&self) -> ShutdownReport {
        self.accepting.store(false, Ordering::SeqCst);
        self.stopping.cancel();
        let running = self.boundaries.all();
        for control in &running {
            control.stop_at_boundary();
        }
        self.tasks.close();
        let finished = tokio::time::timeout(self.options.shutdown_grace, self.tasks.wait())
            .await
            .is_ok();
        let interrupted = *self.interrupted.lock().unwrap_or_else(|e| e.into_inner());
        ShutdownReport {
            interrupted,
            abandoned: if finished {
                0
            } else {
                self.boundaries.all().len()
            },
        }
    }

    async fn continuable(&self, run_id: &str) -> Result<keel_core::RunRecord, EngineError> {
        if !self.accepting() {
            return Err(EngineError::ShuttingDown);
        }
        if self.boundaries.get(run_id).is_some() {
            return Err(EngineError::Conflict(format!("run `{run_id}` is running")));
        }
        self.store
            .run(run_id)
            .await?
            .ok_or_else(|| EngineError::NotFound(run_id.to_string()))
    }

    async fn reconcile_once(&self) -> Result<ReconcileReport, StoreError> {
        let report = reconcile_with(
            self.store.as_ref(),
            Utc::now(),
            &self.options.reconcile,
            self.options.probe.as_ref(),
        )
        .await?;
        self.metrics
            .reconciled("timed_out", report.timed_out as u64);
        self.metrics
            .reconciled("cancelled", report.cancelled as u64);
        Ok(report)
    }

    /// Folds the metrics' histogram samples into their buckets every
    /// [`crate::metrics::UPKEEP_EVERY`] until the engine stops, so they never pile up between
    /// scrapes.
    fn keep_up_metrics(&self) {
        let metrics = Arc::downgrade(&self.metrics);
        let stopping = self.stopping.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(crate::metrics::UPKEEP_EVERY);
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = stopping.cancelled() => return,
                }
                match metrics.upgrade() {
                    Some(metrics) => metrics.upkeep(),
                    None => return,
                }
            }
        });
    }

    /// Resumes every run a dead worker left at a resumable checkpoint.
    async fn resume_abandoned(self: &Arc<Self>) -> Result<(), StoreError> {
        for run in self.runs_in(AgentState::TimedOut).await? {
            // A sub-agent is resumed by its parent's delegate step, never beside it.
            let child = keel_core::SessionKind::of(&run.session_id).depth() > 0;
            if run.resume_available
                && !child
                && self.boundaries.get(&run.id).is_none()
                && self.continue_run(
                    run.id,
                    run.session_id,
                    Continue::Resume(ResumeOptions::default()),
                )
            {
                self.metrics.reconciled("resumed", 1);
            }
        }
        Ok(())
    }

    /// Every run in `state`, read a page at a time.
    async fn runs_in(&self, state: AgentState) -> Result<Vec<RunRecord>, StoreError> {
        let mut runs: Vec<RunRecord> = Vec::new();
        loop {
            let page = self
                .store
                .find_runs(&RunFilter {
                    state: Some(state),
                    before: runs.last().map(|run| run.id.clone()),
                    limit: 200,
                    ..RunFilter::default()
                })
                .await?;
            if page.is_empty() {
                return Ok(runs);
            }
            runs.extend(page);
        }
    }

    fn watch_report(&self, run_id: &str) {
        self.lock_reports()
            .entry(run_id.to_string())
            .or_insert_with(|| watch::channel(None).0);
    }

    fn lock_lanes(&self) -> std::sync::MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_lane_events(&self) -> std::sync::MutexGuard<'_, HashMap<String, keel_core::EventKind>> {
        self.lane_events.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_reports(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<Option<RunReport>>>> {
        self.reports.lock().unwrap_or_else(|e| e.into_inner())
    }
}
