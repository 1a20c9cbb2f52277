//! Coming back to a run: resuming one whose worker died or that halted for a human decision,
//! answering one that asked a question, and deciding about a call waiting for approval.

use tokio_util::sync::CancellationToken;

use super::{Agent, AgentError, RunReport};
use crate::approval::ApprovalDecision;
use crate::checkpoint::ToolCallRecord;
use crate::driver::Resume;
use crate::reconcile::abandoned;
use crate::run::{Run, prompt_hash};
use crate::state::{AgentState, ErrorReason};
use crate::store::RunRecord;
use crate::tool_exec::Replay;

/// What to do with a run that halted for a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnsafeCall {
    /// Run the unfinished side-effecting call again (a human checked it did not take effect).
    Retry,
    /// Do not run it again; the model is told it may or may not have taken effect.
    Skip,
}

/// How to resume.
#[derive(Clone, Debug, Default)]
pub struct ResumeOptions {
    /// Go on under the current system prompt although it changed since the run started.
    pub accept_prompt_change: bool,
    /// For a run halted before an unfinished side-effecting call: what to do with it.
    pub unsafe_call: Option<UnsafeCall>,
    /// Cancel the resumed run by cancelling this token.
    pub cancel: Option<CancellationToken>,
    /// Resume even though the run's heartbeat is fresh and its worker cannot be checked: the
    /// caller knows its worker is gone.
    pub force: bool,
    /// Go on with this agent's provider, model and fallbacks instead of those the run started
    /// with (the caller chose other ones).
    pub switch_models: bool,
    /// Messages the user sends while the resumed run works, which join it before its next
    /// model call (see [`crate::steering`]).
    pub steering: Option<std::sync::Arc<dyn crate::steering::Steering>>,
}

/// How to go on with a run that waits for a person: given its answer ([`Agent::answer_with_options`])
/// or a decision about the call it waits on ([`Agent::approve_with_options`]).
#[derive(Clone, Debug, Default)]
pub struct ContinueOptions {
    /// Go on with this agent's provider, model and fallbacks instead of the run's own (the
    /// caller chose other ones).
    pub switch_models: bool,
    /// Cancel the continued run by cancelling this token: a model call in flight is abandoned
    /// at once, a side-effecting call in flight finishes, and the run ends `cancelled` at its
    /// next safe point. Without one, only a cancel requested through the store reaches it.
    pub cancel: Option<CancellationToken>,
}

impl Agent {
    /// Resumes a run from its latest checkpoint: one whose worker died (`timed_out` with resume
    /// available, or still marked running with its worker gone or its heartbeat stale, see
    /// [`crate::reconcile::abandoned`]), or one halted for a decision
    /// (`resume_unsafe`, `prompt_drift`). Completed tool calls are replayed from the envelope,
    /// never run again; an unfinished side-effecting call halts the run unless `options` says
    /// what to do with it.
    pub async fn resume(
        &self,
        run_id: &str,
        options: ResumeOptions,
    ) -> Result<RunReport, AgentError> {
        self.resume_sharing(run_id, options, None).await
    }

