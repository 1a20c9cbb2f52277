//! The search index on PostgreSQL (`migrations_postgres/0004_memory_search.sql`): the tsvector
//! columns are computed by PostgreSQL as each row is written, so a message is searchable as soon
//! as its write returns whoever wrote it (the store, many writers at once, a hand-written
//! insert), leaves the index with its row, and follows its row's changes; what SQLite's
//! `search_index` tests check of its watermark. Words are what SQLite takes them to be, whatever
//! text surrounds them; two workers keeping facts of one key at once leave one current. And
//! metadata that is not JSON scores as plain talk and is never rewritten (SQLite's
//! `message_memory` check). `KEEL_TEST_PG` names the database (`skip` skips).

use std::str::FromStr;
use std::sync::Arc;

use keel_core::store::Commit;
use keel_core::{InternalReason, Message, Store};
use keel_platform::known_facts::Fact;
use keel_platform::{MemoryIndex, SessionSearch};
use keel_store::PgStore;
use sqlx::postgres::PgConnectOptions;

mod common;
use common::{at, run_record};

/// A store on a fresh schema, and that schema's URL (`None` when skipped).
async fn store() -> Option<(PgStore, String)> {
    let (_, url) = keel_store::postgres::testing::fresh_schema().await?;
    let options = PgConnectOptions::from_str(&url).unwrap();
    Some((PgStore::open_with(options, 8).await.unwrap(), url))
}

/// The sessions without an owner whose messages match `query`, best first.
async fn sessions(store: &PgStore, query: &str) -> Vec<String> {
    let search = SessionSearch {
        query: query.into(),
        owner: None,
        exclude_session: None,
        limit: 20,
    };
    let hits = store.search_sessions(&search).await.unwrap();
    hits.into_iter().map(|hit| hit.session_id).collect()
}

/// How many messages without an owner match `query` (`search_messages`).
async fn messages(store: &PgStore, query: &str) -> usize {
    let hits = store.search_messages(None, query, None, 0.0, 1_000);
    hits.await.unwrap().len()
}

/// Runs `sql` on the store's schema, as another program would.
async fn by_hand(store: &PgStore, sql: &'static str) {
    sqlx::query(sql).execute(store.pool()).await.unwrap();
}

