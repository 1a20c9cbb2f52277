//! Known facts, the behaviour every `Store` must have: a fact with the key of a current one
//! supersedes it, each user sees and forgets only their own facts, and full-text search finds
//! facts by their words without ever reading user text as query syntax. Run against SQLite (in
//! memory and on a file), `MemoryStore` and PostgreSQL.

use keel_platform::DaemonStore;
use keel_platform::known_facts::Fact;

mod common;
use common::{at, memory, postgres, sqlite_file, sqlite_in_memory};

macro_rules! fact_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn a_fact_with_the_same_key_supersedes_the_current_one() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                supersede_on(&store).await;
            }

            #[tokio::test]
            async fn users_see_and_forget_only_their_own_facts() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                isolation_on(&store).await;
            }

            #[tokio::test]
            async fn search_ranks_by_words_and_survives_hostile_text() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                search_on(&store).await;
            }
        }
    };
}

fact_tests!(memory_store, memory());
fact_tests!(sqlite_memory, sqlite_in_memory());
fact_tests!(sqlite_on_file, sqlite_file());
fact_tests!(postgres_store, postgres());

fn fact(id: &str, user: &str, text: &str, key: Option<&str>, secs: i64) -> Fact {
    Fact {
        id: id.into(),
        user_id: user.into(),
        text: text.into(),
        key: key.map(str::to_string),
        source_session: Some("s1".into()),
        source_seq: Some(3),
        confidence: 0.9,
        importance: 0.7,
        created_at: at(secs),
        updated_at: at(secs),
        superseded_by: None,
        embedding: Some(vec![0.5, -1.25, 3.0]),
    }
}

async fn supersede_on(store: &dyn DaemonStore) {
    let old = fact(
        "f1",
        "ada",
        "my deploy target is eu-west-3",
        Some("deploy target"),
        1,
    );
    assert_eq!(store.save_fact(&old).await.unwrap(), None);
    let other = fact("f2", "ada", "my editor is helix", Some("editor"), 2);
    store.save_fact(&other).await.unwrap();
    let new = fact(
        "f3",
        "ada",
        "my deploy target is us-east-1",
        Some("deploy target"),
        3,
    );
    assert_eq!(store.save_fact(&new).await.unwrap(), Some("f1".into()));

    let current = store.facts("ada", false).await.unwrap();
    let ids: Vec<&str> = current.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, ["f2", "f3"]);
    assert_eq!(current[1], new, "a fact comes back as it was stored");
    let all = store.facts("ada", true).await.unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].superseded_by.as_deref(), Some("f3"));
    // A superseded fact is not found by search.
    let hits = store.search_facts("ada", "eu-west-3", 5).await.unwrap();
    assert!(hits.is_empty(), "{hits:?}");
    // The same id again is refused, and nothing changes.
    assert!(matches!(
        store.save_fact(&new).await,
        Err(keel_core::StoreError::Conflict(_))
    ));
    assert_eq!(store.facts("ada", true).await.unwrap().len(), 3);
    // Forgetting the current fact takes what it superseded with it.
    assert!(store.forget_fact("ada", "f3").await.unwrap());
    let left: Vec<String> = store
        .facts("ada", true)
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(left, ["f2"]);
}

async fn isolation_on(store: &dyn DaemonStore) {
    store
        .save_fact(&fact(
            "a1",
            "ada",
            "my deploy target is eu-west-3",
            Some("deploy target"),
            1,
        ))
        .await
        .unwrap();
    store
        .save_fact(&fact(
            "b1",
            "bob",
            "my deploy target is ap-south-1",
            Some("deploy target"),
            2,
        ))
        .await
        .unwrap();
    // Bob's fact with the same key supersedes nothing of Ada's.
    assert_eq!(store.facts("ada", false).await.unwrap().len(), 1);
    let hits = store
        .search_facts("bob", "deploy target", 10)
        .await
        .unwrap();
    let ids: Vec<&str> = hits.iter().map(|h| h.fact_id.as_str()).collect();
    assert_eq!(ids, ["b1"]);
    // Bob cannot forget Ada's fact.
    assert!(!store.forget_fact("bob", "a1").await.unwrap());
    assert_eq!(store.facts("ada", false).await.unwrap().len(), 1);
    assert!(!store.forget_fact("ada", "nope").await.unwrap());
}

async fn search_on(store: &dyn DaemonStore) {
    let texts = [
        "the staging database runs postgres 15",
        "my deploy target is eu-west-3",
        "lunch is at noon on fridays",
        "the deploy script lives in ops/deploy.sh",
    ];
    for (i, text) in texts.iter().enumerate() {
        store
            .save_fact(&fact(&format!("f{i}"), "ada", text, None, i as i64))
            .await
            .unwrap();
    }
    let hits = store
        .search_facts("ada", "where do I deploy to? which target?", 10)
        .await
        .unwrap();
    assert_eq!(hits[0].fact_id, "f1", "{hits:?}");
    assert!(hits.iter().any(|h| h.fact_id == "f3"));
    assert!(hits.iter().all(|h| h.fact_id != "f2"));
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    assert_eq!(
        store.search_facts("ada", "deploy", 1).await.unwrap().len(),
        1
    );
    // FTS5 syntax in user text is plain words, never an error.
    for hostile in [
        "\"unbalanced",
        "deploy NEAR(x y)",
        "text:deploy",
        "* OR AND NOT",
        "'); DROP TABLE facts; --",
        "",
        "-- !!",
    ] {
        store.search_facts("ada", hostile, 5).await.unwrap();
    }
    let huge = "deploy ".repeat(100_000);
    let hits = store.search_facts("ada", &huge, 5).await.unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(store.facts("ada", false).await.unwrap().len(), 4);
}