    /// [`Agent::resume`] for a sub-agent whose siblings run beside it: it draws on `shared`, the
    /// budget they share, as it did before the crash.
    pub(super) async fn resume_sharing(
        &self,
        run_id: &str,
        options: ResumeOptions,
        shared: Option<std::sync::Arc<crate::budget::SharedBudget>>,
    ) -> Result<RunReport, AgentError> {
        let record = self.record(run_id).await?;
        let now = self.clock.now();
        let halted = record.state == AgentState::WaitingOnHuman
            && matches!(
                record.reason,
                Some(ErrorReason::ResumeUnsafe | ErrorReason::PromptDrift)
            );
        match record.state {
            AgentState::TimedOut if record.resume_available => {}
            AgentState::Queued | AgentState::Running | AgentState::WaitingForTool => {
                let gone = abandoned(&record, now, &self.reconcile, self.workers.as_ref());
                if !options.force && gone.is_none() {
                    let (worker, stop) = match &record.worker {
                        Some(worker) => (format!(" ({worker})"), format!("`kill {}`", worker.pid)),
                        None => (String::new(), "SIGTERM".to_string()),
                    };
                    return Err(AgentError::NotResumable(format!(
                        "run `{run_id}` is still running in another process{worker}: its \
                         heartbeat is fresh. Let it finish, or stop it with {stop}: it stops at \
                         a safe point and the run stays resumable. If you know that process is \
                         gone, resume with --force"
                    )));
                }
            }
            _ if halted => {}
            AgentState::WaitingOnHuman => {
                return Err(AgentError::NotResumable(format!(
                    "run `{run_id}` waits for a person: `keel answer {run_id} \"...\"` for its \
                     question, or `keel approve {run_id} once|session|deny --call-id ID` for a tool \
                     call (its report names the call)"
                )));
            }
            state => {
                return Err(AgentError::NotResumable(format!(
                    "run `{run_id}` ended as {state}{}; there is nothing to resume",
                    if state == AgentState::TimedOut {
                        " at a point it cannot be resumed from"
                    } else {
                        ""
                    }
                )));
            }
        }
        let (run, seq, boundary) = self.restore(&record).await?;
        let mut run = run.with_shared_budget(shared);
        self.take_over(&mut run, options.switch_models)?;
        let emitter = self.emitter(run_id, &record.session_id);
        let cancel = options.cancel.clone().unwrap_or_default();
        let mut driver = self.driver(&emitter, &cancel, run.user_id().map(str::to_string));
        driver.steering = options.steering.as_deref();
        // A run keeps the hash of the configured prompt it started under (before a persona's
        // text and the per-run sections); a changed configuration halts the resume.
        let current_prompt = self.settings.system_prompt.clone();
        let drifted = prompt_hash(current_prompt.as_deref()) != run.prompt_hash();
        let (step, replay) = if drifted && !options.accept_prompt_change {
            (run.halt_prompt_drift(), Replay::default())
        } else {
            // Accepted: the new prompt, with the session's memory as the run showed it, checked
            // from now on against the new configured prompt.
            let changed = drifted.then(|| {
                let shown = self.extensions.restate_prompt(
                    current_prompt.clone(),
                    run.journal(),
                    run.tools(),
                );
                (
                    shown.unwrap_or_default(),
                    prompt_hash(current_prompt.as_deref()),
                )
            });
            run.clear_halt(changed);
            let mut replay = self.replay(run_id).await?;
            if record.reason == Some(ErrorReason::ResumeUnsafe) || halted {
                self.decide_unsafe(&run, &mut replay, options.unsafe_call)
                    .await?;
            }
            let replayed = run
                .pending_calls()
                .iter()
                .filter(|call| {
                    replay
                        .records
                        .get(&call.id)
                        .is_some_and(|r| r.completed_at.is_some())
                })
                .count();
            run.note_resumed(boundary, replayed);
            (run.resume(), replay)
        };
        let resume = Resume {
            step,
            replay,
            checkpoint_seq: seq,
        };
        driver.drive_from(&mut run, resume).await?;
        Ok(RunReport::of(&run, self.store.as_ref()).await?)
    }

    /// Gives a waiting run the human's answer to its `ask_human` question and drives it on.
    pub async fn answer(&self, run_id: &str, answer: &str) -> Result<RunReport, AgentError> {
        self.answer_with(run_id, answer, false).await
    }

    /// [`Agent::answer`], going on with this agent's provider, model and fallbacks instead of
    /// the run's own when `switch_models`.
    pub async fn answer_with(
        &self,
        run_id: &str,
        answer: &str,
        switch_models: bool,
    ) -> Result<RunReport, AgentError> {
        let options = ContinueOptions {
            switch_models,
            ..ContinueOptions::default()
        };
        self.answer_with_options(run_id, answer, options).await
    }

