//! Opening the PostgreSQL store: workers that start at the same moment on one empty database
//! apply each schema version once and all open; a wrong URL is a clear error.

use std::str::FromStr;

use keel_store::PgStore;
use keel_store::postgres::testing;
use sqlx::postgres::PgConnectOptions;

#[tokio::test]
async fn eight_workers_starting_at_once_apply_the_schema_once() {
    let Some((_, url)) = testing::fresh_schema().await else {
        return;
    };
    let opens = (0..8).map(|_| {
        let options = PgConnectOptions::from_str(&url).unwrap();
        tokio::spawn(async move { PgStore::open_with(options, 2).await })
    });
    let mut stores = Vec::new();
    for open in opens {
        stores.push(open.await.unwrap().expect("every worker opens"));
    }
    let applied: Vec<(i64, bool)> =
        sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(stores[0].pool())
            .await
            .unwrap();
    // One row per version: as many as there are files in `migrations_postgres/`.
    let versions = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations_postgres"))
        .unwrap()
        .filter(|file| {
            file.as_ref()
                .is_ok_and(|file| file.file_name().to_string_lossy().ends_with(".sql"))
        })
        .count();
    assert_eq!(applied.len(), versions, "one row per version: {applied:?}");
    assert!(applied.windows(2).all(|w| w[0].0 < w[1].0), "{applied:?}");
    assert!(applied.iter().all(|(_, success)| *success));
    for store in stores {
        store.close().await;
    }
}

#[tokio::test]
async fn a_bad_url_says_what_is_wrong_without_the_password() {
    let error = PgStore::open("postgres://keel:hunter2@127.0.0.1:1/nowhere?sslmode=bogus")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("PostgreSQL"), "{error}");
    assert!(!error.contains("hunter2"), "{error}");
}
