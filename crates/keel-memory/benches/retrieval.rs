//! What retrieval adds to a turn when one user has 100,000 stored memories in SQLite: the p50
//! and p95 of `Memory::retrieve` over 100 varied questions, with embeddings (the mock's,
//! computed in process: the endpoint's own latency is not keel's) and without.
//!
//! - `messages` (the default): 100,000 messages in 1,000 earlier sessions of the user, scored
//!   by keel's rules as a run stores them; one in five states a decision (importance ≥ 0.5)
//!   and is embedded, as a run's learning pass does; plus 1,000 known facts.
//! - `facts`: 100,000 known facts with their embeddings.
//!
//! Run in release, not in CI:
//!
//! ```text
//! cargo bench -p keel-memory --bench retrieval             # messages
//! KEEL_BENCH_MEMORIES=facts cargo bench -p keel-memory --bench retrieval
//! KEEL_BENCH_FTS_OPTIMIZE=1 ...   # merge the FTS5 segments first, as maintenance would
//! KEEL_BENCH_PARTS=1 ...          # also time each store read of a turn alone
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_memory::Memory;
use keel_memory::embedding::InProcess;
use keel_platform::DaemonStore;
use keel_platform::known_facts::Fact;
use keel_store::SqliteStore;

const MEMORIES: usize = 100_000;
const TURNS: usize = 100;
const USER: &str = "bench-user";

/// A made-up word of a 5,000-word vocabulary: full-text posting lists of realistic lengths.
fn word(n: usize) -> String {
    const SYLLABLES: [&str; 16] = [
        "ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "da", "ve", "zu", "ho", "fi", "ga", "be",
        "ny",
    ];
    let n = n % 5000;
    format!(
        "{}{}{}",
        SYLLABLES[n % 16],
        SYLLABLES[(n / 16) % 16],
        SYLLABLES[(n / 256) % 16]
    )
}

fn text(i: usize) -> String {
    let words: Vec<String> = (0..10)
        .map(|k| word(i * 31 + k * 977 + k * k * 7))
        .collect();
    format!(
        "note {i}: the {} is {}",
        words[..4].join(" "),
        words[4..].join(" ")
    )
}

/// 100,000 messages of [`USER`] in 1,000 sessions of 100, one in five a decision, embedded.
async fn fill_messages(store: &Arc<dyn DaemonStore>) {
    const PER_SESSION: usize = 100;
    for session in 0..MEMORIES / PER_SESSION {
        let id = format!("past-{session:04}");
        store
            .create_conversation(&keel_platform::NewConversation {
                id: id.clone(),
                owner: Some(USER.into()),
                lane_policy: Default::default(),
                at: chrono::Utc::now(),
                place: None,
                trusted: true,
            })
            .await
            .unwrap();
        let texts: Vec<String> = (0..PER_SESSION)
            .map(|k| {
                let i = session * PER_SESSION + k;
                if i.is_multiple_of(5) {
                    format!("We decided that {}", text(i))
                } else {
                    text(i)
                }
            })
            .collect();
        let messages: Vec<keel_core::Message> = texts
            .iter()
            .enumerate()
            .map(|(k, text)| {
                let mut message = if k % 2 == 0 {
                    keel_core::Message::user(text.clone())
                } else {
                    keel_core::Message::assistant(text.clone())
                };
                message.meta.importance = Some(keel_extensions::importance::importance(text));
                message
            })
            .collect();
        store
            .append_messages(&id, Some("bench-run"), &messages)
            .await
            .unwrap();
        let vectors: Vec<(u64, Vec<f32>)> = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.meta.importance.unwrap_or(0.0) >= 0.5)
            .map(|(k, m)| (k as u64 + 1, keel_mock::embeddings::embed(&m.content)))
            .collect();
        store
            .save_message_embeddings(&id, "mock-embed", &vectors)
            .await
            .unwrap();
    }
    fill_facts(store, 1000).await;
}

async fn fill_facts(store: &Arc<dyn DaemonStore>, count: usize) {
    let now = chrono::Utc::now();
    for chunk in (0..count).collect::<Vec<_>>().chunks(1000) {
        let mut writes = tokio::task::JoinSet::new();
        for &i in chunk {
            let store = store.clone();
            let text = text(i);
            writes.spawn(async move {
                let fact = Fact {
                    id: format!("m{i:06}"),
                    user_id: USER.into(),
                    embedding: Some(keel_mock::embeddings::embed(&text)),
                    text,
                    key: None,
                    source_session: None,
                    source_seq: None,
                    confidence: 1.0,
                    importance: ((i % 10) as f32) / 11.0,
                    created_at: now - chrono::Duration::minutes(i as i64),
                    updated_at: now - chrono::Duration::minutes(i as i64),
                    superseded_by: None,
                };
                store.save_fact(&fact).await.unwrap();
            });
        }
        while let Some(done) = writes.join_next().await {
            done.unwrap();
        }
    }
}