    /// [`Agent::answer`] as `options` say: with other models, and cancellable by the caller's
    /// token.
    pub async fn answer_with_options(
        &self,
        run_id: &str,
        answer: &str,
        options: ContinueOptions,
    ) -> Result<RunReport, AgentError> {
        let record = self.record(run_id).await?;
        if record.state != AgentState::WaitingOnHuman || record.reason.is_some() {
            return Err(AgentError::NotResumable(format!(
                "run `{run_id}` is {} and is not waiting for an answer",
                record.state
            )));
        }
        let (mut run, seq, _) = self.restore(&record).await?;
        if run.question().is_none() {
            return Err(AgentError::NotResumable(format!(
                "run `{run_id}` has no question waiting"
            )));
        }
        if let Err(reason) = crate::human::resolve(answer, run.question_choices()) {
            return Err(AgentError::InvalidAnswer(reason));
        }
        self.take_over(&mut run, options.switch_models)?;
        let emitter = self.emitter(run_id, &record.session_id);
        let cancel = options.cancel.unwrap_or_default();
        let driver = self.driver(&emitter, &cancel, run.user_id().map(str::to_string));
        let step = run.on_human_answer(answer);
        let resume = Resume {
            step,
            replay: self.replay(run_id).await?,
            checkpoint_seq: seq,
        };
        driver.drive_from(&mut run, resume).await?;
        Ok(RunReport::of(&run, self.store.as_ref()).await?)
    }

    /// Gives a run waiting for approval of tool call `call_id` the person's decision and drives
    /// it on: `approve_once` runs the call, `approve_session` also keeps its pattern for the
    /// rest of the session, `deny` tells the model and never runs it. A decision about another
    /// call than the one the run waits on (a stale one, made before the run went on) decides
    /// nothing and fails.
    pub async fn approve(
        &self,
        run_id: &str,
        call_id: &str,
        decision: ApprovalDecision,
        switch_models: bool,
    ) -> Result<RunReport, AgentError> {
        let options = ContinueOptions {
            switch_models,
            ..ContinueOptions::default()
        };
        self.approve_with_options(run_id, call_id, decision, options)
            .await
    }

    /// [`Agent::approve`] as `options` say: with other models, and cancellable by the caller's
    /// token (a cancel before the decided call runs still lets it be decided; the run then ends
    /// `cancelled` at its next safe point).
    pub async fn approve_with_options(
        &self,
        run_id: &str,
        call_id: &str,
        decision: ApprovalDecision,
        options: ContinueOptions,
    ) -> Result<RunReport, AgentError> {
        let record = self.record(run_id).await?;
        let not_waiting = || {
            AgentError::NotResumable(format!(
                "run `{run_id}` is {} and is not waiting for approval",
                record.state
            ))
        };
        if record.state != AgentState::WaitingOnHuman || record.reason.is_some() {
            return Err(not_waiting());
        }
        let (mut run, seq, _) = self.restore(&record).await?;
        let Some(pending) = run.pending_approval() else {
            return Err(not_waiting());
        };
        crate::approval::check_decision(run_id, pending, call_id)
            .map_err(AgentError::NotResumable)?;
        self.take_over(&mut run, options.switch_models)?;
        let emitter = self.emitter(run_id, &record.session_id);
        let cancel = options.cancel.unwrap_or_default();
        let driver = self.driver(&emitter, &cancel, run.user_id().map(str::to_string));
        let step = driver.decide(&mut run, decision).await?;
        let resume = Resume {
            step,
            replay: self.replay(run_id).await?,
            checkpoint_seq: seq,
        };
        driver.drive_from(&mut run, resume).await?;
        Ok(RunReport::of(&run, self.store.as_ref()).await?)
    }

