//! The PostgreSQL schema's migrations, compiled in (no sqlx macros): each file in
//! `migrations_postgres/` is one version, recorded in `_sqlx_migrations` with a checksum. sqlx
//! takes a session-level advisory lock around the whole run, so workers starting at the same
//! moment apply each version once: the others wait, then find it applied.

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::PgPool;

use keel_core::StoreError;

/// The migrator holding every schema version, in order.
fn migrator() -> Migrator {
    Migrator::with_migrations(vec![
        Migration::new(
            1,
            "schema".into(),
            MigrationType::Simple,
            include_str!("../../migrations_postgres/0001_schema.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            4,
            "memory search".into(),
            MigrationType::Simple,
            include_str!("../../migrations_postgres/0004_memory_search.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            5,
            "outbox takers".into(),
            MigrationType::Simple,
            include_str!("../../migrations_postgres/0005_outbox_takers.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            6,
            "runs by state".into(),
            MigrationType::Simple,
            include_str!("../../migrations_postgres/0006_runs_by_state.sql").into_sql_str(),
            false,
        ),
    ])
}

/// Brings the database's schema up to date.
pub(super) async fn apply(pool: &PgPool) -> Result<(), StoreError> {
    migrator().run(pool).await.map_err(|e| {
        StoreError::Backend(format!(
            "cannot bring the PostgreSQL schema up to date: {e}"
        ))
    })
}
