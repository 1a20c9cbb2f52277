//! Recording keel's own failure in a run: whoever drives a run catches a panic of the loop
//! (the daemon's worker, `keel run`) and has the run end `error (internal)` with the seed 003
//! answer, so that nobody waits for it and nothing resumes it.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use super::{Agent, AgentError, RunReport};
use crate::driver::Resume;
use crate::event::EventKind;
use crate::run::{INTERNAL_ERROR_ANSWER, Step};
use crate::state::{AgentState, ErrorReason};
use crate::store::{Commit, RunRecord};
use crate::tool_exec::Replay;

impl Agent {
    /// Awaits `work` — a drive of run `run_id` by this agent (`run`, `answer`, `approve`,
    /// `resume`) — catching a panic of it: the run then ends `error (internal)` through
    /// [`Agent::fail_internal`], and its report is the outcome, so that whoever waits on the
    /// run is answered and the process goes on. (With `panic = "abort"` nothing is caught.)
    pub async fn survive_panic<F>(&self, run_id: &str, work: F) -> Result<RunReport, AgentError>
    where
        F: Future<Output = Result<RunReport, AgentError>>,
    {
        let panic = match AssertUnwindSafe(work).catch_unwind().await {
            Ok(outcome) => return outcome,
            Err(panic) => panic,
        };
        let detail = panic
            .downcast_ref::<&str>()
            .map(|text| (*text).to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string());
        tracing::error!(run_id, panic = %detail, "a run panicked; it ends as error (internal)");
        self.fail_internal(
            run_id,
            &format!("keel failed inside this run (a panic: {detail}); it cannot go on"),
        )
        .await
    }

    /// Ends run `run_id` in `error (internal)` because keel itself failed while driving it (a
    /// panic the caller caught): the user's answer is [`INTERNAL_ERROR_ANSWER`], `detail` is
    /// kept as the run's error for the operator, and the run's `agent_run.failed` event goes to
    /// the sinks. The run ends at its latest checkpoint: what the failed step did after that
    /// boundary is not kept. A run that already ended is left as it was. Returns its report.
    pub async fn fail_internal(&self, run_id: &str, detail: &str) -> Result<RunReport, AgentError> {
        let record = self.record(run_id).await?;
        if self.store.latest_checkpoint(run_id).await?.is_none() {
            // It failed before its first boundary (still queued): only its record tells of it.
            return self.fail_record(record, detail).await;
        }
        let (mut run, seq, _) = match self.restore(&record).await {
            Ok(restored) => restored,
            // A checkpoint that cannot be read back may be what failed: the record still ends.
            Err(_) => return self.fail_record(record, detail).await,
        };
        if !record.state.is_terminal() {
            run.fail_internal(detail);
            let emitter = self.emitter(run_id, &record.session_id);
            let cancel = CancellationToken::new();
            let driver = self.driver(&emitter, &cancel, run.user_id().map(str::to_string));
            let end = Resume {
                step: Step::Finish,
                replay: Replay::default(),
                checkpoint_seq: seq,
            };
            driver.drive_from(&mut run, end).await?;
        }
        Ok(RunReport::of(&run, self.store.as_ref()).await?)
    }

    /// [`Agent::fail_internal`] for a run without a usable checkpoint: its record ends.
    async fn fail_record(
        &self,
        mut record: RunRecord,
        detail: &str,
    ) -> Result<RunReport, AgentError> {
        if !record.state.is_terminal() {
            let now = self.clock.now();
            record.state = AgentState::Error;
            record.reason = Some(ErrorReason::Internal);
            record.error = Some(detail.to_string());
            record.final_text = Some(INTERNAL_ERROR_ANSWER.to_string());
            record.resume_available = false;
            record.finished_at = Some(now);
            record.updated_at = now;
            let emitter = self.emitter(&record.id, &record.session_id);
            let failed = emitter.stamp(EventKind::RunFailed {
                state: record.state,
                reason: record.reason,
                message: detail.to_string(),
                iterations: record.iterations,
            });
            let mut events = emitter.take_kept();
            events.push(failed.clone());
            self.store
                .commit(&Commit {
                    events: &events,
                    ..Commit::new(&record, &[])
                })
                .await?;
            emitter.send(&failed);
        }
        Ok(RunReport {
            model: record.model_used.clone().unwrap_or(record.model.clone()),
            run_id: record.id.clone(),
            session_id: record.session_id.clone(),
            state: record.state,
            reason: record.reason,
            final_text: record.final_text.clone(),
            error: record.error.clone(),
            iterations: record.iterations,
            tool_calls: Vec::new(),
            usage: record.usage,
            cost: record.cost,
            question: None,
            choices: Vec::new(),
            approval: None,
            files: self.store.run_files(&record.id).await?,
        })
    }
}
