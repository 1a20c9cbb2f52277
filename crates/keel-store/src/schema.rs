//! The schema migrations, compiled in (no sqlx macros): each file in `migrations/` is one
//! version. Applied migrations are recorded in `_sqlx_migrations` with a checksum, so a file must
//! never change once released; a schema change is a new file with the next version.

use sqlx::SqlSafeStr;
use sqlx::migrate::{MigrateError, Migration, MigrationType, Migrator};
use sqlx::sqlite::SqliteConnection;

/// The migrator holding every schema version, in order.
fn migrator() -> Migrator {
    Migrator::with_migrations(vec![
        Migration::new(
            1,
            "init".into(),
            MigrationType::Simple,
            include_str!("../migrations/0001_init.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            "users".into(),
            MigrationType::Simple,
            include_str!("../migrations/0002_users.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            3,
            "summaries".into(),
            MigrationType::Simple,
            include_str!("../migrations/0003_summaries.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            4,
            "durability".into(),
            MigrationType::Simple,
            include_str!("../migrations/0004_durability.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            5,
            "checkpoint frames".into(),
            MigrationType::Simple,
            include_str!("../migrations/0005_checkpoint_frames.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            6,
            "session lanes".into(),
            MigrationType::Simple,
            include_str!("../migrations/0006_session_lanes.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            7,
            "run launch".into(),
            MigrationType::Simple,
            include_str!("../migrations/0007_run_launch.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            8,
            "daemon".into(),
            MigrationType::Simple,
            include_str!("../migrations/0008_daemon.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            9,
            "user links".into(),
            MigrationType::Simple,
            include_str!("../migrations/0009_user_links.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            10,
            "token log".into(),
            MigrationType::Simple,
            include_str!("../migrations/0010_token_log.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            11,
            "platform".into(),
            MigrationType::Simple,
            include_str!("../migrations/0011_platform.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            12,
            "files".into(),
            MigrationType::Simple,
            include_str!("../migrations/0012_files.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            13,
            "approvals".into(),
            MigrationType::Simple,
            include_str!("../migrations/0013_approvals.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            16,
            "session search".into(),
            MigrationType::Simple,
            include_str!("../migrations/0016_session_search.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            17,
            "known facts".into(),
            MigrationType::Simple,
            include_str!("../migrations/0017_known_facts.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            18,
            "message memory".into(),
            MigrationType::Simple,
            include_str!("../migrations/0018_message_memory.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            19,
            "search index per transaction".into(),
            MigrationType::Simple,
            include_str!("../migrations/0019_search_index_per_transaction.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            20,
            "events per commit".into(),
            MigrationType::Simple,
            include_str!("../migrations/0020_events_per_commit.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            21,
            "active runs without a list".into(),
            MigrationType::Simple,
            include_str!("../migrations/0021_active_runs_without_a_list.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            22,
            "token log without run index".into(),
            MigrationType::Simple,
            include_str!("../migrations/0022_token_log_without_run_index.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            23,
            "events with their checkpoint".into(),
            MigrationType::Simple,
            include_str!("../migrations/0023_events_with_their_checkpoint.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            24,
            "lane fence in the commit".into(),
            MigrationType::Simple,
            include_str!("../migrations/0024_lane_fence_in_the_commit.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            25,
            "tool calls with their checkpoint".into(),
            MigrationType::Simple,
            include_str!("../migrations/0025_tool_calls_with_their_checkpoint.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            26,
            "platform conversation keys".into(),
            MigrationType::Simple,
            include_str!("../migrations/0026_platform_conversation_keys.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            27,
            "message model and pins".into(),
            MigrationType::Simple,
            include_str!("../migrations/0027_message_model_and_pins.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            28,
            "channels".into(),
            MigrationType::Simple,
            include_str!("../migrations/0028_channels.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            29,
            "lane policies".into(),
            MigrationType::Simple,
            include_str!("../migrations/0029_lane_policies.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            30,
            "schedules".into(),
            MigrationType::Simple,
            include_str!("../migrations/0030_schedules.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            31,
            "runs by state".into(),
            MigrationType::Simple,
            include_str!("../migrations/0031_runs_by_state.sql").into_sql_str(),
            false,
        ),
    ])
}

/// Applies the migrations this build knows and has not applied yet; returns what went wrong, in
/// words, otherwise.
pub(crate) async fn migrate(conn: &mut SqliteConnection) -> Result<(), String> {
    migrator().run(conn).await.map_err(|e| match e {
        MigrateError::VersionMissing(version) => format!(
            "the database has schema version {version}, which this build of keel does not know: \
             it was written by a newer keel"
        ),
        other => format!("cannot update the schema: {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_unique_and_ascending() {
        let migrator = migrator();
        let versions: Vec<i64> = migrator.iter().map(|m| m.version).collect();
        let mut sorted = versions.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(versions, sorted);
        assert_eq!(versions.first(), Some(&1));
    }
}
