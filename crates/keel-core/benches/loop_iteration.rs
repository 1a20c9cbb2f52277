//! Wall time of the loop per iteration (one model call + one tool batch), against the
//! in-process scripted provider and against `keel-mock`'s HTTP server, with the in-memory and the
//! SQLite store. Each measured run does exactly `ITERATIONS` iterations; criterion's throughput
//! line gives iterations per second.
//!
//! `cargo bench -p keel-core --bench loop_iteration`

use std::sync::Arc;

use async_trait::async_trait;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use keel_core::{
    Agent, AgentBuilder, Provider, RunRequest, Store, Tool, ToolContext, ToolError, ToolOutput,
    ToolSpec,
};
use keel_extensions::AgentCallbacks;
use keel_mock::{MockServer, Script, ScriptedProvider, ServeOptions, Step};
use keel_providers::{OpenAiChat, OpenAiConfig};
use keel_store::MemoryStore;
use keel_store::SqliteStore;
use serde_json::json;

const ITERATIONS: u32 = 10;

struct Noop(ToolSpec);

#[async_trait]
impl Tool for Noop {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(&self, _: serde_json::Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("ok"))
    }
}

/// Nine tool calls with distinct arguments (so no loop detector fires), then the answer: ten
/// iterations, every usage given (nothing for the mock to estimate).
fn steps() -> Vec<Step> {
    let mut steps: Vec<Step> = (1..ITERATIONS)
        .map(|n| Step::tool_call("noop", json!({"n": n})).with_usage(500, 20))
        .collect();
    steps.push(Step::text("done").with_usage(600, 5));
    steps
}

fn agent(provider: Arc<dyn Provider>, store: Arc<dyn Store>, stream: bool) -> Agent {
    builder(provider, store, stream).build().expect("agent")
}

/// The agent with all seven typed callbacks counting what they see: their cost next to
/// `agent`'s (the events they read are built either way when any sink listens).
fn watched(provider: Arc<dyn Provider>, store: Arc<dyn Store>, stream: bool) -> Agent {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let seen = Arc::new(AtomicU64::new(0));
    let count = |seen: &Arc<AtomicU64>| {
        let seen = seen.clone();
        move || {
            seen.fetch_add(1, Relaxed);
        }
    };
    let (a, b, c, d, e, f, g) = (
        count(&seen),
        count(&seen),
        count(&seen),
        count(&seen),
        count(&seen),
        count(&seen),
        count(&seen),
    );
    builder(provider, store, stream)
        .on_tool_progress(move |_| a())
        .on_thinking(move |_| b())
        .on_reasoning(move |_| c())
        .on_step(move |_| d())
        .on_stream_delta(move |_| e())
        .on_tool_call_parsed(move |_| f())
        .on_status(move |_| g())
        .build()
        .expect("agent")
}

fn builder(provider: Arc<dyn Provider>, store: Arc<dyn Store>, stream: bool) -> AgentBuilder {
    Agent::builder()
        .provider(provider)
        .model("bench")
        .store(store)
        .tool(Arc::new(Noop(ToolSpec::new(
            "noop",
            "does nothing",
            json!({"type": "object"}),
        ))))
        .max_iterations(ITERATIONS)
        .stream(stream)
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite: Arc<dyn Store> = Arc::new(
        rt.block_on(SqliteStore::open(&dir.path().join("bench.db")))
            .expect("sqlite"),
    );
    let server = rt
        .block_on(MockServer::start_with(
            "127.0.0.1:0".parse().expect("addr"),
            Script::new(steps()).with_per_turn(),
            ServeOptions { record: false },
        ))
        .expect("mock server");
    let http: Arc<dyn Provider> =
        Arc::new(OpenAiChat::new(OpenAiConfig::new(server.base_url())).expect("adapter"));
    let in_process: Arc<dyn Provider> =
        Arc::new(ScriptedProvider::new(Script::new(steps()).with_per_turn()).without_recording());

    let cases: Vec<(&str, Agent)> = vec![
        (
            "in_process/memory",
            agent(in_process.clone(), Arc::new(MemoryStore::new()), false),
        ),
        (
            "in_process/memory/stream",
            agent(in_process.clone(), Arc::new(MemoryStore::new()), true),
        ),
        (
            "in_process/memory/stream/callbacks",
            watched(in_process.clone(), Arc::new(MemoryStore::new()), true),
        ),
        (
            "in_process/sqlite",
            agent(in_process, sqlite.clone(), false),
        ),
        (
            "http/memory/whole",
            agent(http.clone(), Arc::new(MemoryStore::new()), false),
        ),
        (
            "http/memory/stream",
            agent(http.clone(), Arc::new(MemoryStore::new()), true),
        ),
        ("http/sqlite/stream", agent(http, sqlite, true)),
    ];
    let mut group = c.benchmark_group("loop_iteration");
    group.throughput(Throughput::Elements(u64::from(ITERATIONS)));
    for (name, agent) in &cases {
        group.bench_function(*name, |b| {
            b.iter(|| rt.block_on(agent.run(RunRequest::new("go"))).expect("run"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
