//! Schemas of a PostgreSQL database as separate keel stores: a test or a benchmark makes a
//! fresh one, and a URL whose connections use it (`options=-c search_path=…`), so many stores
//! share one server without seeing each other's rows.

use sqlx::Connection;
use sqlx::postgres::PgConnection;

use keel_core::StoreError;

/// Creates schema `name` in the database at `url`; the URL of a store in it. `name` must be
/// a plain identifier (letters, digits, `_`), which it is checked to be.
pub async fn create_schema(url: &str, name: &str) -> Result<String, StoreError> {
    check(name)?;
    let mut conn = PgConnection::connect(url).await.map_err(|e| {
        StoreError::Backend(format!("cannot connect to {}: {e}", super::redact(url)))
    })?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
        .execute(&mut conn)
        .await
        .map_err(|e| StoreError::Backend(format!("cannot create schema {name}: {e}")))?;
    let _ = conn.close().await;
    Ok(schema_url(url, name))
}

/// Drops schema `name` and everything in it.
pub async fn drop_schema(url: &str, name: &str) -> Result<(), StoreError> {
    check(name)?;
    let mut conn = PgConnection::connect(url).await.map_err(|e| {
        StoreError::Backend(format!("cannot connect to {}: {e}", super::redact(url)))
    })?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {name} CASCADE"
    )))
    .execute(&mut conn)
    .await
    .map_err(|e| StoreError::Backend(format!("cannot drop schema {name}: {e}")))?;
    let _ = conn.close().await;
    Ok(())
}

/// `url` with its connections' `search_path` set to schema `name`.
pub fn schema_url(url: &str, name: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20search_path%3D{name}")
}

fn check(name: &str) -> Result<(), StoreError> {
    let plain = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        Ok(())
    } else {
        Err(StoreError::Backend(format!(
            "`{name}` is no plain schema name (lowercase letters, digits and _)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_reach_the_sql() {
        assert!(check("keel_bench_0193").is_ok());
        for bad in ["", "Keel", "a;drop", "a b", "1abc", "x\"y"] {
            assert!(check(bad).is_err(), "{bad}");
        }
        assert_eq!(
            schema_url("postgres://k@h/db", "s1"),
            "postgres://k@h/db?options=-c%20search_path%3Ds1"
        );
        assert_eq!(
            schema_url("postgres://k@h/db?sslmode=disable", "s1"),
            "postgres://k@h/db?sslmode=disable&options=-c%20search_path%3Ds1"
        );
    }
}
