//! `Store::search_sessions` on SQLite's FTS5 index, over 100,000 messages in 1,000 sessions of
//! two owners (the searcher owns half):
//!
//! - `rare_term`: a word in one message of one session;
//! - `common_terms`: three words in most messages (BM25 ranks every match, then snippets);
//! - `append_indexed`: the cost the index adds to a write: one user message appended (the
//!   insert trigger tokenizes it in the same transaction); compare with `commit/append_only`.
//!
//! `cargo bench -p keel-store --bench session_search -- --warm-up-time 1 --measurement-time 3`

use criterion::{Criterion, criterion_group, criterion_main};
use keel_core::{Message, Store};
use keel_platform::{ConversationStore, MemoryIndex, NewConversation, SessionSearch};
use keel_store::SqliteStore;

const SESSIONS: usize = 1_000;
const MESSAGES_PER_SESSION: usize = 100;

const WORDS: &[&str] = &[
    "report", "weather", "meeting", "project", "deadline", "coffee", "server", "deploy", "budget",
    "invoice", "travel", "python", "rust", "database", "review", "lunch", "customer", "email",
];

/// A message of about 25 words, varied by `n`.
fn text(n: usize) -> String {
    (0..25)
        .map(|i| WORDS[(n * 7 + i * 13 + i * i) % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

async fn filled() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("keel.db"))
        .await
        .unwrap();
    for s in 0..SESSIONS {
        let id = format!("s{s}");
        store
            .create_conversation(&NewConversation {
                id: id.clone(),
                owner: Some(if s % 2 == 0 { "ann" } else { "bob" }.into()),
                lane_policy: Default::default(),
                at: chrono::Utc::now(),
                place: None,
                trusted: true,
            })
            .await
            .unwrap();
        let messages: Vec<Message> = (0..MESSAGES_PER_SESSION)
            .map(|m| {
                let n = s * MESSAGES_PER_SESSION + m;
                let mut body = text(n);
                if s == 500 && m == 42 {
                    body.push_str(" my locker code is zanzibar");
                }
                if m % 2 == 0 {
                    Message::user(body)
                } else {
                    Message::assistant(body)
                }
            })
            .collect();
        store.append_messages(&id, None, &messages).await.unwrap();
    }
    (store, dir)
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (store, _dir) = runtime.block_on(filled());
    let search = |query: &str| SessionSearch {
        query: query.into(),
        owner: Some("ann".into()),
        exclude_session: None,
        limit: 5,
    };
    let rare = search("zanzibar locker");
    let found = runtime.block_on(store.search_sessions(&rare)).unwrap();
    assert_eq!(found[0].session_id, "s500");
    c.bench_function("session_search/rare_term", |b| {
        b.iter(|| runtime.block_on(store.search_sessions(&rare)).unwrap())
    });
    let common = search("meeting deadline budget");
    c.bench_function("session_search/common_terms", |b| {
        b.iter(|| runtime.block_on(store.search_sessions(&common)).unwrap())
    });
    let message = [Message::user(text(3))];
    c.bench_function("session_search/append_indexed", |b| {
        b.iter(|| {
            runtime
                .block_on(store.append_messages("s0", None, &message))
                .unwrap()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
