//! The console's lists and pages over real HTTP: what a user sees against an admin, another
//! user's conversation and run as 404, the filters, paging, and stored text shown as text.

mod common;

use chrono::TimeDelta;
use common::{Daemon, conversation, run};
use keel_core::AgentState;

const HOSTILE: &str = "<script>alert(1)</script><img src=x onerror=alert(2)>";

/// Ann's two conversations (one on telegram), Bob's one, and their runs.
async fn seeded() -> Daemon {
    let daemon = Daemon::start().await;
    conversation(
        &daemon,
        "conv-ann-api",
        Some("ann"),
        None,
        "ann asks about rust",
    )
    .await;
    conversation(
        &daemon,
        "conv-ann-tg",
        Some("ann"),
        Some("telegram"),
        HOSTILE,
    )
    .await;
    conversation(&daemon, "conv-bob", Some("bob"), None, "bob's secret plans").await;
    let hour = TimeDelta::hours(1);
    run(
        &daemon,
        "run-ann-1",
        "conv-ann-api",
        AgentState::Completed,
        hour * 48,
        1000,
    )
    .await;
    run(
        &daemon,
        "run-ann-2",
        "conv-ann-api",
        AgentState::Error,
        hour * 2,
        2000,
    )
    .await;
    run(
        &daemon,
        "run-ann-3",
        "conv-ann-tg",
        AgentState::WaitingOnHuman,
        TimeDelta::minutes(5),
        3000,
    )
    .await;
    run(
        &daemon,
        "run-bob-1",
        "conv-bob",
        AgentState::Completed,
        TimeDelta::minutes(1),
        4000,
    )
    .await;
    daemon
}

#[tokio::test]
async fn a_user_sees_their_own_and_never_another_users() {
    let daemon = seeded().await;
    let key = daemon.key(Some("ann"), false).await;
    let mut ann = daemon.browser();
    ann.sign_in(&key).await;

    let runs = ann.get("/runs").await;
    assert_eq!(runs.status, 200);
    for own in ["run-ann-1", "run-ann-2", "run-ann-3"] {
        assert!(runs.body.contains(own), "{own}");
    }
    assert!(!runs.body.contains("run-bob-1") && !runs.body.contains("bob"));
    assert!(
        runs.body.contains("m-used")
            && runs.body.contains("3,000")
            && runs.body.contains("$0.5000")
    );

    let conversations = ann.get("/conversations").await;
    assert!(
        conversations.body.contains("conv-ann-api") && !conversations.body.contains("conv-bob")
    );

    let theirs = ann.get("/conversations/conv-bob").await;
    assert_eq!(theirs.status, 404);
    assert!(!theirs.body.contains("secret plans"));
    assert_eq!(ann.get("/conversations/no-such").await.status, 404);
    assert_eq!(ann.get("/runs/run-bob-1").await.status, 404);
    assert_eq!(ann.get("/runs/run-ann-1").await.status, 200);
    let own = ann.get("/conversations/conv-ann-api").await;
    assert_eq!(own.status, 200);
    assert!(own.body.contains("run-ann-1") && own.body.contains("run-ann-2"));

    // Asking for another user's runs by name shows nothing.
    let asked = ann.get("/runs?user=bob").await;
    assert_eq!(asked.status, 200);
    assert!(!asked.body.contains("run-bob-1") && !asked.body.contains("run-ann-1"));

    let admin_key = daemon.key(None, true).await;
    let mut admin = daemon.browser();
    admin.sign_in(&admin_key).await;
    let all = admin.get("/runs").await;
    assert!(all.body.contains("run-bob-1") && all.body.contains("run-ann-1"));
    assert_eq!(admin.get("/conversations/conv-bob").await.status, 200);
    let bobs = admin.get("/runs?user=bob").await;
    assert!(bobs.body.contains("run-bob-1") && !bobs.body.contains("run-ann-1"));
}

#[tokio::test]
async fn lists_filter_by_state_platform_and_age() {
    let daemon = seeded().await;
    let key = daemon.key(None, true).await;
    let mut admin = daemon.browser();
    admin.sign_in(&key).await;
    let ids = |body: &str| {
        ["run-ann-1", "run-ann-2", "run-ann-3", "run-bob-1"]
            .into_iter()
            .filter(|id| body.contains(id))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(&admin.get("/runs?state=completed").await.body),
        ["run-ann-1", "run-bob-1"]
    );
    assert_eq!(
        ids(&admin.get("/runs?state=error&age=").await.body),
        ["run-ann-2"]
    );
    assert_eq!(
        ids(&admin.get("/runs?platform=telegram").await.body),
        ["run-ann-3"]
    );
    assert_eq!(
        ids(&admin.get("/runs?platform=api").await.body),
        ["run-ann-1", "run-ann-2", "run-bob-1"]
    );
    assert_eq!(
        ids(&admin.get("/runs?age=1h").await.body),
        ["run-ann-3", "run-bob-1"]
    );
    assert_eq!(
        ids(&admin.get("/runs?age=24h&user=ann").await.body),
        ["run-ann-2", "run-ann-3"]
    );
    assert_eq!(admin.get("/runs?state=bogus").await.status, 400);
    assert_eq!(admin.get("/runs?age=3y").await.status, 400);

    let waiting = admin.get("/conversations?state=waiting_on_human").await;
    assert!(waiting.body.contains("conv-ann-tg") && !waiting.body.contains("conv-bob"));
    let telegram = admin.get("/conversations?platform=telegram").await;
    assert!(telegram.body.contains("conv-ann-tg") && !telegram.body.contains("conv-ann-api"));

    // The home page lists the run waiting on a person.
    let home = admin.get("/").await;
    assert!(home.body.contains("run-ann-3"));
}

