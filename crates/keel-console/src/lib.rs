//! keel-console: the web console `keel serve` serves at `/`. Server-rendered HTML (maud, which
//! escapes everything it is given) over the daemon's own state: a person signs in with an API
//! key and sees what that key sees through the API's [`keel_server::Caller`] rules.
//!
//! It owns the console's pages, its sessions (a random token in a cookie, mapped in memory to
//! the key's hash and re-checked on every request), its CSRF checks and its embedded assets.
//! It must not depend on the `keel` binary or on how agents are configured; it acts only
//! through [`keel_server::AppState`] (the store and the engine), as the API's handlers do.

mod assets;
pub mod csrf;
pub mod error;
pub mod filters;
pub mod format;
mod headers;
pub mod layout;
pub mod pages;
mod run_page;
pub mod session;
mod sign_in;

use std::sync::Arc;

use axum::Router;
use axum::extract::FromRef;
use keel_core::clock::{Clock, SystemClock};
use keel_server::AppState;

pub use error::ConsoleError;
pub use session::{SESSION_COOKIE, Viewer};

/// How long a console session lasts after sign-in, unless [`ConsoleOptions`] says otherwise.
pub const DEFAULT_SESSION_LIFETIME: chrono::TimeDelta = chrono::TimeDelta::hours(12);

/// What the console's routes share: the daemon's state and the console's sessions.
#[derive(Clone)]
pub struct ConsoleState {
    /// The daemon's state: the store, the engine, the live events.
    pub app: AppState,
    /// The signed-in sessions.
    pub sessions: Arc<session::Sessions>,
    /// The time sessions expire by, and pages count ages from.
    pub clock: Arc<dyn Clock>,
    /// The channels the daemon started, for the channels page.
    pub channels: Arc<[String]>,
}

impl FromRef<ConsoleState> for AppState {
    fn from_ref(console: &ConsoleState) -> AppState {
        console.app.clone()
    }
}

/// The console's settings.
#[derive(Clone)]
pub struct ConsoleOptions {
    /// How long a session lasts after sign-in.
    pub session_lifetime: chrono::TimeDelta,
    /// The most sessions held at once; signing in past it ends the oldest.
    pub max_sessions: usize,
    /// The clock sessions expire by (the system's, or a test's).
    pub clock: Arc<dyn Clock>,
    /// The channels the daemon started (`keel serve` passes their names).
    pub channels: Vec<String>,
}

impl Default for ConsoleOptions {
    fn default() -> Self {
        ConsoleOptions {
            session_lifetime: DEFAULT_SESSION_LIFETIME,
            max_sessions: 10_000,
            clock: Arc::new(SystemClock),
            channels: Vec::new(),
        }
    }
}

/// The console's routes on `state`, to merge beside the API (they set no fallback: the API's
/// answers every other path).
pub fn routes(state: AppState) -> Router {
    routes_with(state, ConsoleOptions::default())
}

/// [`routes`] with `options`.
pub fn routes_with(state: AppState, options: ConsoleOptions) -> Router {
    let console = ConsoleState {
        app: state,
        sessions: Arc::new(session::Sessions::new(
            options.session_lifetime,
            options.max_sessions,
        )),
        clock: options.clock,
        channels: options.channels.into(),
    };
    Router::new()
        .merge(sign_in::routes())
        .merge(run_page::routes())
        .merge(assets::routes())
        .merge(pages::routes())
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            csrf::check,
        ))
        .layer(axum::middleware::from_fn(headers::secure))
        .with_state(console)
}
