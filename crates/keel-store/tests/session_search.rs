//! Session search (`Store::search_sessions`) as every store must do it, on SQLite's FTS5 index,
//! PostgreSQL's GIN index and the memory store's scan: ranking, snippets, whose sessions, the
//! excluded session, hostile queries, and `adopt_session`.

mod common;
use common::{memory, postgres, sqlite_file, sqlite_in_memory};
use keel_core::{InternalReason, Message, ToolCall};
use keel_platform::DaemonStore;
use keel_platform::{NewConversation, SessionHit, SessionSearch};

macro_rules! search_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn the_best_session_comes_first_with_marked_snippets() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                ranking_on(&store).await;
            }

            #[tokio::test]
            async fn only_the_owners_sessions_are_searched() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                ownership_on(&store).await;
            }

            #[tokio::test]
            async fn hostile_queries_neither_fail_nor_widen_the_search() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                hostile_queries_on(&store).await;
            }

            #[tokio::test]
            async fn internal_messages_tool_results_and_system_prompts_are_not_searched() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                what_is_searched_on(&store).await;
            }

            #[tokio::test]
            async fn a_new_session_is_adopted_once_and_only_while_empty() {
                let Some((store, _guard)) = common::Made::made($make.await) else {
                    return;
                };
                adoption_on(&store).await;
            }
        }
    };
}

search_tests!(sqlite_memory, sqlite_in_memory());
search_tests!(sqlite_on_file, sqlite_file());
search_tests!(memory_store, memory());
search_tests!(postgres_store, postgres());

async fn conversation(store: &dyn DaemonStore, id: &str, owner: Option<&str>, texts: &[&str]) {
    let made = store
        .create_conversation(&NewConversation {
            id: id.into(),
            owner: owner.map(str::to_string),
            lane_policy: Default::default(),
            at: chrono::Utc::now(),
            place: None,
            trusted: true,
        })
        .await
        .unwrap();
    assert!(made.is_some());
    let messages: Vec<Message> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| match i % 2 {
            0 => Message::user(*text),
            _ => Message::assistant(*text),
        })
        .collect();
    store.append_messages(id, None, &messages).await.unwrap();
}

fn search(query: &str, owner: Option<&str>) -> SessionSearch {
    SessionSearch {
        query: query.into(),
        owner: owner.map(str::to_string),
        exclude_session: None,
        limit: 10,
    }
}

async fn ids(store: &dyn DaemonStore, search: &SessionSearch) -> Vec<String> {
    let hits: Vec<SessionHit> = store.search_sessions(search).await.unwrap();
    hits.into_iter().map(|hit| hit.session_id).collect()
}

async fn ranking_on(store: &dyn DaemonStore) {
    conversation(
        store,
        "pets",
        Some("ann"),
        &[
            "Remember this: my dog is called Biscuit and she is a beagle.",
            "Noted: your beagle is called Biscuit.",
        ],
    )
    .await;
    conversation(store, "walks", Some("ann"), &["The dog needs long walks."]).await;
    conversation(
        store,
        "cooking",
        Some("ann"),
        &["A recipe for soup, please."],
    )
    .await;
    let hits = store
        .search_sessions(&search("what is my beagle called?", Some("ann")))
        .await
        .unwrap();
    let found: Vec<&str> = hits.iter().map(|h| h.session_id.as_str()).collect();
    assert_eq!(found, ["pets"], "{hits:?}");
    let pets = &hits[0];
    assert_eq!(pets.snippets.len(), 2, "{pets:?}");
    assert!(
        pets.snippets.iter().any(|s| s.contains("[beagle]")),
        "{pets:?}"
    );
    assert!(pets.score > 0.0);
    assert_eq!(
        pets.title.as_deref(),
        Some("Remember this: my dog is called Biscuit and she is a beagle.")
    );
    // Several sessions, best first; the limit holds.
    let dogs = ids(store, &search("dog", Some("ann"))).await;
    assert_eq!(dogs.len(), 2);
    let mut one = search("dog", Some("ann"));
    one.limit = 1;
    assert_eq!(ids(store, &one).await.len(), 1);
    one.limit = 0;
    assert!(ids(store, &one).await.is_empty());
}

