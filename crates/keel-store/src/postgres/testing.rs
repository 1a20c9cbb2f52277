//! Throwaway PostgreSQL stores for tests: each is a fresh schema of the database named by
//! `KEEL_TEST_PG` (a `postgres://` URL; `.ci/with-postgres` starts a throwaway cluster and sets
//! it), so tests running at once never see each other's rows. `KEEL_TEST_PG=skip` skips the
//! PostgreSQL tests, saying so; without the variable they fail, never pass silently.

use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;

use super::PgStore;

/// The variable naming the test database.
pub const VARIABLE: &str = "KEEL_TEST_PG";

/// The test database's URL; `None` (after saying so on stderr) when `KEEL_TEST_PG=skip`.
/// Panics with what to do when the variable is missing.
pub fn database_url() -> Option<String> {
    match std::env::var(VARIABLE) {
        Ok(value) if value == "skip" => {
            eprintln!("KEEL_TEST_PG=skip: this PostgreSQL test is skipped");
            None
        }
        Ok(url) => Some(url),
        Err(_) => panic!(
            "the PostgreSQL tests need a database: run them under `.ci/with-postgres` (a \
             throwaway cluster), set KEEL_TEST_PG=postgres://… to an existing one, or \
             KEEL_TEST_PG=skip to skip them"
        ),
    }
}

/// A fresh, empty schema of the test database: its name, and a URL whose connections use it.
pub async fn fresh_schema() -> Option<(String, String)> {
    let url = database_url()?;
    let name = format!("keel_t_{}", uuid::Uuid::now_v7().simple());
    let store_url = super::schemas::create_schema(&url, &name)
        .await
        .unwrap_or_else(|e| panic!("KEEL_TEST_PG ({url}): {e}"));
    Some((name, store_url))
}

/// A store on a fresh schema of the test database (`None` when skipped).
pub async fn store() -> Option<PgStore> {
    let (_, url) = fresh_schema().await?;
    // A test harness: a malformed KEEL_TEST_PG stops the test with what is wrong.
    let options = PgConnectOptions::from_str(&url)
        .unwrap_or_else(|e| panic!("KEEL_TEST_PG is no PostgreSQL URL ({url}): {e}"));
    Some(
        PgStore::open_with(options, 4)
            .await
            .unwrap_or_else(|e| panic!("cannot open the test store: {e}")),
    )
}
