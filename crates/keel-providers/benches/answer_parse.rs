//! The wire adapters reading a whole (not streamed) answer: each adapter's public parse function
//! over the real recorded answers in `fixtures/providers/` (a text answer and a tool call for
//! each of OpenAI chat, Anthropic and the Responses API), as they come off the socket. No network, no runtime.
//!
//! `cargo bench -p keel-providers --bench answer_parse -- --warm-up-time 1 --measurement-time 2`

use std::path::PathBuf;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use keel_core::{ChatResponse, ProviderError};
use keel_providers::{anthropic, openai_chat, openai_responses};

/// A recorded answer's body.
fn recorded(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/providers")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

type Parse = fn(&[u8]) -> Result<ChatResponse, ProviderError>;

fn bench(c: &mut Criterion) {
    let cases: [(&str, &str, Parse); 6] = [
        (
            "openai_chat",
            "oai_chat_text.json",
            openai_chat::parse_completion,
        ),
        (
            "openai_chat",
            "oai_chat_tool_call.json",
            openai_chat::parse_completion,
        ),
        ("anthropic", "anth_text.json", anthropic::parse_message),
        ("anthropic", "anth_tool_use.json", anthropic::parse_message),
        (
            "responses",
            "resp_text.json",
            openai_responses::parse_response,
        ),
        (
            "responses",
            "resp_function_calls.json",
            openai_responses::parse_response,
        ),
    ];
    let mut group = c.benchmark_group("answer_parse");
    for (adapter, file, parse) in cases {
        let body = recorded(file);
        // Each answer parses before anything is measured.
        parse(&body).unwrap_or_else(|e| panic!("{file}: {e}"));
        group.throughput(Throughput::Bytes(body.len() as u64));
        let name = file.trim_end_matches(".json");
        group.bench_function(BenchmarkId::new(adapter, name), |b| {
            b.iter(|| parse(std::hint::black_box(&body)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
