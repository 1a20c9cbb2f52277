//! The async driver: performs the steps a [`Run`] decides and makes each safe boundary durable
//! — the run record, its new messages, a checkpoint, the tool-call envelope and the step's
//! events, in one store transaction — before anything else happens. All decisions stay in the
//! run; the driver enforces only what needs a clock or the outside world: time limits, the
//! cancel flag (local, or set by another process through the store), the heartbeat, and the
//! human.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::approval::{ApprovalDecision, PendingApproval, session_key};
use crate::checkpoint::ToolCallRecord;
use crate::clock::Clock;
use crate::event::progress::Progress;
use crate::event::{Emitter, EventKind};
use crate::heartbeat::HeartbeatTicker;
use crate::human::HumanChannel;
use crate::message::ToolCall;
use crate::provider::{ChatResponse, DeltaSink, NoDeltas, Provider};
use crate::provider_error::{ProviderError, ProviderErrorKind};
use crate::registry::ToolRegistry;
use crate::run::{BatchSpend, ModelCall, Run, Step};
use crate::session_kind::SessionKind;
use crate::steering::{SteerMessage, Steering};
use crate::store::{Commit, Store, StoreError};
use crate::tool::ToolContext;
use crate::tool_exec::{BatchOutcome, Replay, ToolExecutor};

/// What a driver needs to perform steps.
pub struct Driver<'a> {
    /// The models, by provider name.
    pub providers: &'a HashMap<String, Arc<dyn Provider>>,
    /// The tools.
    pub registry: &'a Arc<ToolRegistry>,
    /// Where boundaries are persisted.
    pub store: &'a dyn Store,
    /// Where events go; it must be keeping (see [`Emitter::keeping`]) for events to be stored.
    pub emitter: &'a Emitter,
    /// Timestamps for records.
    pub clock: &'a dyn Clock,
    /// Fires when the run must stop: set by the caller, or by the driver when another process
    /// asked through the store.
    pub cancel: &'a CancellationToken,
    /// The user, when known.
    pub user_id: Option<String>,
    /// Someone to ask `ask_human` questions; without one, the run waits for `keel answer`.
    pub human: Option<&'a dyn HumanChannel>,
    /// When a long step shows the worker is alive (and learns of a cancel request).
    pub heartbeat: &'a HeartbeatTicker,
    /// Who starts and resumes child runs, for the extensions that answer calls with them
    /// (the agent).
    pub children: Option<&'a dyn crate::child_run::ChildRuns>,
    /// Messages the user sent while the run works, which join it before its next model call
    /// (see [`crate::steering`]).
    pub steering: Option<&'a dyn Steering>,
}

/// Whether cancelling may interrupt a step in flight.
#[derive(Clone, Copy)]
enum Interruptible {
    Yes,
    No,
}

/// How a step that races the clock and the cancel flag ended.
enum Raced<T> {
    Done(T),
    Cancelled,
    HardLimit,
}

/// Where a drive starts: a new run's first step, or a restored run's owed step with what the
/// envelope knows.
pub struct Resume {
    /// The step to perform first.
    pub step: Step,
    /// The envelope of calls made before the worker died.
    pub replay: Replay,
    /// The seq of the latest stored checkpoint.
    pub checkpoint_seq: u32,
}

