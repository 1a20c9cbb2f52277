//! `[store]` of keel.toml: where keel keeps its durable state. The SQLite file
//! `$KEEL_HOME/keel.db` unless a PostgreSQL URL is named — by `--database`, the environment's
//! `KEEL_DATABASE_URL`, or `[store] url`, in that order — which many `keel serve` workers and
//! every `keel` command can share (DESIGN.md section 13).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::{self, ConfigError};

/// The environment variable naming the PostgreSQL database (below `--database`, above
/// `[store] url`).
pub const DATABASE_URL_ENV: &str = "KEEL_DATABASE_URL";

/// `[store]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// A PostgreSQL database (`postgres://user:password@host:5432/keel`) instead of the SQLite
    /// file `$KEEL_HOME/keel.db`.
    pub url: Option<String>,
}

/// Where the store is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreLocation {
    /// A SQLite file, used by one process at a time.
    Sqlite(PathBuf),
    /// A PostgreSQL database, shared by any number of workers.
    Postgres(String),
}

impl StoreConfig {
    /// Says what is wrong, naming the key.
    pub fn validate(&self) -> Result<(), String> {
        match &self.url {
            Some(url) => check_url(url, "[store] url").map(drop),
            None => Ok(()),
        }
    }
}

/// Whether `url` names a PostgreSQL database.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// `url` trimmed when it is a PostgreSQL URL; what is wrong, naming `source`, otherwise.
fn check_url(url: &str, source: &str) -> Result<String, String> {
    let url = url.trim();
    if is_postgres_url(url) {
        Ok(url.to_string())
    } else {
        Err(format!(
            "{source} must be a PostgreSQL URL (postgres://user@host:5432/keel); without one \
             keel uses the SQLite file $KEEL_HOME/keel.db"
        ))
    }
}

/// The store in use: `explicit` (`--database`, or `KEEL_DATABASE_URL` through it) wins over
/// `[store] url`; neither is the SQLite file in `home`.
pub fn resolve(
    explicit: Option<&str>,
    file: &StoreConfig,
    home: &Path,
) -> Result<StoreLocation, String> {
    if let Some(url) = explicit.filter(|url| !url.trim().is_empty()) {
        return check_url(url, "--database (or KEEL_DATABASE_URL)").map(StoreLocation::Postgres);
    }
    match &file.url {
        Some(url) => check_url(url, "[store] url").map(StoreLocation::Postgres),
        None => Ok(StoreLocation::Sqlite(home.join("keel.db"))),
    }
}

/// The store of the configuration in use. An explicit URL needs no file. A file that does not
/// read keeps the SQLite store as before — unless it has a `[store]` table, whose URL it may
/// have meant: then its error stands (no command opens another store than the one named).
pub fn load(
    explicit: Option<&str>,
    config_file: Option<&Path>,
    home: &Path,
) -> Result<StoreLocation, ConfigError> {
    if explicit.is_some_and(|url| !url.trim().is_empty()) {
        return resolve(explicit, &StoreConfig::default(), home).map_err(ConfigError);
    }
    match config::load(config_file, home) {
        Ok(loaded) => resolve(None, &loaded.file.store, home).map_err(ConfigError),
        Err(error) => {
            let path = config_file.map_or_else(|| home.join("keel.toml"), Path::to_path_buf);
            let names_store = std::fs::read_to_string(path)
                .is_ok_and(|text| text.lines().any(|line| line.trim().starts_with("[store")));
            if names_store {
                Err(error)
            } else {
                Ok(StoreLocation::Sqlite(home.join("keel.db")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> Result<StoreConfig, String> {
        let file = config::parse_file(text)?;
        file.validate()?;
        Ok(file.store)
    }

    #[test]
    fn sqlite_unless_a_url_is_named_and_the_flag_wins() {
        let home = Path::new("/home/k");
        let none = file("").unwrap();
        assert_eq!(
            resolve(None, &none, home).unwrap(),
            StoreLocation::Sqlite(home.join("keel.db"))
        );
        let named = file("[store]\nurl = \"postgres://keel@db/keel\"\n").unwrap();
        assert_eq!(
            resolve(None, &named, home).unwrap(),
            StoreLocation::Postgres("postgres://keel@db/keel".into())
        );
        assert_eq!(
            resolve(Some("postgresql://other/x"), &named, home).unwrap(),
            StoreLocation::Postgres("postgresql://other/x".into())
        );
        assert_eq!(
            resolve(Some("  "), &none, home).unwrap(),
            StoreLocation::Sqlite(home.join("keel.db"))
        );
    }

    #[test]
    fn what_is_no_postgres_url_is_named() {
        let error = file("[store]\nurl = \"mysql://db\"\n").unwrap_err();
        assert!(error.contains("[store] url"), "{error}");
        let error = file("[store]\npath = \"x\"\n").unwrap_err();
        assert!(error.contains("path"), "{error}");
        let error = resolve(
            Some("/tmp/keel.db"),
            &StoreConfig::default(),
            Path::new("/h"),
        )
        .unwrap_err();
        assert!(error.contains("--database"), "{error}");
    }

    #[test]
    fn a_broken_file_keeps_sqlite_unless_it_has_a_store_table() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("keel.toml"), "model = \n").unwrap();
        assert_eq!(
            load(None, None, home.path()).unwrap(),
            StoreLocation::Sqlite(home.path().join("keel.db"))
        );
        std::fs::write(
            home.path().join("keel.toml"),
            "model = \n[store]\nurl = \"postgres://db/keel\"\n",
        )
        .unwrap();
        assert!(load(None, None, home.path()).is_err());
        assert_eq!(
            load(Some("postgres://x/y"), None, home.path()).unwrap(),
            StoreLocation::Postgres("postgres://x/y".into())
        );
    }
}
