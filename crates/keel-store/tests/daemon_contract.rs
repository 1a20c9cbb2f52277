//! What the daemon needs of every `Store`: conversations with owners and lane policies, the
//! lanes' durable FIFO queues (bounded; a run leaves its queue in the commit that stores its
//! message), API keys kept as hashes, and pages that never skip or repeat. Run against
//! `SqliteStore` (in memory and on a file, reopened) and keel-core's `MemoryStore`.

use chrono::{DateTime, Utc};
use keel_core::store::Commit;
use keel_core::{AgentState, EventKind, LanePolicy, Message};
use keel_platform::DaemonStore;
use keel_platform::{
    ApiKeyRecord, ConversationFilter, EnqueueOutcome, NewConversation, QueuedRun, RunFilter,
};

mod common;
use common::{at, event, memory, postgres, run_record, sqlite_file, sqlite_in_memory};

macro_rules! daemon_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn conversations_have_owners_policies_and_pages() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                conversations_on(&store).await;
            }

            #[tokio::test]
            async fn a_lane_queue_is_fifo_bounded_and_left_by_the_first_commit() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                queue_on(&store).await;
            }

            #[tokio::test]
            async fn a_queued_run_can_be_cancelled_before_it_starts() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                cancel_on(&store).await;
            }

            #[tokio::test]
            async fn keys_are_found_by_hash_and_revoked_once() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                keys_on(&store).await;
            }

            #[tokio::test]
            async fn runs_and_events_page_by_filter() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                runs_on(&store).await;
            }
        }
    };
}

daemon_tests!(memory_store, memory());
daemon_tests!(sqlite_memory, sqlite_in_memory());
daemon_tests!(sqlite_on_file, sqlite_file());
daemon_tests!(postgres_store, postgres());

fn conversation(id: &str, owner: Option<&str>, minutes: i64) -> NewConversation {
    NewConversation {
        id: id.into(),
        owner: owner.map(str::to_string),
        lane_policy: LanePolicy::Queue,
        at: at(minutes),
        place: None,
        trusted: true,
    }
}

fn queued(run_id: &str, session_id: &str, enqueued_at: DateTime<Utc>) -> QueuedRun {
    QueuedRun {
        run_id: run_id.into(),
        session_id: session_id.into(),
        user_id: Some("ann".into()),
        message: format!("message of {run_id}"),
        enqueued_at,
        provider: "mock".into(),
        model: "m".into(),
        // What the pipeline chose travels with the queued run.
        options: keel_core::RunOptions {
            persona: Some("helper".into()),
            temperature: Some(0.5),
            allowed_modules: Some(vec!["files".into()]),
            untrusted: true,
            place: Some(keel_core::PlatformPlace {
                platform: "slack".into(),
                channel_id: "C1".into(),
                thread_id: Some("17.5".into()),
                server_id: None,
            }),
            ..Default::default()
        },
        inbound: None,
        slot: None,
    }
}

async fn conversations_on(store: &dyn DaemonStore) {
    for i in 0..5 {
        let owner = if i % 2 == 0 { "ann" } else { "bob" };
        let made = store
            .create_conversation(&conversation(&format!("c{i}"), Some(owner), i))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(made.owner.as_deref(), Some(owner));
    }
    let mut interrupting = conversation("c9", None, 9);
    interrupting.lane_policy = LanePolicy::Interrupt;
    store.create_conversation(&interrupting).await.unwrap();
    assert_eq!(
        store.session("c9").await.unwrap().unwrap().lane_policy,
        LanePolicy::Interrupt
    );
    assert!(
        store
            .create_conversation(&conversation("c0", Some("bob"), 20))
            .await
            .unwrap()
            .is_none(),
        "a taken id changes nothing"
    );
    assert_eq!(
        store.session("c0").await.unwrap().unwrap().owner.as_deref(),
        Some("ann")
    );

    // Pages of two, ann's only: every conversation once, newest first.
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .list_conversations(&ConversationFilter {
                owner: Some("ann".into()),
                before: before.clone(),
                limit: 2,
            })
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        before = page.last().map(|c| c.id.clone());
        seen.extend(page.into_iter().map(|c| c.id));
    }
    assert_eq!(seen, ["c4", "c2", "c0"]);
    let all = store
        .list_conversations(&ConversationFilter {
            limit: 100,
            ..ConversationFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 6);
    let unknown = store
        .list_conversations(&ConversationFilter {
            before: Some("nope".into()),
            limit: 100,
            ..ConversationFilter::default()
        })
        .await
        .unwrap();
    assert!(unknown.is_empty(), "an unknown cursor is an empty page");
}

