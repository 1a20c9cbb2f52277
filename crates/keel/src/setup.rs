//! Putting the pieces together for one invocation: the store, its reconciler pass, and the
//! agent (assembled by keel-config) from the settings and the flags.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use keel_config::store_settings::StoreLocation;
use keel_core::Store;
use keel_core::reconcile::{ReconcilePolicy, ReconcileReport};
use keel_platform::DaemonStore;
use keel_store::{PgStore, SqliteStore};

use crate::config;
use crate::worker::ProcProbe;

pub use keel_config::assembly::{Configured, agent};

/// Reads `keel.toml` (or its last good copy), the environment and the flags.
pub fn load_settings(
    config_file: Option<&Path>,
    home: &Path,
    flags: &crate::cli::AgentArgs,
) -> Result<Configured, config::ConfigError> {
    keel_config::assembly::load_settings(config_file, home, &flags.overrides())
}

/// Where this invocation's store is, as the flags named it: `--database` (or
/// `KEEL_DATABASE_URL`) and `--config`. Set once, by `main`, before any command runs.
static STORE_CHOICE: std::sync::OnceLock<(Option<String>, Option<PathBuf>)> =
    std::sync::OnceLock::new();

/// Remembers `--database` (or `KEEL_DATABASE_URL`) and `--config` for [`open_store`].
pub fn choose_store(database: Option<String>, config_file: Option<PathBuf>) {
    let _ = STORE_CHOICE.set((database, config_file));
}

/// The store this invocation uses: the PostgreSQL database `--database`, `KEEL_DATABASE_URL`
/// or `[store] url` names, else the SQLite file `$KEEL_HOME/keel.db`.
pub fn store_location(home: &Path) -> anyhow::Result<StoreLocation> {
    let (database, config_file) = STORE_CHOICE
        .get()
        .map_or((None, None), |(database, config)| {
            (database.as_deref(), config.as_deref())
        });
    Ok(keel_config::store_settings::load(
        database,
        config_file,
        home,
    )?)
}

/// Opens the store ([`store_location`]), to be closed by [`close_stores`].
pub async fn open_store(home: &Path) -> anyhow::Result<Arc<dyn DaemonStore>> {
    let store: Arc<dyn DaemonStore> = match store_location(home)? {
        StoreLocation::Sqlite(path) => Arc::new(SqliteStore::open(&path).await?),
        StoreLocation::Postgres(url) => Arc::new(PgStore::open(&url).await.with_context(|| {
            format!(
                "cannot open the PostgreSQL store {}",
                keel_store::postgres::redact(&url)
            )
        })?),
    };
    OPENED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(store.clone());
    Ok(store)
}

/// The reconciler pass every start of keel makes: runs whose worker died (its process is gone,
/// or its heartbeat is stale) become `timed_out` (resumable where their checkpoint allows), abandoned pauses `cancelled`. Says so on stderr.
/// The policy comes from `[runs]` when the configuration reads (a broken file must not stop
/// the sweep: the defaults are used then).
pub async fn reconcile(
    store: &dyn Store,
    config_file: Option<&Path>,
    home: &Path,
) -> anyhow::Result<ReconcileReport> {
    let policy = reconcile_policy(config_file, home);
    let report =
        keel_core::reconcile::reconcile_with(store, chrono::Utc::now(), &policy, &ProcProbe::new())
            .await?;
    if report.timed_out > 0 {
        eprintln!(
            "keel: {} run(s) lost their worker and are now timed_out ({} can be resumed: see \
             `keel runs`)",
            report.timed_out, report.resumable
        );
    }
    if report.cancelled > 0 {
        eprintln!(
            "keel: {} paused run(s) were cancelled as asked",
            report.cancelled
        );
    }
    Ok(report)
}

/// `[runs]` of the configuration: when a run's worker counts as gone. The defaults when the
/// file does not read (a broken file must not stop the sweep or the lanes).
pub fn reconcile_policy(config_file: Option<&Path>, home: &Path) -> ReconcilePolicy {
    config::load(config_file, home)
        .map(|loaded| crate::resolve::reconcile_policy(&loaded.file))
        .unwrap_or_default()
}

/// The stores this invocation opened, closed when it ends ([`close_stores`]).
static OPENED: std::sync::Mutex<Vec<Arc<dyn DaemonStore>>> = std::sync::Mutex::new(Vec::new());

/// Closes every store this invocation opened: for SQLite, the write-ahead log is copied back
/// into the database file, so a clean exit leaves no log behind. Called once, at the end.
pub async fn close_stores() {
    let opened = std::mem::take(&mut *OPENED.lock().unwrap_or_else(|e| e.into_inner()));
    for store in opened {
        store.close().await;
    }
}
