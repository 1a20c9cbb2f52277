//! Users and their months: budgets kept, usage added up per month from the runs' token log,
//! held to one contract on `SqliteStore` (in memory and on a file) and `MemoryStore`. Moved from
//! `contract.rs`.

mod common;
use chrono::{DateTime, TimeZone, Utc};
use common::{
    at, memory, openai_run_record as run_record, postgres, sqlite_file, sqlite_in_memory,
};
use keel_core::{Usage, UserRecord};
use keel_platform::DaemonStore;

macro_rules! users_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn users_keep_budgets_and_usage_adds_up_per_month() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                users_and_usage_on(&store).await;
            }
        }
    };
}

users_tests!(memory_store, memory());
users_tests!(sqlite_in_memory_store, sqlite_in_memory());
users_tests!(sqlite_file_store, sqlite_file());
users_tests!(postgres_store, postgres());

async fn users_and_usage_on(store: &dyn DaemonStore) {
    assert_eq!(store.user("ada").await.unwrap(), None);
    let mut ada = UserRecord {
        id: "ada".into(),
        monthly_token_budget: Some(10_000),
        created_at: at(0),
        updated_at: at(0),
        permission: keel_core::Permission::Admin,
    };
    store.save_user(&ada).await.unwrap();
    assert_eq!(store.user("ada").await.unwrap(), Some(ada.clone()));
    // Replacing keeps one record; None means unlimited.
    ada.monthly_token_budget = None;
    ada.updated_at = at(5);
    store.save_user(&ada).await.unwrap();
    let bob = UserRecord {
        id: "bob".into(),
        monthly_token_budget: Some(1),
        created_at: at(1),
        updated_at: at(1),
        permission: keel_core::Permission::Guest,
    };
    store.save_user(&bob).await.unwrap();
    assert_eq!(store.list_users().await.unwrap(), vec![ada, bob]);

    assert_eq!(
        store.monthly_usage("ada", "2026-11").await.unwrap(),
        Usage::default()
    );
    let spend = Usage {
        input_tokens: 100,
        output_tokens: 20,
        cache_read_tokens: 30,
        cache_write_tokens: 5,
    };
    // Usage is what commits charge: a token log row per model call, added to the user's month.
    let november_day = Utc.with_ymd_and_hms(2026, 11, 30, 23, 0, 0).unwrap();
    let december_day = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
    let charge = |user: Option<&str>, model: &str, at: DateTime<Utc>| keel_core::TokenCharge {
        user_id: user.map(str::to_string),
        model: model.into(),
        usage: spend,
        cost: 0.25,
        at,
    };
    let charges = [
        charge(Some("ada"), "gpt-4.1", november_day),
        charge(Some("ada"), "gpt-4.1-mini", november_day),
        charge(Some("ada"), "gpt-4.1", december_day),
        charge(Some("nobody-known"), "gpt-4.1", november_day),
        charge(None, "gpt-4.1", november_day),
    ];
    let run = run_record("charged", "usage", at(0));
    let mut commit = keel_core::store::Commit::new(&run, &[]);
    commit.charges = &charges[..2];
    store.commit(&commit).await.unwrap();
    commit.charges = &charges[2..];
    store.commit(&commit).await.unwrap();
    let november = store.monthly_usage("ada", "2026-11").await.unwrap();
    assert_eq!(november.input_tokens, 200);
    assert_eq!(november.total(), 240);
    assert_eq!(november.cache_read_tokens, 60);
    assert_eq!(
        store.monthly_usage("ada", "2026-12").await.unwrap().total(),
        120
    );
    assert_eq!(
        store
            .monthly_usage("nobody-known", "2026-11")
            .await
            .unwrap()
            .total(),
        120
    );
    let lines = store
        .usage_lines(&keel_platform::UsageQuery {
            user_id: None,
            month: "2026-11".into(),
        })
        .await
        .unwrap();
    let summed: Vec<(Option<&str>, &str, u64, u64)> = lines
        .iter()
        .map(|line| {
            (
                line.user_id.as_deref(),
                line.model.as_str(),
                line.calls,
                line.usage.total(),
            )
        })
        .collect();
    assert_eq!(
        summed,
        [
            (None, "gpt-4.1", 1, 120),
            (Some("ada"), "gpt-4.1", 1, 120),
            (Some("ada"), "gpt-4.1-mini", 1, 120),
            (Some("nobody-known"), "gpt-4.1", 1, 120),
        ]
    );
    assert!((lines.iter().map(|line| line.cost).sum::<f64>() - 1.0).abs() < 1e-9);
    let ada_december = store
        .usage_lines(&keel_platform::UsageQuery {
            user_id: Some("ada".into()),
            month: "2026-12".into(),
        })
        .await
        .unwrap();
    assert_eq!(ada_december.len(), 1);
    assert_eq!(ada_december[0].calls, 1);
}
