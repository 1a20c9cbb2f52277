//! Runs a run starts: a child run is a real run, stored like any other, in its own session
//! (`sub-{depth}-{id}`, see [`crate::SessionKind`]) and so its own lane, driven to its end
//! inside its parent's tool call with nobody to ask: its questions stop it, its calls that need
//! approval are denied at once. What it spends counts against its parent's budgets (see
//! [`crate::run::BatchSpend`]).
//!
//! The kernel knows how to start and resume one ([`ChildRuns`], which the agent implements);
//! which children a run has, and why, is an extension's business (keel-extensions'
//! `delegation` answers `delegate_task` with them).

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::budget::SharedBudget;
use crate::run_settings::RunSettings;
use crate::store::{RunRecord, Store};
use crate::tool::ToolSpec;

/// A child run to start.
pub struct ChildRunSpec {
    /// Its run id.
    pub run_id: String,
    /// Its session (see [`crate::session_kind::child_session_id`]): a session of its own.
    pub session_id: String,
    /// Its settings (the worker it names is the one that claims its lane).
    pub settings: RunSettings,
    /// The tools it is offered.
    pub tools: Vec<ToolSpec>,
    /// Its only user message, in a fresh context.
    pub message: String,
    /// The user it runs for (its parent's).
    pub user_id: Option<String>,
    /// The budget it shares with its parent and the children beside it, when there is one.
    pub shared: Option<Arc<SharedBudget>>,
    /// Cancels it.
    pub cancel: CancellationToken,
}

/// Who starts and resumes child runs: the agent driving the parent.
#[async_trait]
pub trait ChildRuns: Send + Sync {
    /// Where the runs are kept: a child's record and journal are read back from it.
    fn store(&self) -> &dyn Store;

    /// Starts `child` in its session's lane, drives it to its end with no person to ask, and
    /// returns its record. Fails, saying why, when its lane is held or the store fails.
    async fn start(&self, child: ChildRunSpec) -> Result<RunRecord, String>;

    /// Resumes the interrupted child run `run_id` (its worker was its parent's, which is gone),
    /// drawing on `shared` as it did before, and returns its record once it has ended; fails,
    /// saying why, when it cannot be resumed.
    async fn resume(
        &self,
        run_id: &str,
        shared: Option<Arc<SharedBudget>>,
        cancel: CancellationToken,
    ) -> Result<RunRecord, String>;
}
