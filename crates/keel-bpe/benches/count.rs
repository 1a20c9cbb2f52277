//! keel-bpe against tiktoken-rs: a long mixed text counted, and what a first count costs in a
//! fresh table (tiktoken-rs builds its maps; keel-bpe compiles only its regex).

use criterion::{Criterion, criterion_group, criterion_main};
use keel_bpe::Bpe;
use std::hint::black_box;

fn long_text() -> String {
    let mut text = String::new();
    for i in 0..2_000 {
        text.push_str(&format!(
            "Step {i}: read src/module_{i}.rs, found `fn handle_{i}(x: u32) -> Result<()>`; \
             the deploy target is eu-west-{}. Let's go on.\n",
            i % 7
        ));
    }
    text
}

fn count(c: &mut Criterion) {
    let text = long_text();
    let mut group = c.benchmark_group("count");
    group.throughput(criterion::Throughput::Bytes(text.len() as u64));
    for (name, ours, theirs) in [
        (
            "cl100k_base",
            Bpe::cl100k_base(),
            tiktoken_rs::cl100k_base_singleton(),
        ),
        (
            "o200k_base",
            Bpe::o200k_base(),
            tiktoken_rs::o200k_base_singleton(),
        ),
    ] {
        assert_eq!(ours.count(&text), theirs.count_ordinary(&text));
        group.bench_function(format!("keel-bpe/{name}"), |b| {
            b.iter(|| ours.count(black_box(&text)))
        });
        group.bench_function(format!("tiktoken-rs/{name}"), |b| {
            b.iter(|| theirs.count_ordinary(black_box(&text)))
        });
    }
    group.finish();
}

criterion_group!(benches, count);
criterion_main!(benches);
