//! The cost of preparing one turn (DESIGN.md section 6, issue 5): what keel does between
//! receiving a user message and sending the first request. That is loading the session's
//! context from the store (`Store::context_messages`), building the run (`Run::new`, which
//! counts the tokens of every message whose count is not cached) and producing the first
//! request (`Run::start`: the context check, then the request with its fixup).
//!
//! Sessions of 100, 1,000 and 10,000 stored messages (user turns, assistant turns with tool
//! calls, tool results of a few hundred tokens of varied text), every message with its token
//! count cached as the loop stores them, come in two shapes:
//!
//! - `compacted`: a long-running session as keel leaves it, with a compaction summary stored
//!   near the end that stands in for everything but the last ~20 messages. Its per-turn cost
//!   should not grow with the history.
//! - `raw`: no summary and a window big enough for everything, so every message is in the
//!   context. It grows with the history and shows what compaction saves.
//!
//! For each shape and size, group `context_turn`:
//!
//! - `new_message`: a turn with a new user message, whose tokens are counted;
//! - `no_new_message/reload`: the same preparation when nothing new needs counting (the input's
//!   count is already cached);
//! - `no_new_message/retry`: a started run whose first call failed with a server error builds
//!   the request again (`Run::on_model_result`), with no new message.
//!
//! Group `context_turn_parts` splits the compacted `new_message` turn into its stages (store
//! load from the in-memory store and from SQLite, `Run::new`, `Run::start`), so a stage that
//! grows with the history shows. Group `uncached_count` counts a 10,000-message history from
//! scratch: what the cached counts save on every turn.
//!
//! `cargo bench -p keel-core --bench context_turn -- --warm-up-time 1 --measurement-time 3`

use chrono::{DateTime, Utc};
use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use keel_core::context;
use keel_core::tokens::{self, Encoding};
use keel_core::{
    InternalReason, Message, ProviderError, ProviderErrorKind, Run, RunSettings, SeqRange, Step,
    Store, StoredMessage, ToolSpec,
};
use keel_store::MemoryStore;
use keel_store::SqliteStore;

mod common;
use common::{Conversation, Rng};
use serde_json::json;
use tokio::runtime::Runtime;

/// History sizes, in stored messages.
const SIZES: [usize; 3] = [100, 1_000, 10_000];
/// Messages a compacted session keeps verbatim after its summary.
const TAIL: usize = 20;
/// The model: gpt-4o counts with o200k_base and has a 128k window.
const MODEL: &str = "gpt-4o";
const SESSION: &str = "bench";

