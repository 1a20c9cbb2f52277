//! The sessions of one `keel acp` process: [`SessionRegistry`] maps an ACP session id (= the
//! keel session id) to its [`AcpSession`]: the agent built for its workspace, the sink that
//! turns its events into `session/update`s, the editor as its human, and the prompt in flight.
//! `session/new` opens one with [`AcpSession::open`]; `session/load` does the same for a
//! stored session.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{SessionNotification, SessionUpdate};
use agent_client_protocol::{Client, Error};
use keel_core::{Agent, PendingApproval};
use tokio_util::sync::CancellationToken;

use crate::factory::{AgentFactory, AgentSpec};
use crate::human::AcpHuman;
use crate::updates::{UpdateOut, UpdateSink};

/// The most sessions one `keel acp` keeps open (each holds an agent).
pub const MAX_OPEN_SESSIONS: usize = 256;

/// Sends a session's updates to the editor as `session/update` notifications.
pub struct ClientOut(pub ConnectionTo<Client>);

impl UpdateOut for ClientOut {
    fn send(&self, session_id: &str, update: SessionUpdate) {
        // The editor went away: the run goes on (durable); there is no one to tell.
        let _ = self
            .0
            .send_notification(SessionNotification::new(session_id.to_string(), update));
    }
}

/// What a session's last run waits for, answered by the session's next prompt.
#[derive(Debug, Clone)]
pub enum Waiting {
    /// A question (free-form, or one whose choices the editor dismissed).
    Question {
        /// The run that asks.
        run_id: String,
    },
    /// The approval of a call (the permission request failed).
    Approval {
        /// The run that waits.
        run_id: String,
        /// The call.
        call: PendingApproval,
    },
}

/// One open ACP session.
pub struct AcpSession {
    /// The session id (ACP and keel).
    pub id: String,
    /// The editor's workspace, the runs' workspace.
    pub cwd: PathBuf,
    /// The agent built for it.
    pub agent: Arc<Agent>,
    /// The user its runs are for.
    pub user: Option<String>,
    /// Its events as updates.
    pub updates: Arc<UpdateSink>,
    /// The editor, asked for approvals.
    pub human: Arc<AcpHuman>,
    /// The cancel token of the prompt in flight, if one is.
    pub(crate) turn: Mutex<Option<CancellationToken>>,
    /// What the last run waits for, if it waits.
    pub(crate) waiting: Mutex<Option<Waiting>>,
}

impl AcpSession {
    /// Builds the session `session_id` working in `cwd` (absolute, an existing directory),
    /// sending its updates over `client`. Stores nothing.
    pub fn open(
        factory: &dyn AgentFactory,
        client: ConnectionTo<Client>,
        session_id: &str,
        cwd: &Path,
    ) -> Result<Arc<AcpSession>, Error> {
        let cwd = checked_cwd(cwd)?;
        let updates = Arc::new(UpdateSink::new(
            session_id,
            Arc::new(ClientOut(client.clone())),
        ));
        let human = AcpHuman::new(session_id, client);
        let built = factory
            .build(AgentSpec {
                session_id: session_id.to_string(),
                cwd: cwd.clone(),
                sink: updates.clone(),
                human: human.clone(),
            })
            .map_err(|message| Error::internal_error().data(message))?;
        Ok(Arc::new(AcpSession {
            id: session_id.to_string(),
            cwd,
            agent: built.agent,
            user: built.user,
            updates,
            human,
            turn: Mutex::new(None),
            waiting: Mutex::new(None),
        }))
    }

    /// Cancels the prompt in flight, if any: the run stops at its next safe point and a
    /// pending permission request is withdrawn (the call denied).
    pub fn cancel(&self) {
        if let Some(cancel) = &*self.turn.lock().unwrap_or_else(|e| e.into_inner()) {
            cancel.cancel();
        }
    }

    /// Whether a prompt is in flight.
    pub fn busy(&self) -> bool {
        self.turn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Records what the last run waits for (a loaded session's paused run, too).
    pub fn set_waiting(&self, waiting: Option<Waiting>) {
        *self.waiting.lock().unwrap_or_else(|e| e.into_inner()) = waiting;
    }
}

/// The editor's `cwd` as a workspace: absolute and an existing directory.
fn checked_cwd(cwd: &Path) -> Result<PathBuf, Error> {
    if !cwd.is_absolute() {
        return Err(Error::invalid_params().data(format!(
            "cwd must be an absolute path, not {}",
            cwd.display()
        )));
    }
    match std::fs::metadata(cwd) {
        Ok(meta) if meta.is_dir() => Ok(cwd.to_path_buf()),
        _ => Err(Error::invalid_params().data(format!("cwd {} is not a directory", cwd.display()))),
    }
}

/// The open sessions of this process, by id.
#[derive(Default)]
pub struct SessionRegistry {
    sessions: Mutex<HashMap<String, Arc<AcpSession>>>,
}

impl SessionRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        SessionRegistry::default()
    }

    /// Adds (or replaces) `session`; refused past [`MAX_OPEN_SESSIONS`].
    pub fn insert(&self, session: Arc<AcpSession>) -> Result<(), Error> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if sessions.len() >= MAX_OPEN_SESSIONS && !sessions.contains_key(&session.id) {
            return Err(Error::internal_error().data(format!(
                "keel acp keeps at most {MAX_OPEN_SESSIONS} sessions open"
            )));
        }
        sessions.insert(session.id.clone(), session);
        Ok(())
    }

    /// The open session `id`.
    pub fn get(&self, id: &str) -> Option<Arc<AcpSession>> {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    /// The open session `id`, or the error an unknown one is (JSON-RPC "resource not found").
    pub fn find(&self, id: &str) -> Result<Arc<AcpSession>, Error> {
        self.get(id).ok_or_else(|| unknown_session(id))
    }

    /// Every open session.
    pub fn all(&self) -> Vec<Arc<AcpSession>> {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

/// The error for a session id this process does not have open.
pub fn unknown_session(id: &str) -> Error {
    let shown: String = id.chars().take(80).collect();
    Error::new(-32002, "Resource not found").data(serde_json::json!({
        "sessionId": shown,
        "reason": "no such session in this keel acp (session/new or session/load first)"
    }))
}