#[tokio::test]
async fn a_message_is_searchable_as_soon_as_its_write_returns() {
    let Some((store, _)) = store().await else {
        return;
    };
    for i in 0..5 {
        let word = format!("kestrel{i}");
        store
            .append_messages("appended", None, &[Message::user(word.as_str())])
            .await
            .unwrap();
        assert_eq!(sessions(&store, &word).await, ["appended"]);
        assert_eq!(messages(&store, &word).await, 1);
    }
    let run = run_record("r", "committed", chrono::Utc::now());
    let boundary = [
        Message::assistant("the heron answers"),
        Message::internal_user("heron nudge", InternalReason::LoopNudge),
    ];
    store.commit(&Commit::new(&run, &boundary)).await.unwrap();
    assert_eq!(sessions(&store, "heron").await, ["committed"]);
    assert_eq!(messages(&store, "heron").await, 1, "internal ones are not");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_messages_of_many_writers_at_once_are_all_indexed() {
    let Some((store, _)) = store().await else {
        return;
    };
    let store = Arc::new(store);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..100 {
        let store = Arc::clone(&store);
        tasks.spawn(async move {
            let messages = [
                Message::user(format!("puffin number{i}")),
                Message::assistant("puffin answer"),
            ];
            store
                .append_messages(&format!("s{i}"), None, &messages)
                .await
        });
    }
    while let Some(written) = tasks.join_next().await {
        written.unwrap().unwrap();
    }
    assert_eq!(messages(&store, "puffin").await, 200);
    assert_eq!(sessions(&store, "number37").await, ["s37"]);
    let long: Vec<Message> = (0..150)
        .map(|i| Message::assistant(format!("gannet{i}")))
        .collect();
    store.append_messages("long", None, &long).await.unwrap();
    assert_eq!(sessions(&store, "gannet0").await, ["long"]);
    assert_eq!(sessions(&store, "gannet149").await, ["long"]);
}

#[tokio::test]
async fn rows_written_by_hand_are_indexed_and_deleted_ones_leave() {
    let Some((store, _)) = store().await else {
        return;
    };
    for (session, text) in [("a", "alpha"), ("b", "beta one"), ("b", "beta two")] {
        store
            .append_messages(session, None, &[Message::user(text)])
            .await
            .unwrap();
    }
    by_hand(
        &store,
        "INSERT INTO messages (session_id, seq, role, content, created_at) \
         VALUES ('a', 2, 'user', 'an otter by hand', '2026-11-25T00:00:00.000000000Z')",
    )
    .await;
    assert_eq!(sessions(&store, "otter").await, ["a"]);
    by_hand(&store, "DELETE FROM sessions WHERE id = 'b'").await;
    assert!(sessions(&store, "beta").await.is_empty());
    // A message made internal, or a tool result, by hand leaves the index; one edited is found
    // by its new words only.
    by_hand(
        &store,
        "UPDATE messages SET internal = TRUE WHERE content = 'alpha'",
    )
    .await;
    assert!(sessions(&store, "alpha").await.is_empty());
    by_hand(
        &store,
        "UPDATE messages SET content = 'a marten' WHERE seq = 2",
    )
    .await;
    assert!(sessions(&store, "otter").await.is_empty());
    assert_eq!(sessions(&store, "marten").await, ["a"]);
}

#[tokio::test]
async fn words_are_runs_of_letters_and_digits_whatever_surrounds_them() {
    let Some((store, _)) = store().await else {
        return;
    };
    let texts = [
        "deploy to eu-west-3 via https://deploy.example.com/path?x=1",
        "see src/keel_store.rs and foo@bar.org; version 1.2.3",
        "Ünïcödé Straße 東京 and x²",
    ];
    for (i, text) in texts.iter().enumerate() {
        store
            .append_messages(&format!("s{i}"), None, &[Message::user(*text)])
            .await
            .unwrap();
    }
    for (query, session) in [
        ("west", "s0"),
        ("example", "s0"),
        ("path", "s0"),
        ("keel", "s1"),
        ("rs", "s1"),
        ("bar", "s1"),
        ("2", "s1"),
        ("straße", "s2"),
        ("ÜNÏCÖDÉ", "s2"),
        ("東京", "s2"),
    ] {
        assert_eq!(sessions(&store, query).await, [session], "{query}");
    }
    // A snippet marks the words as the person wrote them.
    let search = SessionSearch {
        query: "straße".into(),
        owner: None,
        exclude_session: None,
        limit: 1,
    };
    let hits = store.search_sessions(&search).await.unwrap();
    assert_eq!(hits[0].snippets, ["Ünïcödé [Straße] 東京 and x²"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_keeping_one_key_at_once_leave_one_current_fact() {
    let Some((first, url)) = store().await else {
        return;
    };
    let second = PgStore::open_with(PgConnectOptions::from_str(&url).unwrap(), 8)
        .await
        .unwrap();
    let workers = [Arc::new(first), Arc::new(second)];
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let store = Arc::clone(&workers[i % 2]);
        tasks.spawn(async move {
            let fact = Fact {
                id: format!("f{i}"),
                user_id: "ada".into(),
                text: format!("the deploy target is region {i}"),
                key: Some("deploy target".into()),
                source_session: None,
                source_seq: None,
                confidence: 1.0,
                importance: 0.5,
                created_at: at(i as i64),
                updated_at: at(i as i64),
                superseded_by: None,
                embedding: None,
            };
            store.save_fact(&fact).await
        });
    }
    let mut superseded = Vec::new();
    while let Some(saved) = tasks.join_next().await {
        superseded.extend(saved.unwrap().unwrap());
    }
    let current = workers[0].facts("ada", false).await.unwrap();
    assert_eq!(current.len(), 1, "{current:?}");
    // Each fact but the current one was superseded exactly once.
    superseded.sort();
    superseded.dedup();
    assert_eq!(superseded.len(), 19);
    assert!(!superseded.contains(&current[0].id));
}

#[tokio::test]
async fn metadata_that_is_not_json_scores_as_plain_talk_and_is_never_rewritten() {
    let Some((store, _)) = store().await else {
        return;
    };
    let mut scored = Message::user("deploy to eu-west-3");
    scored.meta.importance = Some(0.95);
    store.append_messages("s1", None, &[scored]).await.unwrap();
    by_hand(
        &store,
        "UPDATE messages SET meta = '{broken', importance = NULL WHERE session_id = 's1'",
    )
    .await;
    let hits = store
        .search_messages(None, "deploy", None, 0.0, 5)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].importance, 0.3);
    store
        .set_message_importance("s1", &[(1, 0.9)])
        .await
        .unwrap();
    assert!(
        store
            .important_messages(None, 0.9, None, 5)
            .await
            .unwrap()
            .is_empty()
    );
    let meta: Option<String> = sqlx::query_scalar("SELECT meta FROM messages")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(meta.as_deref(), Some("{broken"));
}
