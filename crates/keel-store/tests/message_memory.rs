//! Messages as memories on SQLite (`migrations/0018_message_memory.sql`) and PostgreSQL:
//! importance kept in the metadata and read back as a column, full-text search and the most
//! important messages of one owner only, model scores, embeddings beside the messages, and (on
//! SQLite) metadata that is not JSON.

mod common;
use common::{postgres, sqlite_file};
use keel_core::Message;
use keel_platform::NewConversation;
use keel_platform::{DaemonStore, MemoryIndex};

macro_rules! memory_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn search_finds_one_owners_messages_with_their_importance() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                search_on(&store).await;
            }

            #[tokio::test]
            async fn the_most_important_messages_come_newest_first_and_a_model_can_rescore_them() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                important_on(&store).await;
            }

            #[tokio::test]
            async fn embeddings_are_kept_per_message_and_read_back_per_owner() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                embeddings_on(&store).await;
            }
        }
    };
}

memory_tests!(sqlite_on_file, sqlite_file());
memory_tests!(postgres_store, postgres());

async fn conversation(
    store: &dyn DaemonStore,
    id: &str,
    owner: Option<&str>,
    messages: &[Message],
) {
    store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: owner.map(str::to_string),
            lane_policy: Default::default(),
            at: chrono::Utc::now(),
            place: None,
            trusted: true,
        })
        .await
        .unwrap()
        .expect("a new conversation");
    store.append_messages(id, None, messages).await.unwrap();
}

fn scored(text: &str, importance: f32) -> Message {
    let mut message = Message::user(text);
    message.meta.importance = Some(importance);
    message
}

