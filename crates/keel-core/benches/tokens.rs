//! Token counting (`keel_core::tokens`) with both BPE encodings, cl100k_base and o200k_base:
//!
//! - `fresh_4kb`: a new 4 KB message (prose, code, paths, numbers, a little non-ASCII), its
//!   count not cached: the BPE runs (`tokens::message_tokens`);
//! - `cached`: the same message once its count is cached in its metadata, as the loop stores
//!   every message: `tokens::cache_tokens` finds the count and does not run the BPE;
//! - `history_100/uncached`: a 100-message history (user turns, tool calls, tool results of a
//!   few hundred words, answers) counted from scratch, message by message, as `Run::new` does
//!   for a history whose counts were never cached;
//! - `history_100/cached`: the same history with every count cached.
//!
//! Throughput is bytes of text counted for the uncached cases, messages for the cached ones.
//! Each fixture is checked once: the counts are the BPE's, and the cache answers the same.
//!
//! `cargo bench -p keel-core --bench tokens -- --warm-up-time 1 --measurement-time 2`

use std::sync::LazyLock;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use keel_core::tokens::{self, Encoding};
use keel_core::{Message, ToolCall};
use serde_json::json;

/// Size of the fresh message, in bytes.
const MESSAGE_BYTES: usize = 4_096;
/// Messages in the history.
const HISTORY: usize = 100;

/// Words the generated text is drawn from: prose, code, paths and numbers, so the BPE sees
/// varied text rather than one repeated token.
const VOCABULARY: &str = "\
the config loader returns an error when file is missing and retry policy backoff seconds \
src/main.rs crates/keel-core/src/run/mod.rs fn parse_args() Result<Config, Error> \
timeout = 30 request failed with status 503 Service Unavailable user_id session 0x7f3a \
tokens window compaction summary let mut count += 1; assert_eq! warning: unused variable \
`x` line 42 column 17 database migration applied 2024-05-17T10:32:11Z INFO DEBUG handler \
GET /api/v1/runs 200 OK latency_ms=183 cache miss hit ratio 0.93 über naïve résumé → \
TODO: refactor this module before release { } [ ] \"id\": \"name\": null true false because \
however which means that we should check whether test passes on CI linux-x86_64 panicked \
at 'index out of bounds' thread main exited code 101 SELECT * FROM messages WHERE seq > \
? ORDER BY LIMIT 100 Ωmega 日本語";

static WORDS: LazyLock<Vec<&str>> = LazyLock::new(|| VOCABULARY.split_whitespace().collect());

/// A small deterministic generator (xorshift), so every run builds the same texts.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }

    fn word(&mut self) -> &'static str {
        WORDS[self.below(WORDS.len())]
    }

    /// `words` words of text, broken into lines now and then.
    fn text(&mut self, words: usize) -> String {
        let mut out = String::with_capacity(words * 7);
        for i in 0..words {
            if i > 0 {
                out.push(if self.below(12) == 0 { '\n' } else { ' ' });
            }
            out.push_str(self.word());
        }
        out
    }

    /// Text of exactly `bytes` bytes (cut at a character boundary, padded with spaces).
    fn text_of(&mut self, bytes: usize) -> String {
        let mut out = String::with_capacity(bytes + 16);
        while out.len() < bytes {
            out.push_str(self.word());
            out.push(if self.below(12) == 0 { '\n' } else { ' ' });
        }
        let mut end = bytes;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        while out.len() < bytes {
            out.push(' ');
        }
        out
    }
}

/// A conversation of exactly `count` messages: turns of a user message, an assistant
/// calling a tool, its result, and now and then a final answer.
fn history(count: usize) -> Vec<Message> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = Vec::with_capacity(count);
    let mut calls = 0;
    while out.len() < count {
        match out.len() % 7 {
            0 => {
                let words = rng.between(15, 60);
                out.push(Message::user(rng.text(words)));
            }
            1 | 3 | 5 if out.len() + 1 < count => {
                calls += 1;
                let id = format!("call_{calls:06}");
                let words = rng.between(0, 20);
                let arguments = json!({"path": format!("src/module_{}.rs", rng.below(400))});
                out.push(Message::assistant_with_calls(
                    rng.text(words),
                    vec![ToolCall {
                        id: id.clone(),
                        name: "read_file".into(),
                        arguments: arguments.to_string(),
                    }],
                ));
                let words = rng.between(150, 400);
                out.push(Message::tool_result(id, rng.text(words)));
            }
            _ => {
                let words = rng.between(40, 150);
                out.push(Message::assistant(rng.text(words)));
            }
        }
    }
    out
}

/// Bytes of text a message's count covers.
fn text_bytes(message: &Message) -> usize {
    message.content.len()
        + message
            .tool_calls
            .iter()
            .map(|call| call.name.len() + call.arguments.len())
            .sum::<usize>()
}

fn bench(c: &mut Criterion) {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let fresh = Message::tool_result("call_1", rng.text_of(MESSAGE_BYTES));
    assert_eq!(fresh.content.len(), MESSAGE_BYTES);
    let uncached = history(HISTORY);
    assert_eq!(uncached.len(), HISTORY);
    let history_bytes: usize = uncached.iter().map(text_bytes).sum();

    let mut group = c.benchmark_group("tokens");
    for (name, encoding) in [
        ("cl100k", Encoding::Cl100kBase),
        ("o200k", Encoding::O200kBase),
    ] {
        // Loads the encoding (once per process) and checks the fixtures.
        let count = tokens::message_tokens(encoding, &fresh);
        assert_eq!(
            count,
            tokens::MESSAGE_OVERHEAD + encoding.count(&fresh.content)
        );
        let mut cached = fresh.clone();
        assert_eq!(tokens::cache_tokens(encoding, &mut cached), count);
        assert_eq!(tokens::cache_tokens(encoding, &mut cached), count);
        let mut counted = uncached.clone();
        let total: u64 = counted
            .iter_mut()
            .map(|message| u64::from(tokens::cache_tokens(encoding, message)))
            .sum();
        eprintln!(
            "{name}: {MESSAGE_BYTES} bytes -> {count} tokens; history of {HISTORY} messages, \
             {history_bytes} bytes -> {total} tokens"
        );

        group.throughput(Throughput::Bytes(MESSAGE_BYTES as u64));
        group.bench_function(BenchmarkId::new(name, "fresh_4kb"), |b| {
            b.iter(|| tokens::message_tokens(encoding, &fresh))
        });
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new(name, "cached"), |b| {
            b.iter(|| tokens::cache_tokens(encoding, &mut cached))
        });
        group.throughput(Throughput::Bytes(history_bytes as u64));
        group.bench_function(BenchmarkId::new(name, "history_100/uncached"), |b| {
            b.iter(|| {
                uncached
                    .iter()
                    .map(|message| u64::from(tokens::message_tokens(encoding, message)))
                    .sum::<u64>()
            })
        });
        group.throughput(Throughput::Elements(HISTORY as u64));
        group.bench_function(BenchmarkId::new(name, "history_100/cached"), |b| {
            b.iter(|| {
                counted
                    .iter_mut()
                    .map(|message| u64::from(tokens::cache_tokens(encoding, message)))
                    .sum::<u64>()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