async fn ownership_on(store: &dyn DaemonStore) {
    conversation(store, "ann-1", Some("ann"), &["the vault code is 4711"]).await;
    conversation(store, "ann-2", Some("ann"), &["vault inventory"]).await;
    conversation(store, "bob-1", Some("bob"), &["the vault code is 0000"]).await;
    conversation(store, "local", None, &["the vault code is 1111"]).await;
    let mut found = ids(store, &search("vault code", Some("ann"))).await;
    found.sort();
    assert_eq!(found, ["ann-1", "ann-2"]);
    assert_eq!(ids(store, &search("vault", Some("bob"))).await, ["bob-1"]);
    assert_eq!(ids(store, &search("vault", None)).await, ["local"]);
    assert!(ids(store, &search("vault", Some("eve"))).await.is_empty());
    // An owner name that looks like SQL or a wildcard is only a name.
    for owner in ["%", "*", "' OR 1=1 --", ""] {
        assert!(
            ids(store, &search("vault", Some(owner))).await.is_empty(),
            "{owner}"
        );
    }
    let mut here = search("vault", Some("ann"));
    here.exclude_session = Some("ann-1".into());
    assert_eq!(ids(store, &here).await, ["ann-2"]);
}

async fn hostile_queries_on(store: &dyn DaemonStore) {
    conversation(store, "mine", Some("ann"), &["alpha beta gamma"]).await;
    conversation(
        store,
        "theirs",
        Some("bob"),
        &["secret content: alpha NEAR beta OR title"],
    )
    .await;
    let hostile = [
        "\"",
        "\"alpha",
        "alpha\" OR \"secret",
        "alpha*",
        "*",
        "NEAR(alpha beta, 1)",
        "NEAR(",
        "content:alpha",
        "messages_fts:secret",
        "{content}: alpha",
        "(((alpha",
        "alpha)))",
        "alpha AND NOT beta",
        "-alpha",
        "^alpha",
        "alpha + beta",
        "'; DROP TABLE messages; --",
        "\u{0}alpha\u{0}",
        "",
        "   ",
        "OR",
        "AND NOT",
    ];
    for query in hostile {
        let found = store
            .search_sessions(&search(query, Some("ann")))
            .await
            .unwrap_or_else(|e| panic!("{query:?}: {e}"));
        assert!(
            found.iter().all(|hit| hit.session_id == "mine"),
            "{query:?}: {found:?}"
        );
    }
    // The words of a hostile query are still searched as words.
    assert_eq!(ids(store, &search("(((alpha", Some("ann"))).await, ["mine"]);
    assert_eq!(
        ids(store, &search("NEAR(gamma", Some("ann"))).await,
        ["mine"]
    );
    // Nothing was dropped or changed.
    assert_eq!(store.messages("mine").await.unwrap().len(), 1);
    // A very long query is cut, not refused.
    let long = "alpha ".repeat(10_000);
    assert_eq!(ids(store, &search(&long, Some("ann"))).await, ["mine"]);
}

async fn what_is_searched_on(store: &dyn DaemonStore) {
    conversation(store, "s", None, &["hello there"]).await;
    let mut calls = Message::assistant("");
    calls.tool_calls.push(ToolCall {
        id: "c1".into(),
        name: "read_file".into(),
        arguments: r#"{"path": "zebra.txt"}"#.into(),
    });
    store
        .append_messages(
            "s",
            None,
            &[
                Message::system("zebra system prompt"),
                Message::internal_user("zebra nudge", InternalReason::LoopNudge),
                calls,
                Message::tool_result("c1", "a zebra in a file"),
                Message::user("ordinary words"),
            ],
        )
        .await
        .unwrap();
    assert!(ids(store, &search("zebra", None)).await.is_empty());
    assert_eq!(ids(store, &search("ordinary", None)).await, ["s"]);
}

async fn adoption_on(store: &dyn DaemonStore) {
    store.ensure_session("new").await.unwrap();
    assert!(store.adopt_session("new", "ann").await.unwrap());
    assert!(!store.adopt_session("new", "bob").await.unwrap());
    assert_eq!(
        store
            .session("new")
            .await
            .unwrap()
            .unwrap()
            .owner
            .as_deref(),
        Some("ann")
    );
    // A session with messages keeps having no owner: it was someone's before.
    conversation(store, "old", None, &["hi"]).await;
    assert!(!store.adopt_session("old", "bob").await.unwrap());
    assert_eq!(store.session("old").await.unwrap().unwrap().owner, None);
    assert!(!store.adopt_session("missing", "bob").await.unwrap());
    assert!(store.session("missing").await.unwrap().is_none());
}
