//! `keel acp`: keel as an Agent Client Protocol agent over stdio, for editors (Zed, JetBrains,
//! Neovim). stdout is the protocol; keel's own lines go to stderr. The store is the one
//! `keel chat` opens (`--database`, or SQLite in KEEL_HOME), reconciled at the start and every
//! few minutes; each session's agent is `keel chat`'s, built for the editor's `cwd` as the
//! workspace, with the editor as the human who approves. The protocol mapping is keel-acp's;
//! [`KeelAgents`] is this binary's [`keel_acp::AgentFactory`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_acp::{AgentFactory, AgentSpec, BuiltAgent, LaneGrant};
use keel_core::reconcile::ReconcileReport;
use keel_core::{RunReport, Store};
use keel_platform::DaemonStore;
use tokio_util::sync::CancellationToken;

use crate::cli::AcpArgs;
use crate::cli::AgentArgs;
use crate::commands::lane::{self, Lane, LaneRequest};
use crate::commands::run::{SettingsSource, build, known_user, release_unless_paused};
use crate::config::{ConfigError, keel_home};
use crate::setup;

/// Runs `keel acp` until the editor closes stdin.
pub async fn acp(config_file: Option<&Path>, args: AcpArgs) -> anyhow::Result<ExitCode> {
    let home = keel_home()?;
    let store = setup::open_store(&home).await?;
    known_user(store.as_ref(), args.agent.user.as_deref()).await?;
    let reconciled = setup::reconcile(store.as_ref(), config_file, &home).await?;
    // The configuration must read before the editor is told keel is ready: a broken one is
    // said once, here, with exit code 2, not as every session's error.
    setup::load_settings(config_file, &home, &args.agent)?;
    // A long-running process: keep reconciling what other processes' dead workers leave.
    let sweeper = {
        let store = store.clone();
        let config_file = config_file.map(Path::to_path_buf);
        let home = home.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RECONCILE_EVERY).await;
                let _ = setup::reconcile(store.as_ref(), config_file.as_deref(), &home).await;
            }
        })
    };
    let factory = Arc::new(KeelAgents {
        stale_after: setup::reconcile_policy(config_file, &home).stale_after,
        config_file: config_file.map(Path::to_path_buf),
        home,
        flags: args.agent,
        store,
        reconciled: Mutex::new(Some(reconciled)),
    });
    let served = keel_acp::serve_stdio(factory).await;
    sweeper.abort();
    served.map_err(|e| anyhow::anyhow!("the ACP connection failed: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

/// How often `keel acp` runs the reconciler.
const RECONCILE_EVERY: Duration = Duration::from_secs(300);

/// The binary's [`AgentFactory`]: `keel chat`'s assembly per session, with the editor's
/// `cwd` as `--workspace`.
pub struct KeelAgents {
    config_file: Option<PathBuf>,
    home: PathBuf,
    flags: AgentArgs,
    store: Arc<dyn DaemonStore>,
    /// The start's reconciler report, told (as an event) to the first session only.
    reconciled: Mutex<Option<ReconcileReport>>,
    stale_after: Duration,
}

#[async_trait::async_trait]
impl AgentFactory for KeelAgents {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    fn build(&self, spec: AgentSpec) -> Result<BuiltAgent, String> {
        let mut flags = self.flags.clone();
        flags.workspace = Some(spec.cwd);
        let source = SettingsSource {
            config_file: self.config_file.as_deref(),
            home: &self.home,
            flags: &flags,
        };
        let reconciled = self
            .reconciled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default();
        let (agent, user) = build(
            source,
            self.store.clone(),
            spec.sink,
            &spec.session_id,
            Some(spec.human),
            reconciled,
        )
        .map_err(|e| match e.downcast::<ConfigError>() {
            Ok(config) => config.to_string(),
            Err(other) => format!("{other:#}"),
        })?;
        Ok(BuiltAgent {
            agent: Arc::new(agent),
            user,
        })
    }

    async fn claim_lane(
        &self,
        session_id: &str,
        run_id: &str,
        cancel: &CancellationToken,
    ) -> Result<LaneGrant, String> {
        let request = LaneRequest {
            session_id,
            run_id,
            stale_after: self.stale_after,
            wait: false,
        };
        match lane::claim(self.store.as_ref(), &request, cancel).await {
            Ok(Lane::Claimed) => Ok(LaneGrant::Claimed),
            Ok(Lane::Refused(why)) => Ok(LaneGrant::Refused(why)),
            Ok(Lane::Cancelled) => Ok(LaneGrant::Refused("cancelled".into())),
            Err(e) => Err(format!("{e:#}")),
        }
    }

    async fn reconcile(&self) -> Result<(), String> {
        setup::reconcile(self.store.as_ref(), self.config_file.as_deref(), &self.home)
            .await
            .map(|_| ())
            .map_err(|e| format!("{e:#}"))
    }

    async fn release_lane(
        &self,
        session_id: &str,
        run_id: &str,
        report: Option<&RunReport>,
    ) -> Result<(), String> {
        release_unless_paused(self.store.as_ref(), session_id, run_id, report)
            .await
            .map_err(|e| format!("{e:#}"))
    }
}
