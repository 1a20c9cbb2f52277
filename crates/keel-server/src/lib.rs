//! keel-server: `keel serve`, the daemon. An HTTP API (axum) over the store: conversations,
//! messages that become runs in their conversation's lane, live events over SSE, API keys.
//!
//! It owns the HTTP surface, the lanes' queues and workers ([`engine`]) and live events
//! ([`hub`]); it must not depend on the `keel` binary or on how agents are configured (the
//! caller hands it a built [`keel_core::Agent`]).

pub mod api;
pub mod attachments;
pub mod auth;
pub mod connections;
pub mod control;
pub mod engine;
pub mod error;
pub mod hub;
pub mod json;
pub mod keys;
pub mod live;
pub mod metrics;
pub mod openapi;
pub mod platform;
pub mod router;
pub mod scheduler;
pub mod schedules;
pub mod serve;
pub mod state;
pub mod views;

pub use auth::Caller;
pub use connections::ConnectionLimits;
pub use error::ApiError;
pub use router::router;
pub use state::AppState;