fn percentiles(mut times: Vec<Duration>) -> (Duration, Duration) {
    times.sort();
    (times[times.len() / 2], times[times.len() * 95 / 100])
}

async fn measure(memory: &Memory) -> (Duration, Duration, usize) {
    let questions: Vec<String> = (0..TURNS)
        .map(|i| {
            format!(
                "what about the {} and {}?",
                word(i * 7919),
                word(i * 104_729)
            )
        })
        .collect();
    // Warm: the user's memories are read once, then cached.
    memory.retrieve(USER, "now", &questions[0]).await;
    let mut times = Vec::with_capacity(TURNS);
    let mut recalled = 0;
    for question in &questions {
        let start = Instant::now();
        let retrieval = memory.retrieve(USER, "now", question).await;
        times.push(start.elapsed());
        recalled += retrieval.pieces.len();
        assert!(retrieval.degraded.is_empty(), "{:?}", retrieval.degraded);
    }
    let (p50, p95) = percentiles(times);
    (p50, p95, recalled / TURNS)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keel.db");
        let store: Arc<dyn DaemonStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
        let start = Instant::now();
        let kind = std::env::var("KEEL_BENCH_MEMORIES").unwrap_or_else(|_| "messages".into());
        match kind.as_str() {
            "facts" => fill_facts(&store, MEMORIES).await,
            _ => fill_messages(&store).await,
        }
        println!(
            "stored {MEMORIES} {kind} of one user in {:.1}s",
            start.elapsed().as_secs_f64()
        );
        if std::env::var_os("KEEL_BENCH_FTS_OPTIMIZE").is_some() {
            // 100,000 inserts in many small transactions leave the FTS5 index in many
            // segments; `optimize` merges them into one, as a maintenance pass would.
            let start = Instant::now();
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.busy_timeout(Duration::from_secs(30)).unwrap();
            for index in ["facts_fts", "messages_fts"] {
                conn.execute(&format!("INSERT INTO {index} ({index}) VALUES ('optimize')"), [])
                    .unwrap();
            }
            println!("merged the FTS5 index in {:.1}s", start.elapsed().as_secs_f64());
        }
        if std::env::var_os("KEEL_BENCH_PARTS").is_some() {
            let owner = Some(USER);
            let qs: Vec<String> = (0..50).map(|i| format!("what about the {} and {}?", word(i * 7919), word(i * 104_729))).collect();
            for (name, k) in [("search_facts", 0), ("search_messages", 1), ("important", 2), ("embeddings read", 3)] {
                let mut times = Vec::new();
                for q in &qs {
                    let t = Instant::now();
                    match k {
                        0 => { store.search_facts(USER, q, 50).await.unwrap(); }
                        1 => { store.search_messages(owner, q, Some("now"), 0.5, 50).await.unwrap(); }
                        2 => { store.important_messages(owner, 0.9, Some("now"), 3).await.unwrap(); }
                        _ => { if times.len() < 3 { store.message_embeddings(owner).await.unwrap(); } }
                    }
                    times.push(t.elapsed());
                }
                let (p50, _) = percentiles(times);
                println!("{name}: p50 {:.2} ms", p50.as_secs_f64() * 1e3);
            }
        }
        let with_vectors = Memory::new(store.clone()).with_embedder(Arc::new(InProcess::new("mock-embed", keel_mock::embeddings::embed)));
        let (p50, p95, pieces) = measure(&with_vectors).await;
        println!(
            "retrieve, full text + vectors + recency: p50 {:.2} ms, p95 {:.2} ms ({pieces} pieces a turn)",
            p50.as_secs_f64() * 1e3,
            p95.as_secs_f64() * 1e3
        );
        let full_text = Memory::new(store.clone());
        let (p50, p95, pieces) = measure(&full_text).await;
        println!(
            "retrieve, full text + recency (no embeddings): p50 {:.2} ms, p95 {:.2} ms ({pieces} pieces a turn)",
            p50.as_secs_f64() * 1e3,
            p95.as_secs_f64() * 1e3
        );
    });
}
