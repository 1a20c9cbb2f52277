//! `keel users`: users, their monthly token budgets, and what they spent this month.

use std::process::ExitCode;

use chrono::Utc;
use keel_core::UserRecord;
use keel_core::store::usage_month;

use crate::cli::{UsersAction, UsersArgs};
use crate::config::keel_home;
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
                println!("{}  {used} of {budget} tokens in {month}", user.id);
            }
        }
        Some(UsersAction::Set {
            id,
            monthly_tokens,
            unlimited,
        }) => {
            let created_at = store.user(&id).await?.map_or(now, |u| u.created_at);
            let budget = if unlimited { None } else { monthly_tokens };
            store
                .save_user(&UserRecord {
                    id: id.clone(),
                    monthly_token_budget: budget,
                    created_at,
                    updated_at: now,
                })
                .await?;
            match budget {
                Some(n) => println!("{id}: {n} tokens per month"),
                None => println!("{id}: unlimited"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
