//! The agent as its runs' [`ChildRuns`]: starts a child run in its own session and lane, or
//! resumes one a crash interrupted, and drives it to its end with nobody to ask.

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::{Agent, AgentError, ResumeOptions};
use crate::budget::SharedBudget;
use crate::child_run::{ChildRunSpec, ChildRuns};
use crate::lane::{LaneClaim, LaneOutcome};
use crate::message::Message;
use crate::run::Run;
use crate::store::{RunRecord, Store};

#[async_trait]
impl ChildRuns for Agent {
    fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    /// Starts a new child in its own session and lane, for its user, with a fresh context of
    /// its message alone.
    async fn start(&self, child: ChildRunSpec) -> Result<RunRecord, String> {
        self.start_child(child).await.map_err(|e| e.to_string())
    }

    async fn resume(
        &self,
        run_id: &str,
        shared: Option<Arc<SharedBudget>>,
        cancel: CancellationToken,
    ) -> Result<RunRecord, String> {
        self.resume_child(run_id, shared, cancel)
            .await
            .map_err(|e| e.to_string())
    }
}

impl Agent {
    /// Starts a new child in its own session and lane, for its user, with a fresh context of
    /// its message alone.
    async fn start_child(&self, child: ChildRunSpec) -> Result<RunRecord, AgentError> {
        let store = self.store.as_ref();
        let now = self.clock.now();
        let worker = child
            .settings
            .worker
            .as_ref()
            .map_or_else(|| "keel".to_string(), ToString::to_string);
        let claim = LaneClaim {
            session_id: &child.session_id,
            run_id: &child.run_id,
            worker: &worker,
            at: now,
            stale_after: chrono::Duration::from_std(self.reconcile.stale_after)
                .unwrap_or(chrono::Duration::MAX),
        };
        if let LaneOutcome::Busy(holder) = store.claim_session(&claim).await? {
            return Err(AgentError::NotResumable(format!(
                "its session's lane is held by run `{}`",
                holder.run_id
            )));
        }
        let mut run = Run::new(
            child.run_id.clone(),
            child.session_id.clone(),
            child.settings,
            child.tools,
            Vec::new(),
            Message::user(child.message),
            now,
        )
        .with_user(child.user_id.clone())
        .with_shared_budget(child.shared);
        let emitter = self.emitter(&child.run_id, &child.session_id);
        let mut driver = self.driver(&emitter, &child.cancel, child.user_id);
        // Nobody answers a child's question: it stops, and its parent hears why.
        driver.human = None;
        driver.drive(&mut run).await?;
        Ok(run.record(self.clock.now()))
    }

    /// Resumes an interrupted child and reads back how it ended.
    async fn resume_child(
        &self,
        run_id: &str,
        shared: Option<Arc<SharedBudget>>,
        cancel: CancellationToken,
    ) -> Result<RunRecord, AgentError> {
        let options = ResumeOptions {
            // Its worker was its parent's, which is gone: this process resumes both.
            force: true,
            cancel: Some(cancel),
            ..ResumeOptions::default()
        };
        let report = self.resume_sharing(run_id, options, shared).await?;
        self.store
            .run(&report.run_id)
            .await?
            .ok_or_else(|| AgentError::NotResumable(format!("run `{run_id}` disappeared")))
    }
}
