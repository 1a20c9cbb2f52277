//! `keel keys`: the daemon's API keys. A key is printed once, when made; only its hash is
//! stored, so a lost key is revoked and replaced, never recovered.

use std::process::ExitCode;

use chrono::Utc;
use keel_server::keys::new_key;

use crate::cli::{KeysAction, KeysArgs};
use crate::config::{ConfigError, keel_home};
use crate::setup;

/// Runs `keel keys`.
pub async fn keys(args: KeysArgs) -> anyhow::Result<ExitCode> {
    let home = keel_home()?;
    let store = setup::open_store(&home).await?;
    match args.action {
        KeysAction::Create {
            user,
            admin,
            platform,
        } => {
            for name in &platform {
                keel_platform::place::check_platform_text("--platform", name, true)
                    .map_err(ConfigError)?;
            }
            let now = Utc::now();
            let made =
                new_key(user, admin, platform, now).map_err(|e| ConfigError(e.to_string()))?;
            // A key acts as its user: a user it names is made (a plain user, no budget) so its
            // runs are theirs, not a guest's.
            if let Some(id) = &made.record.user_id
                && store.user(id).await?.is_none()
            {
                store
                    .save_user(&keel_core::UserRecord {
                        id: id.clone(),
                        monthly_token_budget: None,
                        created_at: now,
                        updated_at: now,
                        permission: keel_core::Permission::User,
                    })
                    .await?;
            }
            store.save_api_key(&made.record).await?;
            let mut scope = match (&made.record.user_id, made.record.admin) {
                (Some(user), true) => format!("admin, as user {user}"),
                (None, true) => "admin".to_string(),
                (Some(user), false) => format!("user {user}"),
                (None, false) => "channel".to_string(),
            };
            if !made.record.platforms.is_empty() {
                scope.push_str(&format!(", for {}", made.record.platforms.join(", ")));
            }
            eprintln!(
                "keel: key {} ({scope}); it is shown once, keep it secret:",
                made.record.id
            );
            println!("{}", made.key);
        }
        KeysAction::List => {
            let keys = store.list_api_keys().await?;
            if keys.is_empty() {
                println!("no keys yet: make one with `keel keys create --user ID` or `--admin`");
            }
            for key in keys {
                let who = key.user_id.as_deref().unwrap_or("-");
                let role = match (key.admin, &key.user_id) {
                    (true, _) => "admin",
                    (false, Some(_)) => "user",
                    (false, None) => "channel",
                };
                let platforms = if key.platforms.is_empty() {
                    String::new()
                } else {
                    format!("  platforms {}", key.platforms.join(","))
                };
                let state = key.revoked_at.map_or("active".to_string(), |at| {
                    format!("revoked {}", at.format("%Y-%m-%d %H:%M:%S"))
                });
                println!(
                    "{}  {role:<7}  {who}  made {}  {state}{platforms}",
                    key.id,
                    key.created_at.format("%Y-%m-%d %H:%M:%S")
                );
            }
        }
        KeysAction::Revoke { key_id } => {
            if !store.revoke_api_key(&key_id, Utc::now()).await? {
                return Err(ConfigError(format!(
                    "no active key `{key_id}`: `keel keys list` shows the keys"
                ))
                .into());
            }
            println!("revoked {key_id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
