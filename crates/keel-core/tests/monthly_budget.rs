//! A user's monthly token budget at exactly its limit: the month is spent, so the next run is
//! refused with the reset date, not started with nothing left.

use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use keel_core::clock::Clock;
use keel_core::store::UserRecord;
use keel_core::{Agent, AgentState, Permission, RunRequest, Store};
use keel_mock::{ScriptedProvider, Step};
use keel_store::MemoryStore;

struct Fixed(DateTime<Utc>);

impl Clock for Fixed {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

#[tokio::test]
async fn a_month_used_to_exactly_its_budget_refuses_the_next_run_with_the_reset_date() {
    let now = Utc.with_ymd_and_hms(2026, 11, 14, 9, 30, 0).unwrap();
    let provider = Arc::new(ScriptedProvider::from_steps(vec![
        // 300 + 200: the month's 500 tokens, to the token.
        Step::text("first answer").with_usage(300, 200),
        Step::text("never asked").with_usage(1, 1),
    ]));
    let store = Arc::new(MemoryStore::new());
    store
        .save_user(&UserRecord {
            id: "ada".into(),
            monthly_token_budget: Some(500),
            created_at: now,
            updated_at: now,
            permission: Permission::User,
        })
        .await
        .unwrap();
    let agent = Agent::builder()
        .provider(provider.clone())
        .model("m")
        .store(store.clone())
        .clock(Arc::new(Fixed(now)))
        .build()
        .unwrap();

    let first = agent.run(RunRequest::new("one").user("ada")).await.unwrap();
    assert_eq!(first.state, AgentState::Completed, "{first:?}");
    assert_eq!(
        store.monthly_usage("ada", "2026-11").await.unwrap().total(),
        500
    );

    let second = agent.run(RunRequest::new("two").user("ada")).await.unwrap();
    assert_eq!(second.state, AgentState::BudgetExceeded, "{second:?}");
    let error = second.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("has used 500 of their 500 tokens for 2026-11"),
        "{error}"
    );
    assert!(
        error.contains("resets at 2026-12-01 00:00 UTC"),
        "the user is told when the month resets: {error}"
    );
    assert_eq!(second.iterations, 0);
    assert_eq!(provider.requests().len(), 1, "no call for the refused run");
}
