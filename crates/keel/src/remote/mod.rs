//! `keel run|chat --server URL`: the same commands, served by a `keel serve` daemon. The
//! message is sent over the daemon's HTTP API and the run's live events are streamed back to
//! the terminal as the local mode shows them.

pub mod chat;
pub mod client;
pub mod events;
pub mod session;