async fn queue_on(store: &dyn DaemonStore) {
    store
        .create_conversation(&conversation("c", Some("ann"), 0))
        .await
        .unwrap();
    let now = Utc::now();
    for i in 0..3 {
        let outcome = store
            .enqueue_run(&queued(&format!("r{i}"), "c", now), 3)
            .await
            .unwrap();
        assert_eq!(outcome, EnqueueOutcome::Queued { ahead: i });
    }
    assert_eq!(
        store.enqueue_run(&queued("r3", "c", now), 3).await.unwrap(),
        EnqueueOutcome::Full { queued: 3 }
    );
    assert!(
        store.run("r3").await.unwrap().is_none(),
        "a refused run is not stored"
    );
    let queue: Vec<String> = store
        .queued_runs("c")
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.run_id)
        .collect();
    assert_eq!(queue, ["r0", "r1", "r2"], "same instant, arrival order");
    assert_eq!(
        store.run("r0").await.unwrap().unwrap().state,
        AgentState::Queued
    );
    assert_eq!(store.queued_sessions().await.unwrap(), ["c"]);
    assert!(
        store
            .enqueue_run(&queued("x", "nope", now), 3)
            .await
            .is_err(),
        "a run of no conversation is refused"
    );

    // r0 starts: its first commit stores its message and takes it out of the queue, together.
    let mut record = run_record("r0", "c", Utc::now());
    record.state = AgentState::Running;
    store
        .commit(&Commit::new(&record, &[Message::user("message of r0")]))
        .await
        .unwrap();
    let queue = store.queued_runs("c").await.unwrap();
    assert_eq!(queue.len(), 2);
    assert_eq!(queue[0].run_id, "r1");
    let stored = store.run("r0").await.unwrap().unwrap();
    assert_eq!(stored.state, AgentState::Running);
    assert_eq!(stored.started_at, record.started_at, "started when it ran");
    assert_eq!(store.messages("c").await.unwrap().len(), 1);
    assert_eq!(
        store.enqueue_run(&queued("r3", "c", now), 3).await.unwrap(),
        EnqueueOutcome::Queued { ahead: 2 }
    );
    // Queued runs are not abandoned: the reconciler leaves them be.
    assert!(
        !store
            .active_runs()
            .await
            .unwrap()
            .iter()
            .any(|r| r.id == "r1" && r.state != AgentState::Queued)
    );
}

async fn cancel_on(store: &dyn DaemonStore) {
    store
        .create_conversation(&conversation("c", None, 0))
        .await
        .unwrap();
    store
        .enqueue_run(&queued("r0", "c", Utc::now()), 16)
        .await
        .unwrap();
    store
        .enqueue_run(&queued("r1", "c", Utc::now()), 16)
        .await
        .unwrap();
    assert!(store.cancel_queued("r1", at(5)).await.unwrap());
    assert!(
        !store.cancel_queued("r1", at(6)).await.unwrap(),
        "only once"
    );
    assert!(!store.cancel_queued("nope", at(6)).await.unwrap());
    let cancelled = store.run("r1").await.unwrap().unwrap();
    assert_eq!(cancelled.state, AgentState::Cancelled);
    assert_eq!(cancelled.finished_at, Some(at(5)));
    let queue = store.queued_runs("c").await.unwrap();
    assert_eq!(queue.len(), 1);
    assert_eq!(queue[0].run_id, "r0");
}

fn key(id: &str, hash: &str, user: Option<&str>, admin: bool) -> ApiKeyRecord {
    ApiKeyRecord {
        id: id.into(),
        hash: hash.into(),
        user_id: user.map(str::to_string),
        admin,
        platforms: if admin {
            Vec::new()
        } else {
            vec!["slack".into(), "telegram".into()]
        },
        created_at: at(0),
        revoked_at: None,
    }
}