#[tokio::test]
async fn a_long_list_pages_by_cursor() {
    let daemon = Daemon::start().await;
    conversation(&daemon, "conv", Some("ann"), None, "many runs").await;
    for i in 0..60 {
        let id = format!("run-{i:03}");
        run(
            &daemon,
            &id,
            "conv",
            AgentState::Completed,
            TimeDelta::minutes(60 - i),
            1,
        )
        .await;
    }
    let key = daemon.key(Some("ann"), false).await;
    let mut ann = daemon.browser();
    ann.sign_in(&key).await;
    let first = ann.get("/runs").await;
    assert!(first.body.contains("run-059") && first.body.contains("run-010"));
    assert!(!first.body.contains("run-009"));
    let next = first
        .body
        .split("rel=\"next\"")
        .next()
        .and_then(|before| before.rsplit("href=\"").next())
        .map(|href| href.split('"').next().unwrap().replace("&amp;", "&"))
        .unwrap();
    assert_eq!(next, "/runs?before=run-010");
    let second = ann.get(&next).await;
    assert!(second.body.contains("run-009") && second.body.contains("run-000"));
    assert!(!second.body.contains("run-010") && !second.body.contains("rel=\"next\""));
}

#[tokio::test]
async fn stored_text_is_shown_as_text() {
    let daemon = seeded().await;
    let key = daemon.key(Some("ann"), false).await;
    let mut ann = daemon.browser();
    ann.sign_in(&key).await;
    for path in ["/conversations", "/conversations/conv-ann-tg", "/runs"] {
        let page = ann.get(path).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(
            !page.body.contains("<script>alert") && !page.body.contains("<img src=x"),
            "{path}"
        );
        if path != "/runs" {
            assert!(
                page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
                "{path}"
            );
        }
    }
}

#[tokio::test]
async fn usage_schedules_and_channels_pages_answer() {
    let daemon = seeded().await;
    let key = daemon.key(Some("ann"), false).await;
    let mut ann = daemon.browser();
    ann.sign_in(&key).await;
    let usage = ann.get("/usage").await;
    assert_eq!(usage.status, 200);
    assert!(usage.body.contains("ann") && !usage.body.contains("bob"));
    assert_eq!(ann.get("/usage?month=2026-13").await.status, 400);
    assert_eq!(ann.get("/schedules").await.status, 200);
    let channels = ann.get("/channels").await;
    assert_eq!(channels.status, 200);
    assert!(channels.body.contains("for admins"));
}

#[tokio::test]
async fn usage_shows_the_month_and_what_is_left_of_a_budget() {
    use keel_core::Store;
    let daemon = seeded().await;
    let now = chrono::Utc::now();
    daemon
        .store
        .save_user(&keel_core::UserRecord {
            id: "ann".into(),
            monthly_token_budget: Some(10_000),
            created_at: now,
            updated_at: now,
            permission: Default::default(),
        })
        .await
        .unwrap();
    let record = daemon.store.run("run-ann-1").await.unwrap().unwrap();
    let charge = |user: &str, tokens: u64| keel_core::token_log::TokenCharge {
        user_id: Some(user.into()),
        model: "m-used".into(),
        usage: keel_core::Usage {
            input_tokens: tokens,
            output_tokens: 0,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
        },
        cost: 0.25,
        at: now,
    };
    let charges = [charge("ann", 3000), charge("bob", 777)];
    daemon
        .store
        .commit(&keel_core::store::Commit {
            charges: &charges,
            ..keel_core::store::Commit::new(&record, &[])
        })
        .await
        .unwrap();
    let key = daemon.key(Some("ann"), false).await;
    let mut ann = daemon.browser();
    ann.sign_in(&key).await;
    let usage = ann.get("/usage").await;
    assert!(usage.body.contains("10,000 tokens"), "{}", usage.body);
    assert!(usage.body.contains("7,000 tokens") && usage.body.contains("3,000"));
    assert!(!usage.body.contains("bob") && !usage.body.contains("777"));
    let other_month = ann.get("/usage?month=2020-01").await;
    assert!(other_month.body.contains("10,000 tokens") && !other_month.body.contains("3,000"));

    let admin_key = daemon.key(None, true).await;
    let mut admin = daemon.browser();
    admin.sign_in(&admin_key).await;
    let all = admin.get("/usage").await;
    assert!(all.body.contains("bob") && all.body.contains("ann"));
    let bobs = admin.get("/usage?user=bob").await;
    assert!(bobs.body.contains("bob") && !bobs.body.contains("3,000"));
}
