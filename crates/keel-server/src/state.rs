//! What every handler shares.

use std::sync::Arc;

use keel_platform::DaemonStore;

use crate::engine::Engine;
use crate::hub::Hub;

/// The daemon's shared state, cloned into every handler.
#[derive(Clone)]
pub struct AppState {
    /// Conversations, runs, keys.
    pub store: Arc<dyn DaemonStore>,
    /// Runs the lanes: queues, workers, cancel, resume.
    pub engine: Arc<Engine>,
    /// Live events, for the SSE streams.
    pub hub: Arc<Hub>,
    /// The largest request body accepted, in bytes.
    pub max_request_bytes: usize,
    /// The incoming-message pipeline (`POST /v1/messages`).
    pub inbox: Arc<keel_platform::Inbox>,
    /// The tool modules that exist, for checking personas.
    pub modules: Arc<[String]>,
}
