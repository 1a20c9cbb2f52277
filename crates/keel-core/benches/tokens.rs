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

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use keel_core::Message;
use keel_core::tokens::{self, Encoding};

mod common;
use common::{Conversation, Rng};

/// Size of the fresh message, in bytes.
const MESSAGE_BYTES: usize = 4_096;
/// Messages in the history.
const HISTORY: usize = 100;

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
    let uncached = Conversation::new().messages(HISTORY);
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
