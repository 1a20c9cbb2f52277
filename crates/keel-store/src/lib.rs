//! keel-store owns keel's durable state: sessions, their messages and runs, what makes a run
//! survive its worker (checkpoints, the tool-call envelope, run events, run journals, heartbeats
//! and cancel requests), and the session lanes that keep one active run per session
//! ([`lanes`]), behind the [`keel_core::Store`] trait. SQLite ([`SqliteStore`]) is the embedded default;
//! PostgreSQL (many workers) will come later behind the same trait, so the SQL here stays portable where that costs
//! nothing: `$1` placeholders, `ON CONFLICT … DO UPDATE`, `BIGINT` counters, text ids. What is
//! SQLite's own is kept to the connection setup and the write path: one writer thread that runs
//! each boundary's statements, and those of every other boundary waiting, as one `BEGIN
//! IMMEDIATE` transaction ([`writer`]); reads go through sqlx.
//!
//! The schema lives in `migrations/` and is applied on open, under the write lock; a write-ahead
//! log left by a crash is checked first ([`wal`]), and closing the store empties it; see `migrations/0001_init.sql` for
//! the tables and the storage conventions (RFC 3339 UTC timestamps with nine fractional digits,
//! JSON text for tool calls, reasoning and message metadata).
//!
//! Beside the kernel's [`keel_core::Store`] it implements keel-platform's store traits, each in
//! files of its own concept: [`keel_platform::PlatformStore`] (`platform.rs`: links, keys,
//! personas, the token log report), [`keel_platform::ConversationStore`] (`conversations.rs`),
//! [`keel_platform::MemoryIndex`] (`memory_index.rs`: facts, messages as memories, session
//! search) and [`keel_platform::ScheduleStore`] (`schedules.rs`); the in-memory store
//! ([`MemoryStore`]) implements the same.
//!
//! It depends on keel-core and keel-platform only: the loop, adapters and tools never see SQL,
//! and this crate never sees them.

#![warn(missing_docs)]

mod approvals;
mod batch;
mod channels;
mod checkpointer;
mod codec;
mod connections;
mod conversations;
mod durability;
mod facts;
mod files;
mod lane_policies;
mod lanes;
mod memory;
mod memory_index;
mod message_memory;
mod pages;
mod param;
mod personas;
mod platform;
pub mod postgres;
mod queue;
mod schedules;
mod schema;
mod search_index;
mod session_search;
mod sqlite_store;
mod token_log;
mod user_links;
mod wal;
mod writer;

pub use memory::MemoryStore;
pub use postgres::PgStore;
pub use search_index::check as check_search_index;
pub use sqlite_store::SqliteStore;

use keel_core::StoreError;

use std::path::PathBuf;

/// Where keel keeps its database when the user names none: `keel/keel.db` under the platform's
/// data directory (`~/.local/share` on Linux). `None` when the platform has no such directory.
pub fn default_path() -> Option<PathBuf> {
    dirs::data_dir().map(|dir| dir.join("keel").join("keel.db"))
}

/// Adds what was being done to a database error (sqlx's on reads, the writer's words on writes).
trait OrBackend<T> {
    fn or_backend(self, doing: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T, E: std::fmt::Display> OrBackend<T> for Result<T, E> {
    fn or_backend(self, doing: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::Backend(format!("{}: {e}", doing())))
    }
}
