//! The rows a store keeps, read and changed behind its back, on SQLite and on PostgreSQL alike:
//! for the tests of how a store lays a run's records out in its tables. Values are read as
//! text (NULL as `None`) whatever their column's type.

// Each test crate uses its own part of these.
#![allow(dead_code)]

use std::path::PathBuf;

use keel_store::{PgStore, SqliteStore};
use sqlx::Row;

/// A store's database, for statements of the tests' own.
pub enum Raw {
    /// The SQLite file at this path.
    Sqlite(PathBuf),
    /// The PostgreSQL schema these connections use.
    Postgres(sqlx::PgPool),
}

impl Raw {
    /// Runs `sql` (no parameters).
    pub async fn execute(&self, sql: &str) {
        match self {
            Raw::Sqlite(path) => {
                let conn = rusqlite::Connection::open(path).unwrap();
                conn.execute(sql, []).unwrap();
            }
            Raw::Postgres(pool) => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
                    .execute(pool)
                    .await
                    .unwrap();
            }
        }
    }

    /// The rows `sql` selects, each value as text.
    pub async fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        match self {
            Raw::Sqlite(path) => {
                use rusqlite::types::Value;
                let conn = rusqlite::Connection::open(path).unwrap();
                let mut statement = conn.prepare(sql).unwrap();
                let columns = statement.column_count();
                statement
                    .query_map([], |row| {
                        (0..columns)
                            .map(|i| {
                                Ok(match row.get::<_, Value>(i)? {
                                    Value::Null => None,
                                    Value::Integer(n) => Some(n.to_string()),
                                    Value::Real(x) => Some(x.to_string()),
                                    Value::Text(text) => Some(text),
                                    Value::Blob(bytes) => {
                                        Some(String::from_utf8_lossy(&bytes).into_owned())
                                    }
                                })
                            })
                            .collect()
                    })
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
            }
            Raw::Postgres(pool) => {
                let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
                    .fetch_all(pool)
                    .await
                    .unwrap();
                rows.iter()
                    .map(|row| {
                        (0..row.len())
                            .map(|i| {
                                if let Ok(n) = row.try_get::<Option<i64>, _>(i) {
                                    n.map(|n| n.to_string())
                                } else if let Ok(b) = row.try_get::<Option<bool>, _>(i) {
                                    b.map(|b| i64::from(b).to_string())
                                } else {
                                    row.try_get::<Option<String>, _>(i).unwrap()
                                }
                            })
                            .collect()
                    })
                    .collect()
            }
        }
    }

    /// The one integer `sql` selects.
    pub async fn count(&self, sql: &str) -> i64 {
        int(&self.rows(sql).await[0][0])
    }
}

/// A value read as text, as an integer.
pub fn int(value: &Option<String>) -> i64 {
    value.as_deref().unwrap().parse().unwrap()
}

/// A nullable value read as text, as an integer.
pub fn opt_int(value: &Option<String>) -> Option<i64> {
    value.as_deref().map(|text| text.parse().unwrap())
}

/// A SQLite store on a file in a temporary directory, with its rows.
pub async fn sqlite() -> (SqliteStore, Raw, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    let store = SqliteStore::open(&path).await.unwrap();
    (store, Raw::Sqlite(path), dir)
}

/// A PostgreSQL store on a fresh schema, with its rows; `None` when skipped.
pub async fn postgres() -> Option<(PgStore, Raw, ())> {
    let store = keel_store::postgres::testing::store().await?;
    let raw = Raw::Postgres(store.pool().clone());
    Some((store, raw, ()))
}

/// Tests `$name(store: &dyn Store, raw: &Raw)` run on SQLite (module `sqlite`) and on
/// PostgreSQL (module `postgres`).
macro_rules! on_sqlite_and_postgres {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let (store, raw, _dir) = crate::rows::sqlite().await;
                    super::$name(&store, &raw).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let Some((store, raw, ())) = crate::rows::postgres().await else {
                        return;
                    };
                    super::$name(&store, &raw).await;
                }
            )*
        }
    };
}