async fn search_on(store: &dyn DaemonStore) {
    conversation(
        store,
        "ada-1",
        Some("ada"),
        &[
            scored("my deploy target is eu-west-3", 0.8),
            Message::assistant("Noted: eu-west-3."),
        ],
    )
    .await;
    conversation(store, "ada-2", Some("ada"), &[scored("deploy again", 0.3)]).await;
    conversation(
        store,
        "bob-1",
        Some("bob"),
        &[scored("my deploy target is mars", 1.0)],
    )
    .await;
    conversation(
        store,
        "cli-1",
        None,
        &[scored("deploy from the laptop", 0.4)],
    )
    .await;

    let hits = store
        .search_messages(Some("ada"), "where do I deploy? target", None, 0.0, 10)
        .await
        .unwrap();
    let found: Vec<(&str, u64)> = hits
        .iter()
        .map(|h| (h.session_id.as_str(), h.seq))
        .collect();
    assert_eq!(found[0], ("ada-1", 1), "{hits:?}");
    assert!(found.iter().all(|(session, _)| session.starts_with("ada-")));
    assert_eq!(hits[0].importance, 0.8);
    assert!(hits[0].score > 0.0);
    // The session a run is in is left out; the machine owner's sessions have no owner.
    let others = store
        .search_messages(Some("ada"), "deploy", Some("ada-1"), 0.0, 10)
        .await
        .unwrap();
    assert_eq!(others.len(), 1);
    assert_eq!(others[0].session_id, "ada-2");
    // Below the least importance asked for, a message is not found (unscored counts 0.3).
    let important = store
        .search_messages(Some("ada"), "deploy", None, 0.5, 10)
        .await
        .unwrap();
    assert_eq!(important.len(), 1);
    assert_eq!(important[0].session_id, "ada-1");
    let owner = store
        .search_messages(None, "deploy", None, 0.0, 10)
        .await
        .unwrap();
    assert_eq!(owner.len(), 1);
    assert_eq!(owner[0].session_id, "cli-1");
    // User text is never FTS5 syntax.
    for hostile in ["\"", "deploy\" OR owner:bob", "NEAR(a b)", "*", "-", ""] {
        let hits = store
            .search_messages(Some("ada"), hostile, None, 0.0, 10)
            .await
            .unwrap();
        assert!(
            hits.iter().all(|h| h.session_id.starts_with("ada-")),
            "{hostile}"
        );
    }
    assert!(
        store
            .search_messages(Some("ada"), "deploy", None, 0.0, 0)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn important_on(store: &dyn DaemonStore) {
    conversation(
        store,
        "s1",
        Some("ada"),
        &[
            scored("we decided to ship on Thursdays", 0.95),
            scored("hi", 0.05),
            scored("always use British spelling", 0.9),
        ],
    )
    .await;
    conversation(
        store,
        "s2",
        Some("bob"),
        &[scored("bob's secret decision", 1.0)],
    )
    .await;
    let important = store
        .important_messages(Some("ada"), 0.9, None, 5)
        .await
        .unwrap();
    let seqs: Vec<u64> = important.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, [3, 1]);
    assert_eq!(important[0].text, "always use British spelling");

    store
        .set_message_importance("s1", &[(2, 0.97), (3, 0.2), (99, 1.0)])
        .await
        .unwrap();
    let important = store
        .important_messages(Some("ada"), 0.9, None, 5)
        .await
        .unwrap();
    let seqs: Vec<u64> = important.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, [2, 1]);
    assert_eq!(important[0].importance, 0.97);
    // The score is the message's own metadata: reading the session back shows it.
    let messages = store.messages("s1").await.unwrap();
    assert_eq!(messages[2].message.meta.importance, Some(0.2));
    assert!(
        store
            .important_messages(Some("ada"), 0.9, Some("s1"), 5)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn embeddings_on(store: &dyn DaemonStore) {
    conversation(
        store,
        "s1",
        Some("ada"),
        &[scored("a", 0.6), scored("b", 0.7)],
    )
    .await;
    conversation(store, "s2", Some("bob"), &[scored("c", 0.6)]).await;
    store
        .save_message_embeddings(
            "s1",
            "mock-embed",
            &[(2, vec![0.0, 1.0]), (1, vec![1.0, 0.5])],
        )
        .await
        .unwrap();
    store
        .save_message_embeddings("s2", "mock-embed", &[(1, vec![1.0, 1.0])])
        .await
        .unwrap();
    // Saving again replaces; a seq the session does not have is nothing to keep.
    store
        .save_message_embeddings("s1", "mock-embed", &[(1, vec![1.0, 0.0]), (7, vec![9.0])])
        .await
        .unwrap();
    let embedded = store.message_embeddings(Some("ada")).await.unwrap();
    let got: Vec<(u64, Vec<f32>)> = embedded.iter().map(|(m, v)| (m.seq, v.clone())).collect();
    assert_eq!(got, [(1, vec![1.0, 0.0]), (2, vec![0.0, 1.0])]);
    assert_eq!(embedded[1].0.importance, 0.7);
    assert!(store.message_embeddings(None).await.unwrap().is_empty());
}

#[tokio::test]
async fn metadata_that_is_not_json_scores_as_plain_talk_and_breaks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keel.db");
    {
        let store = keel_store::SqliteStore::open(&path).await.unwrap();
        conversation(
            &store,
            "s1",
            Some("ada"),
            &[scored("deploy to eu-west-3", 0.95)],
        )
        .await;
        store.close().await;
    }
    {
        use rusqlite::Connection;
        let conn = Connection::open(&path).unwrap();
        conn.execute(
            "UPDATE messages SET meta = '{broken' WHERE session_id = 's1'",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO messages (session_id, seq, role, content, meta, created_at) \
             VALUES ('s1', 2, 'user', 'deploy notes', '{\"importance\": \"high\"}', \
             '2026-11-25T00:00:00Z')",
            [],
        )
        .unwrap();
    }
    let store = keel_store::SqliteStore::open(&path).await.unwrap();
    let hits = store
        .search_messages(Some("ada"), "deploy", None, 0.0, 5)
        .await
        .unwrap();
    assert_eq!(hits.len(), 2);
    assert!(hits.iter().all(|h| h.importance == 0.3), "{hits:?}");
    assert!(
        store
            .important_messages(Some("ada"), 0.9, None, 5)
            .await
            .unwrap()
            .is_empty()
    );
    // A new score is not written into metadata that is not JSON.
    store
        .set_message_importance("s1", &[(1, 0.9)])
        .await
        .unwrap();
    assert!(
        store
            .important_messages(Some("ada"), 0.9, None, 5)
            .await
            .unwrap()
            .is_empty()
    );
}