/// A session of `size` stored messages. `compacted`: `size - 1` messages plus a compaction
/// summary of all but the last ~`TAIL` of them, stored ten messages before the end (as the
/// loop stores it: after the messages it keeps verbatim). Every count is cached.
fn session(size: usize, compacted: bool) -> Vec<Message> {
    let encoding = Encoding::for_model(MODEL);
    let mut conversation = Conversation::new();
    let mut messages = if compacted {
        let mut messages = conversation.messages(size - 1);
        let cut = context::cut_point(&messages, 0, TAIL);
        let head: Vec<&Message> = messages[..cut].iter().collect();
        let pinned = context::pinned_results(&head);
        let mut summary = Message::internal_user(
            format!(
                "Summary of the earlier conversation (messages 1–{cut}):\n{}{}",
                conversation.rng.text(600),
                context::pinned_section(&pinned)
            ),
            InternalReason::CompactionSummary,
        );
        // Stored messages are numbered from 1, so the one at index `cut - 1` has seq `cut`.
        summary.meta.summary_of = Some(SeqRange {
            first: 1,
            last: cut as u64,
        });
        let at = messages.len().saturating_sub(10).max(cut);
        messages.insert(at, summary);
        messages
    } else {
        conversation.messages(size)
    };
    for message in &mut messages {
        tokens::cache_tokens(encoding, message);
    }
    assert_eq!(messages.len(), size);
    messages
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "read_file",
            "Reads a UTF-8 text file of the workspace and returns its content.",
            json!({"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}),
        ),
        ToolSpec::new(
            "grep",
            "Searches files under a path for a regular expression; returns matching lines.",
            json!({"type": "object", "properties": {"pattern": {"type": "string"},
                   "path": {"type": "string"}}, "required": ["pattern"]}),
        ),
        ToolSpec::new(
            "run_command",
            "Runs a shell command in the workspace and returns its output and exit code.",
            json!({"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}),
        ),
    ]
}

fn settings(compacted: bool) -> RunSettings {
    let mut settings = RunSettings::new("bench", MODEL);
    settings.system_prompt = Some(Rng(7).text(250));
    if !compacted {
        // Everything fits: no compaction, whatever the history.
        settings.context.window = Some(u32::MAX);
    }
    settings
}

/// One session in a store, with what a turn needs.
struct Case {
    shape: &'static str,
    size: usize,
    settings: RunSettings,
    tools: Vec<ToolSpec>,
    store: MemoryStore,
    /// The session in SQLite (compacted only), for the store-load stage.
    sqlite: Option<SqliteStore>,
    /// How many messages the store hands a new run.
    loaded: usize,
}

impl Case {
    fn new(rt: &Runtime, size: usize, compacted: bool) -> Case {
        let messages = session(size, compacted);
        let store = MemoryStore::new();
        rt.block_on(store.append_messages(SESSION, None, &messages))
            .expect("append");
        let sqlite = compacted.then(|| {
            rt.block_on(async {
                let sqlite = SqliteStore::open_temporary().await.expect("sqlite");
                sqlite
                    .append_messages(SESSION, None, &messages)
                    .await
                    .expect("append");
                sqlite
            })
        });
        let mut case = Case {
            shape: if compacted { "compacted" } else { "raw" },
            size,
            settings: settings(compacted),
            tools: tools(),
            store,
            sqlite,
            loaded: 0,
        };
        case.loaded = case.check(rt);
        case
    }

    /// Asserts the fixture is what the benchmark claims: counts cached, the expected part of
    /// the history loaded, and a first step that calls the model rather than compacting.
    fn check(&self, rt: &Runtime) -> usize {
        let history = rt.block_on(self.load());
        assert!(
            history
                .iter()
                .all(|stored| stored.message.meta.tokens.is_some()),
            "every stored message has its count cached"
        );
        let loaded = history.len();
        if self.shape == "compacted" {
            assert!(loaded <= TAIL + 2, "{} loads {loaded}", self.size);
            if let Some(sqlite) = &self.sqlite {
                let from_sqlite = rt.block_on(sqlite.context_messages(SESSION)).expect("load");
                assert_eq!(from_sqlite.len(), loaded);
                assert!(from_sqlite.iter().all(|s| s.message.meta.tokens.is_some()));
            }
        } else {
            assert_eq!(loaded, self.size);
        }
        let (run, step) = self.prepare(history, new_message());
        let Step::CallModel(call) = step else {
            panic!(
                "{} {}: expected a model call, got {step:?}",
                self.shape, self.size
            );
        };
        assert!(call.request.messages.len() >= loaded.min(TAIL));
        eprintln!(
            "{} {}: {loaded} messages loaded, {} in the request, {} context tokens",
            self.shape,
            self.size,
            call.request.messages.len(),
            run.context_tokens()
        );
        loaded
    }

    async fn load(&self) -> Vec<StoredMessage> {
        self.store.context_messages(SESSION).await.expect("load")
    }

    fn build(&self, history: Vec<StoredMessage>, input: Message) -> Run {
        Run::new(
            "run",
            SESSION,
            self.settings.clone(),
            self.tools.clone(),
            history,
            input,
            DateTime::<Utc>::UNIX_EPOCH,
        )
    }

    fn prepare(&self, history: Vec<StoredMessage>, input: Message) -> (Run, Step) {
        let mut run = self.build(history, input);
        let step = run.start();
        (run, step)
    }

    /// The whole turn: load, build, first request.
    fn turn(&self, rt: &Runtime, input: Message) -> (Run, Step) {
        let history = rt.block_on(self.load());
        self.prepare(history, input)
    }

    /// Large fixtures keep fewer outputs alive at once.
    fn batch(&self) -> BatchSize {
        if self.loaded > 1_000 {
            BatchSize::LargeInput
        } else {
            BatchSize::SmallInput
        }
    }
}

/// The user's next message: new, so its tokens are not counted yet.
fn new_message() -> Message {
    Message::user(
        "Thanks. Now run the migration tests again with the retry policy at 30 seconds, and tell \
         me which of them still fail and why; if the config loader is the cause, fix it first.",
    )
}

fn server_error() -> ProviderError {
    ProviderError::new(ProviderErrorKind::Server, "503 Service Unavailable").with_status(503)
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cases: Vec<Case> = [true, false]
        .into_iter()
        .flat_map(|compacted| SIZES.map(|size| (size, compacted)))
        .map(|(size, compacted)| Case::new(&rt, size, compacted))
        .collect();

    let mut group = c.benchmark_group("context_turn");
    for case in &cases {
        group.bench_function(
            BenchmarkId::new(format!("new_message/{}", case.shape), case.size),
            |b| b.iter_batched(new_message, |input| case.turn(&rt, input), case.batch()),
        );
        let mut counted = new_message();
        tokens::cache_tokens(Encoding::for_model(MODEL), &mut counted);
        group.bench_function(
            BenchmarkId::new(format!("no_new_message/reload/{}", case.shape), case.size),
            |b| {
                b.iter_batched(
                    || counted.clone(),
                    |input| case.turn(&rt, input),
                    case.batch(),
                )
            },
        );
        group.bench_function(
            BenchmarkId::new(format!("no_new_message/retry/{}", case.shape), case.size),
            |b| {
                b.iter_batched(
                    || case.turn(&rt, new_message()).0,
                    |mut run| {
                        let step = run.on_model_result(Err(server_error()));
                        assert!(matches!(step, Step::CallModel(_)));
                        (run, step)
                    },
                    case.batch(),
                )
            },
        );
    }
    group.finish();

    let mut parts = c.benchmark_group("context_turn_parts");
    for case in cases.iter().filter(|case| case.shape == "compacted") {
        parts.bench_function(BenchmarkId::new("load/memory", case.size), |b| {
            b.iter(|| rt.block_on(case.load()))
        });
        if let Some(sqlite) = &case.sqlite {
            parts.bench_function(BenchmarkId::new("load/sqlite", case.size), |b| {
                b.iter(|| rt.block_on(sqlite.context_messages(SESSION)).expect("load"))
            });
        }
        let history = rt.block_on(case.load());
        parts.bench_function(BenchmarkId::new("run_new", case.size), |b| {
            b.iter_batched(
                || (history.clone(), new_message()),
                |(history, input)| case.build(history, input),
                BatchSize::SmallInput,
            )
        });
        parts.bench_function(BenchmarkId::new("start", case.size), |b| {
            b.iter_batched(
                || case.build(history.clone(), new_message()),
                |mut run| {
                    let step = run.start();
                    (run, step)
                },
                BatchSize::SmallInput,
            )
        });
    }
    parts.finish();

    let mut uncached = c.benchmark_group("uncached_count");
    uncached.sample_size(10);
    let encoding = Encoding::for_model(MODEL);
    let largest = SIZES[SIZES.len() - 1];
    let mut history = session(largest, false);
    for message in &mut history {
        message.meta.tokens = None;
    }
    uncached.bench_function(BenchmarkId::new("raw", largest), |b| {
        b.iter(|| {
            history
                .iter()
                .map(|message| u64::from(tokens::message_tokens(encoding, message)))
                .sum::<u64>()
        })
    });
    uncached.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
