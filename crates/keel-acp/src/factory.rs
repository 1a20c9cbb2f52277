//! What `keel acp` takes from the binary: [`AgentFactory`] builds the keel agent of a session
//! for its workspace (settings, tools, store, sinks) and claims and releases the session's
//! lane, as `keel chat` does. keel-acp holds the protocol; the binary
//! (`crates/keel/src/commands/acp.rs`) implements this with its own assembly.

use std::path::PathBuf;
use std::sync::Arc;

use keel_core::{Agent, EventSink, HumanChannel, RunReport, Store};
use tokio_util::sync::CancellationToken;

/// What the agent of one ACP session is built for.
pub struct AgentSpec {
    /// The keel session (conversation) id, also the ACP session id.
    pub session_id: String,
    /// The editor's workspace: the run's workspace (the file tools' root, the shell's cwd).
    pub cwd: PathBuf,
    /// Where the session's events go (besides the binary's own sinks).
    pub sink: Arc<dyn EventSink>,
    /// Who answers approvals and questions: the editor.
    pub human: Arc<dyn HumanChannel>,
}

/// A built agent and the user its runs are for.
pub struct BuiltAgent {
    /// The agent.
    pub agent: Arc<Agent>,
    /// The user the runs are for (their budget applies), when configured.
    pub user: Option<String>,
}

/// Whether a run may start on a session's lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaneGrant {
    /// The run holds the lane.
    Claimed,
    /// Another run holds it (another process, or a run waiting for a person); why.
    Refused(String),
}

/// The binary's side of `keel acp`.
#[async_trait::async_trait]
pub trait AgentFactory: Send + Sync + 'static {
    /// keel's store (the one `keel chat` opens: `--database`, or SQLite in KEEL_HOME).
    fn store(&self) -> Arc<dyn Store>;

    /// Builds the agent of a session (its settings with `spec.cwd` as the workspace).
    /// A configuration error is said to the editor as the error of its request.
    fn build(&self, spec: AgentSpec) -> Result<BuiltAgent, String>;

    /// Claims `session_id`'s lane for `run_id` (without waiting: a busy lane is refused).
    async fn claim_lane(
        &self,
        session_id: &str,
        run_id: &str,
        cancel: &CancellationToken,
    ) -> Result<LaneGrant, String>;

    /// Times out the runs whose workers died (the reconciler), so that a session loaded now
    /// finds a run interrupted since this process started resumable at once, not at the next
    /// sweep. Nothing by default.
    async fn reconcile(&self) -> Result<(), String> {
        Ok(())
    }

    /// Releases the lane after a run, unless the run waits for a person (it keeps the lane).
    async fn release_lane(
        &self,
        session_id: &str,
        run_id: &str,
        report: Option<&RunReport>,
    ) -> Result<(), String>;
}