impl Driver<'_> {
    /// Drives a new run from its first step to a terminal state or a pause for a human. Fails
    /// only when the store does; every other failure ends the run in a terminal state.
    pub async fn drive(&self, run: &mut Run) -> Result<(), StoreError> {
        let step = run.start();
        let resume = Resume {
            step,
            replay: Replay::default(),
            checkpoint_seq: 0,
        };
        self.drive_from(run, resume).await
    }

    /// Drives a run from `resume`.
    pub async fn drive_from(&self, run: &mut Run, resume: Resume) -> Result<(), StoreError> {
        // A resumed run may call a source's tools: wait for the sources to know them.
        self.registry.ready().await;
        let started = Instant::now();
        let soft = run.settings().soft_timeout.map(|limit| started + limit);
        let hard = run.settings().hard_timeout;
        let hard_at = hard.map(|limit| started + limit);
        // The executor's own copy: the run changes as the batch runs.
        let settings = run.settings().clone();
        let context = ToolContext {
            session_id: run.session_id().to_string(),
            run_id: run.id().to_string(),
            call_id: String::new(),
            user_id: self.user_id.clone(),
            untrusted_source: run.settings().untrusted,
            place: run.settings().place.clone(),
            cancel: self.cancel.clone(),
        };
        let spend = BatchSpend::default();
        let executor = ToolExecutor {
            registry: self.registry,
            context: &context,
            max_chars: run.settings().tool_result_max_chars,
            emitter: self.emitter,
            retry_delays: &settings.tool_retry_delays,
            store: self.store,
            clock: self.clock,
            offered: run.tools().clone(),
            settings: &settings,
            children: self.children,
            spend: &spend,
        };
        let Resume {
            mut step,
            replay,
            checkpoint_seq,
        } = resume;
        let mut seq = checkpoint_seq;
        let mut envelope: Vec<ToolCallRecord> = Vec::new();
        let mut progress = Progress::default();
        loop {
            // Messages sent meanwhile join before the model call, and are stored with it.
            let steered = self.steer(run, &mut step).await;
            progress.before_boundary(&step, run, self.emitter);
            // Safe boundary: everything the run decided so far becomes durable before anything
            // else happens.
            seq += 1;
            self.persist(run, seq, &mut envelope).await?;
            if let (Some(steering), false) = (self.steering, steered.is_empty()) {
                // Stored in the run: the source may forget them, unless the run stops here
                // (they are then the source's again, and answered by a run of their own).
                if !self.cancel.is_cancelled() {
                    steering.joined(&steered).await;
                }
            }
            if matches!(step, Step::Finish) {
                return Ok(());
            }
            if self.cancel.is_cancelled() {
                step = run.cancel();
                continue;
            }
            progress.entering(&step, run, self.emitter);
            step = match step {
                Step::Finish => Step::Finish,
                Step::CallModel(call) => {
                    let work = self.call_model(run.iteration(), call, self.emitter, true);
                    match self.race(run.id(), hard_at, Interruptible::Yes, work).await {
                        Raced::Done(result) => {
                            note_soft_limit(run, soft);
                            if let Ok(response) = &result {
                                progress.answered(run, response, self.emitter);
                            }
                            run.on_model_result(result)
                        }
                        // An in-flight call is abandoned at once; no partial reply is kept.
                        Raced::Cancelled => run.cancel(),
                        Raced::HardLimit => run.on_hard_limit(hard.unwrap_or_default()),
                    }
                }
                Step::Summarize(call) => {
                    let work = self.call_model(run.iteration(), call, &NoDeltas, false);
                    match self.race(run.id(), hard_at, Interruptible::Yes, work).await {
                        Raced::Done(result) => run.on_summary(result),
                        Raced::Cancelled => run.cancel(),
                        Raced::HardLimit => run.on_hard_limit(hard.unwrap_or_default()),
                    }
                }
                Step::RunTools(calls) => 'tools: {
                    let steering = self.steering.filter(|_| run.takes_steering());
                    if steering.is_some_and(|steering| steering.pending()) {
                        // The user changed course before any of the batch ran: none of it runs,
                        // and nobody is asked to approve any of it.
                        break 'tools run.on_tool_results(Run::skipped_for_steer(&calls));
                    }
                    // A call that needs a person's yes stops the batch before any of it runs.
                    if let Some(pending) = self.needs_approval(run, &calls).await? {
                        break 'tools run.await_approval(pending);
                    }
                    // On cancel the executor abandons idempotent calls and starts no more;
                    // side-effecting calls in flight finish and are stored, and the flag is seen
                    // at the next boundary. The hard limit ends the batch whatever it waits on.
                    spend.begin(run);
                    let work = executor.run_steered_batch(&calls, &replay, steering);
                    let raced = self.race(run.id(), hard_at, Interruptible::No, work).await;
                    // What the child runs spent counts against this run's budgets.
                    run.add_child_usage(spend.take());
                    match raced {
                        Raced::Done(BatchOutcome::Done(results, records)) => {
                            envelope.extend(records);
                            note_soft_limit(run, soft);
                            run.on_tool_results(results)
                        }
                        Raced::Done(BatchOutcome::Unsafe(call)) => run.halt_resume_unsafe(&call),
                        Raced::Cancelled => run.cancel(),
                        Raced::HardLimit => run.on_hard_limit(hard.unwrap_or_default()),
                    }
                }
                Step::AwaitApproval(pending) => {
                    let Some(human) = self.human else {
                        if SessionKind::of(run.session_id()).depth() > 0 {
                            // A child run's pause would wait for good: its parent goes on
                            // without it and nobody decides its calls. Denied now; the parent
                            // hears what needed approval and can ask for it itself.
                            step = self.decide(run, ApprovalDecision::Deny).await?;
                            continue;
                        }
                        // Paused: the boundary above stored the call; `keel approve` goes on.
                        return Ok(());
                    };
                    let limit = run.settings().approval_timeout;
                    let ask = async {
                        // Nobody deciding within the limit is a denial.
                        tokio::time::timeout(limit, human.approve(&pending))
                            .await
                            .unwrap_or(Some(ApprovalDecision::Deny))
                    };
                    match self.race(run.id(), None, Interruptible::Yes, ask).await {
                        Raced::Done(Some(decision)) => self.decide(run, decision).await?,
                        Raced::Done(None) => return Ok(()),
                        Raced::Cancelled => run.cancel(),
                        Raced::HardLimit => run.on_hard_limit(hard.unwrap_or_default()),
                    }
                }
                Step::AskHuman(question) => {
                    let Some(human) = self.human else {
                        // Paused: the boundary above stored the question; `keel answer` goes on.
                        return Ok(());
                    };
                    let ask = async {
                        if question.choices.is_empty() {
                            human.ask(&question.text).await
                        } else {
                            human.ask_choice(&question.text, &question.choices).await
                        }
                    };
                    match self.race(run.id(), None, Interruptible::Yes, ask).await {
                        Raced::Done(Some(answer)) => run.on_human_answer(answer),
                        Raced::Done(None) => return Ok(()),
                        Raced::Cancelled => run.cancel(),
                        Raced::HardLimit => run.on_hard_limit(hard.unwrap_or_default()),
                    }
                }
            };
        }
    }

    /// Before a model call: takes the messages waiting to join the run, when the run takes
    /// them now, and makes `step` the call with them. Returns what it took.
    async fn steer(&self, run: &mut Run, step: &mut Step) -> Vec<SteerMessage> {
        let Some(steering) = self.steering else {
            return Vec::new();
        };
        let Step::CallModel(call) = &*step else {
            return Vec::new();
        };
        if self.cancel.is_cancelled() || !run.takes_steering() || !steering.pending() {
            return Vec::new();
        }
        let wait = call.wait;
        let taken = steering.take().await;
        if !taken.is_empty() {
            *step = run.on_steer(&taken, wait);
        }
        taken
    }

    /// The first call of `calls` that needs a person's approval and has none: its tool says
    /// so for its arguments, or the session is untrusted and the tool is not an idempotent one
    /// that stays inside the conversation ([`crate::reach::untrusted_need`]). Calls
    /// approved in this run, or matching an `approve_session` of the session, need none; calls
    /// the executor will refuse anyway (unknown tool, bad arguments) are left to it.
    async fn needs_approval(
        &self,
        run: &Run,
        calls: &[ToolCall],
    ) -> Result<Option<PendingApproval>, StoreError> {
        let mut session: Option<Vec<String>> = None;
        for call in calls {
            if run.is_approved(&call.id) || !run.tools().iter().any(|t| t.name == call.name) {
                continue;
            }
            let Ok(prepared) = self.registry.prepare(call) else {
                continue;
            };
            let need = prepared.tool.approval(&prepared.args).or_else(|| {
                run.settings()
                    .untrusted
                    .then(|| crate::reach::untrusted_need(prepared.tool.spec()))
                    .flatten()
            });
            let Some(need) = need else { continue };
            let key = session_key(&call.name, &need.pattern);
            if session.is_none() {
                session = Some(self.store.session_approvals(run.session_id()).await?);
            }
            if session.as_ref().is_some_and(|keys| keys.contains(&key)) {
                continue;
            }
            return Ok(Some(PendingApproval {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments: call.arguments.clone(),
                reason: need.reason,
                pattern: need.pattern,
            }));
        }
        Ok(None)
    }

    /// Applies a decision about the run's pending call: an `approve_session` is kept in the
    /// store first, for the rest of the session.
    pub async fn decide(
        &self,
        run: &mut Run,
        decision: ApprovalDecision,
    ) -> Result<Step, StoreError> {
        if decision == ApprovalDecision::ApproveSession
            && let Some(pending) = run.pending_approval()
        {
            let key = pending.session_key();
            self.store
                .approve_for_session(run.session_id(), &key, self.clock.now())
                .await?;
        }
        Ok(run.on_approval(decision))
    }

    /// Waits out a retry's backoff, then calls the model. `announce`: emit the model events
    /// (the agent's own calls; not compaction summaries).
    pub(crate) async fn call_model(
        &self,
        iteration: u32,
        call: ModelCall,
        sink: &dyn DeltaSink,
        announce: bool,
    ) -> Result<ChatResponse, ProviderError> {
        if !call.wait.is_zero() {
            tokio::time::sleep(call.wait).await;
        }
        let Some(provider) = self.providers.get(&call.provider) else {
            return Err(ProviderError::new(
                ProviderErrorKind::InvalidRequest,
                format!("no provider named `{}` is configured", call.provider),
            ));
        };
        let request = &call.request;
        if announce {
            self.emitter.emit(EventKind::ModelRequest {
                iteration,
                model: request.model.clone(),
                messages: request.messages.len(),
                tools: request.tools.len(),
                stream: request.stream,
            });
        }
        let started = Instant::now();
        let result = provider.chat(request, sink).await;
        if announce {
            match &result {
                Ok(response) => self.emitter.emit(EventKind::ModelResponse {
                    iteration,
                    model: response.model.clone(),
                    stop_reason: response.stop_reason,
                    tool_calls: response.message.tool_calls.len(),
                    usage: response.usage,
                    latency_ms: started.elapsed().as_millis() as u64,
                }),
                Err(error) => self.emitter.emit(EventKind::ModelError {
                    iteration,
                    kind: error.kind,
                    status: error.status,
                    message: error.message.clone(),
                }),
            }
        }
        result
    }

    /// Runs `work` until it finishes, the hard limit passes, or (when interruptible) the run
    /// is cancelled — showing the worker alive meanwhile, and learning of cancel requests from
    /// other processes through the heartbeat.
    async fn race<T>(
        &self,
        run_id: &str,
        hard_at: Option<Instant>,
        interruptible: Interruptible,
        work: impl Future<Output = T>,
    ) -> Raced<T> {
        let deadline = async {
            match hard_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let cancelled = async {
            match interruptible {
                Interruptible::Yes => self.cancel.cancelled().await,
                Interruptible::No => std::future::pending().await,
            }
        };
        let heartbeat = async {
            let mut ticks = self.heartbeat.subscribe();
            while ticks.changed().await.is_ok() {
                if let Ok(true) = self.store.heartbeat(run_id, self.clock.now()).await {
                    self.cancel.cancel();
                }
            }
            // The ticker is gone (its runtime ended): no more heartbeats.
            std::future::pending::<()>().await
        };
        tokio::select! {
            done = work => Raced::Done(done),
            _ = cancelled => Raced::Cancelled,
            _ = deadline => Raced::HardLimit,
            _ = heartbeat => unreachable!("the heartbeat never ends"),
        }
    }

    /// Persists a run that ended before it started (e.g. refused for its budget) and emits its
    /// events.
    pub async fn settle(&self, run: &mut Run) -> Result<(), StoreError> {
        self.persist(run, 1, &mut Vec::new()).await
    }

    /// One safe boundary: one transaction, then the decision events go to the sinks.
    async fn persist(
        &self,
        run: &mut Run,
        seq: u32,
        envelope: &mut Vec<ToolCallRecord>,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        let record = run.record(now);
        let checkpoint = run
            .checkpoint(seq, now)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode run `{}`: {e}", run.id())))?;
        // The checkpoint first, so that a run's terminal event is the last one anyone sees.
        let decisions: Vec<_> = [EventKind::Checkpoint {
            boundary: checkpoint.boundary,
            seq,
        }]
        .into_iter()
        .chain(run.drain_events())
        .map(|kind| self.emitter.stamp(kind))
        .collect();
        let mut events = self.emitter.take_kept();
        events.extend(decisions.iter().cloned());
        let journal = run.take_journal_change();
        let charges = run.drain_charges(now);
        let messages = run.unpersisted();
        let outcome = self
            .store
            .commit(&Commit {
                run: &record,
                messages: &messages,
                checkpoint: Some(&checkpoint),
                tool_calls: envelope,
                events: &events,
                journal: journal.as_ref(),
                charges: &charges,
            })
            .await?;
        run.mark_persisted();
        envelope.clear();
        for event in &decisions {
            self.emitter.send(event);
        }
        if outcome.cancel_requested {
            self.cancel.cancel();
        }
        Ok(())
    }
}

/// Tells the run when its soft time limit has passed.
fn note_soft_limit(run: &mut Run, soft: Option<Instant>) {
    if soft.is_some_and(|at| Instant::now() >= at) {
        run.on_soft_limit();
    }
}
