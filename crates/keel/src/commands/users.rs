//! `keel users`: users, their monthly token budgets, permissions and platform links, and what
//! they spent this month.

use std::process::ExitCode;

use chrono::Utc;
use keel_core::store::usage_month;
use keel_core::{Permission, UserRecord};
use keel_platform::PlatformLink;

use crate::cli::{UsersAction, UsersArgs};
use crate::config::{ConfigError, keel_home};
use crate::setup;

/// Runs `keel users`.
pub async fn users(args: UsersArgs) -> anyhow::Result<ExitCode> {
    let home = keel_home()?;
    let store = setup::open_store(&home).await?;
    let now = Utc::now();
    let month = usage_month(now);
    match args.action {
        None => {
            let users = store.list_users().await?;
            if users.is_empty() {
                println!("no users yet: set a budget with `keel users set ID --monthly-tokens N`");
            }
            for user in users {
                let used = store.monthly_usage(&user.id, &month).await?.total();
                let budget = user
                    .monthly_token_budget
                    .map_or("unlimited".to_string(), |b| b.to_string());
                let links: Vec<String> = store
                    .user_links(&user.id)
                    .await?
                    .into_iter()
                    .map(|link| format!("{}:{}", link.platform, link.platform_user_id))
                    .collect();
                let links = if links.is_empty() {
                    String::new()
                } else {
                    format!("  {}", links.join(" "))
                };
                println!(
                    "{}  {used} of {budget} tokens in {month}  {}{links}",
                    user.id,
                    permission_name(user.permission)
                );
            }
        }
        Some(UsersAction::Set {
            id,
            monthly_tokens,
            unlimited,
            permission,
        }) => {
            if monthly_tokens.is_none() && !unlimited && permission.is_none() {
                return Err(ConfigError(
                    "say what to set: --monthly-tokens N, --unlimited or --permission LEVEL".into(),
                )
                .into());
            }
            let stored = store.user(&id).await?;
            let mut user = stored.unwrap_or(UserRecord {
                id: id.clone(),
                monthly_token_budget: None,
                created_at: now,
                updated_at: now,
                permission: Permission::User,
            });
            if unlimited {
                user.monthly_token_budget = None;
            } else if monthly_tokens.is_some() {
                user.monthly_token_budget = monthly_tokens;
            }
            if let Some(level) = permission {
                user.permission = level.into();
            }
            user.updated_at = now;
            store.save_user(&user).await?;
            let budget = user
                .monthly_token_budget
                .map_or("unlimited".to_string(), |n| format!("{n} tokens per month"));
            println!("{id}: {budget}, {}", permission_name(user.permission));
        }
        Some(UsersAction::Link {
            id,
            platform,
            platform_user_id,
            username,
        }) => {
            if store.user(&id).await?.is_none() {
                return Err(ConfigError(format!(
                    "no user `{id}`: make it first with `keel users set {id} --permission user`"
                ))
                .into());
            }
            let link = PlatformLink {
                platform: platform.clone(),
                platform_user_id: platform_user_id.clone(),
                user_id: id.clone(),
                username,
                created_at: now,
            };
            store.link_user(&link).await.map_err(|e| {
                ConfigError(format!("cannot link {platform}:{platform_user_id}: {e}"))
            })?;
            println!("{platform}:{platform_user_id} is {id}");
        }
        Some(UsersAction::Pair { code, user }) => {
            let code = code.trim().to_ascii_uppercase();
            if let Some(id) = &user
                && store.user(id).await?.is_none()
            {
                return Err(ConfigError(format!(
                    "no user `{id}`: make it first with `keel users set {id} --permission user`"
                ))
                .into());
            }
            let Some(pairing) = store.take_pairing(&code).await? else {
                return Err(ConfigError(format!(
                    "no pending pairing has the code `{code}` (a code works once)"
                ))
                .into());
            };
            let who = format!("{}:{}", pairing.platform, pairing.platform_user_id);
            let linked = store
                .user_by_link(&pairing.platform, &pairing.platform_user_id)
                .await?;
            let id = match (user, linked) {
                (Some(id), _) => id,
                (None, Some(linked)) => linked.id,
                (None, None) => who.clone(),
            };
            let mut record = store.user(&id).await?.unwrap_or(UserRecord {
                id: id.clone(),
                monthly_token_budget: None,
                created_at: now,
                updated_at: now,
                permission: Permission::User,
            });
            // A paired sender is a user at least: a guest talks only where everyone may.
            if record.permission == Permission::Guest {
                record.permission = Permission::User;
            }
            record.updated_at = now;
            store.save_user(&record).await?;
            let link = PlatformLink {
                platform: pairing.platform.clone(),
                platform_user_id: pairing.platform_user_id.clone(),
                user_id: id.clone(),
                username: pairing.username.clone(),
                created_at: now,
            };
            store
                .link_user(&link)
                .await
                .map_err(|e| ConfigError(format!("cannot link {who}: {e}")))?;
            let name = pairing
                .username
                .map_or(String::new(), |name| format!(" ({name})"));
            println!(
                "{who}{name} is paired as {id}, {}",
                permission_name(record.permission)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A permission as `keel users` shows it.
pub fn permission_name(permission: Permission) -> &'static str {
    match permission {
        Permission::Guest => "guest",
        Permission::User => "user",
        Permission::Admin => "admin",
        Permission::Owner => "owner",
    }
}