    /// Makes this agent the run's driver (see [`Run::relaunch`]); fails, before anything is
    /// stored, when the run would need a provider this agent does not have, so that the run
    /// stays as resumable as it was.
    fn take_over(&self, run: &mut Run, switch_models: bool) -> Result<(), AgentError> {
        run.relaunch(&self.settings, switch_models);
        let missing: Vec<String> = run
            .remaining_chain()
            .iter()
            .filter(|target| !self.providers.contains_key(&target.provider))
            .map(ToString::to_string)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let have: Vec<&str> = self.providers.keys().map(String::as_str).collect();
        Err(AgentError::NotResumable(format!(
            "run `{}` goes on with {}, but this agent has no provider of that name (it has {}); \
             nothing was changed: set the provider up and try again (keel: --provider and \
             --base-url)",
            run.id(),
            missing.join(", "),
            have.join(", ")
        )))
    }

    pub(super) async fn record(&self, run_id: &str) -> Result<RunRecord, AgentError> {
        self.store
            .run(run_id)
            .await?
            .ok_or_else(|| AgentError::NotResumable(format!("there is no run `{run_id}`")))
    }

    /// The run as its latest checkpoint left it, its messages read back from the store.
    pub(super) async fn restore(
        &self,
        record: &RunRecord,
    ) -> Result<(Run, u32, crate::checkpoint::Boundary), AgentError> {
        let checkpoint = self
            .store
            .latest_checkpoint(&record.id)
            .await?
            .ok_or_else(|| {
                AgentError::NotResumable(format!("run `{}` has no checkpoint", record.id))
            })?;
        let stored = self
            .store
            .messages_since(&record.session_id, checkpoint.message_cursor)
            .await?;
        let run = Run::restore(&checkpoint, stored)?.with_extensions(self.extensions.clone());
        Ok((run, checkpoint.seq, checkpoint.boundary))
    }

    async fn replay(&self, run_id: &str) -> Result<Replay, AgentError> {
        let records = self
            .store
            .tool_calls(run_id)
            .await?
            .into_iter()
            .map(|record| (record.call_id.clone(), record))
            .collect();
        Ok(Replay {
            records,
            rerun: Default::default(),
        })
    }

    /// Applies the human's decision about the pending calls that started and never finished.
    async fn decide_unsafe(
        &self,
        run: &Run,
        replay: &mut Replay,
        decision: Option<UnsafeCall>,
    ) -> Result<(), AgentError> {
        let unfinished: Vec<ToolCallRecord> = run
            .pending_calls()
            .iter()
            .filter_map(|call| replay.records.get(&call.id))
            .filter(|record| record.completed_at.is_none() && !record.idempotent)
            .cloned()
            .collect();
        if unfinished.is_empty() {
            return Ok(());
        }
        match decision {
            None => Err(AgentError::NotResumable(format!(
                "`{}` (call {}) may already have run before the worker died; check its effect, \
                 then resume with --unsafe-call retry (run it again) or --unsafe-call skip",
                unfinished[0].name, unfinished[0].call_id
            ))),
            Some(UnsafeCall::Retry) => {
                replay
                    .rerun
                    .extend(unfinished.into_iter().map(|record| record.call_id));
                Ok(())
            }
            Some(UnsafeCall::Skip) => {
                let now = self.clock.now();
                let skipped: Vec<ToolCallRecord> = unfinished
                    .into_iter()
                    .map(|mut record| {
                        record.completed_at = Some(now);
                        record.ok = Some(false);
                        record.output = Some(format!(
                            "Error: `{}` was interrupted by a crash and not run again (a human \
                             chose to skip it); it may or may not have taken effect.",
                            record.name
                        ));
                        record
                    })
                    .collect();
                self.store.record_tool_calls(&skipped).await?;
                for record in skipped {
                    replay.records.insert(record.call_id.clone(), record);
                }
                Ok(())
            }
        }
    }
}