async fn keys_on(store: &dyn DaemonStore) {
    store
        .save_api_key(&key("k1", "h1", Some("ann"), false))
        .await
        .unwrap();
    store
        .save_api_key(&key("k2", "h2", None, true))
        .await
        .unwrap();
    assert!(
        store
            .save_api_key(&key("k3", "h1", None, true))
            .await
            .is_err(),
        "a hash is one key"
    );
    let found = store.api_key_by_hash("h1").await.unwrap().unwrap();
    assert_eq!(found, key("k1", "h1", Some("ann"), false));
    assert!(store.api_key_by_hash("nope").await.unwrap().is_none());
    assert!(store.revoke_api_key("k1", at(3)).await.unwrap());
    assert!(!store.revoke_api_key("k1", at(4)).await.unwrap(), "once");
    assert!(!store.revoke_api_key("nope", at(4)).await.unwrap());
    assert_eq!(
        store
            .api_key_by_hash("h1")
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        Some(at(3))
    );
    let ids: Vec<String> = store
        .list_api_keys()
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.id)
        .collect();
    assert_eq!(ids, ["k1", "k2"]);
}

async fn runs_on(store: &dyn DaemonStore) {
    store
        .create_conversation(&conversation("a", Some("ann"), 0))
        .await
        .unwrap();
    store
        .create_conversation(&conversation("b", Some("bob"), 0))
        .await
        .unwrap();
    for i in 0..5 {
        let session = if i < 3 { "a" } else { "b" };
        let mut record = run_record(&format!("r{i}"), session, at(i));
        record.state = if i == 1 {
            AgentState::Cancelled
        } else {
            AgentState::Completed
        };
        let events = [event(
            &record,
            i,
            EventKind::RunStarted {
                provider: "mock".into(),
                model: "m".into(),
                context: Default::default(),
            },
        )];
        let mut commit = Commit::new(&record, &[]);
        commit.events = &events;
        store.commit(&commit).await.unwrap();
    }
    let ids = |runs: Vec<keel_core::RunRecord>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let mut pages = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .find_runs(&RunFilter {
                owner: Some("ann".into()),
                before: before.clone(),
                limit: 2,
                ..RunFilter::default()
            })
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        before = page.last().map(|r| r.id.clone());
        pages.extend(ids(page));
    }
    assert_eq!(pages, ["r2", "r1", "r0"]);
    let cancelled = store
        .find_runs(&RunFilter {
            state: Some(AgentState::Cancelled),
            limit: 10,
            ..RunFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(cancelled), ["r1"]);
    let of_b = store
        .find_runs(&RunFilter {
            session_id: Some("b".into()),
            limit: 10,
            ..RunFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(of_b), ["r4", "r3"]);

    // Unfinished states too (their filter reads the partial index of unfinished runs).
    store
        .create_conversation(&conversation("c", Some("cy"), 0))
        .await
        .unwrap();
    for (i, state) in [
        (5, AgentState::WaitingOnHuman),
        (6, AgentState::Running),
        (7, AgentState::WaitingOnHuman),
    ] {
        let mut record = run_record(&format!("r{i}"), "c", at(i));
        record.state = state;
        store.commit(&Commit::new(&record, &[])).await.unwrap();
    }
    let of_state = |state| RunFilter {
        state: Some(state),
        limit: 10,
        ..RunFilter::default()
    };
    let waiting = of_state(AgentState::WaitingOnHuman);
    assert_eq!(ids(store.find_runs(&waiting).await.unwrap()), ["r7", "r5"]);
    let running = of_state(AgentState::Running);
    assert_eq!(ids(store.find_runs(&running).await.unwrap()), ["r6"]);
    let queued = of_state(AgentState::Queued);
    assert!(store.find_runs(&queued).await.unwrap().is_empty());

    // Events are numbered from 1 in the order stored.
    let mut record = run_record("r0", "a", at(0));
    record.state = AgentState::Completed;
    let more = [
        event(
            &record,
            1,
            EventKind::RunStarted {
                provider: "p".into(),
                model: "m2".into(),
                context: Default::default(),
            },
        ),
        event(
            &record,
            2,
            EventKind::RunStarted {
                provider: "p".into(),
                model: "m3".into(),
                context: Default::default(),
            },
        ),
    ];
    let mut commit = Commit::new(&record, &[]);
    commit.events = &more;
    store.commit(&commit).await.unwrap();
    let all = store.events_after("r0", 0).await.unwrap();
    assert_eq!(
        all.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(
        all.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(),
        store.events("r0").await.unwrap()
    );
    let after = store.events_after("r0", 2).await.unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].1, more[1]);

    // Messages page by seq.
    store
        .append_messages(
            "a",
            None,
            &(0..5)
                .map(|i| Message::user(format!("m{i}")))
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    let page = store.messages_page("a", 2, 2).await.unwrap();
    assert_eq!(page.iter().map(|m| m.seq).collect::<Vec<_>>(), [3, 4]);
}
