//! The store on PostgreSQL ([`PgStore`]): the same contract as [`crate::SqliteStore`], for many
//! `keel serve` workers sharing one database (DESIGN.md section 13). Any worker takes any run:
//! a session's lane is one row that one run holds at a time, claimed in the database, and the
//! unique index `runs_one_executing_per_session` makes two executing runs of one conversation
//! impossible even with a bug above it. The schema is `migrations_postgres/`, applied once
//! under sqlx's advisory lock however many workers start at the same moment.
//!
//! Each trait is implemented in a file of its own: [`keel_core::Store`] in `kernel.rs` (over
//! `runs.rs`, `messages.rs`, `commit.rs`, `durability.rs`, `lanes.rs`, `users.rs`, `files.rs`),
//! keel-platform's in `platform.rs`, `conversations.rs`, `memory_index.rs`, `channels.rs` and
//! `schedules.rs`.

mod channels;
mod commit;
mod conversations;
mod durability;
mod facts;
mod files;
mod kernel;
/// Session lanes shared by many workers (the claim, in a transaction of the caller's too).
pub(crate) mod lanes;
mod memory_index;
mod message_memory;
mod messages;
mod migrate;
mod platform;
mod queue;
mod runs;
mod schedules;
pub mod schemas;
mod search;
mod session_search;
mod signals;
pub mod testing;
/// Text with NUL characters in PostgreSQL's `TEXT`.
pub(crate) mod text;
mod users;

use std::str::FromStr;
use std::time::Duration;

use keel_core::StoreError;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

/// keel's durable state in a PostgreSQL database shared by any number of processes.
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
    /// This store's name among the workers, unique to each opened store (its clones share it):
    /// whose the outbox items it takes to deliver are (see `channels.rs`).
    taker: String,
    /// The `LISTEN` relay of the workers' signals (see `signals.rs`), shared by the clones.
    signals: std::sync::Arc<signals::Relay>,
    /// The row counts and total lengths of the large search indexes, as last counted (see
    /// `search.rs`).
    search_totals: std::sync::Arc<search::Totals>,
}

/// Connections a store opens at most, unless the URL's `max_connections` parameter says
/// otherwise.
const MAX_CONNECTIONS: u32 = 16;

impl PgStore {
    /// Opens the database at `url` (`postgres://user@host:port/db`; `?options=-c
    /// search_path=…` picks a schema) and brings its schema up to date.
    pub async fn open(url: &str) -> Result<PgStore, StoreError> {
        let options = PgConnectOptions::from_str(url).map_err(|e| {
            StoreError::Backend(format!("`{}` is no PostgreSQL URL: {e}", redact(url)))
        })?;
        PgStore::open_with(options, MAX_CONNECTIONS).await
    }

    /// Opens the database `options` name, with at most `max_connections` connections, and
    /// brings its schema up to date.
    pub async fn open_with(
        options: PgConnectOptions,
        max_connections: u32,
    ) -> Result<PgStore, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(2))
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .map_err(|e| StoreError::Backend(format!("cannot connect to PostgreSQL: {e}")))?;
        migrate::apply(&pool).await?;
        let taker = format!(
            "pid {} store {}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        );
        Ok(PgStore {
            pool,
            taker,
            signals: std::sync::Arc::new(signals::Relay::new()),
            search_totals: Default::default(),
        })
    }

    /// The connection pool (for the workers' notifications and the tests).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Closes every connection; later calls fail.
    pub async fn close(&self) {
        self.signals.stop();
        self.pool.close().await;
    }
}

/// `url` without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme + 3],
                    &credentials[..colon],
                    &url[at..]
                ),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            redact("postgres://keel:s3cret@db:5432/keel"),
            "postgres://keel:***@db:5432/keel"
        );
        assert_eq!(redact("postgres://keel@db/keel"), "postgres://keel@db/keel");
    }
}
