//! The rig contender of `benches/peers`: a rig agent with one tool, `lookup`, driven against
//! `keel mock-provider` (OpenAI chat completions, whole answers) the way `keel bench --http`
//! drives keel: one warm-up conversation, then N concurrent conversations walking the mock's
//! per-turn script. Prints one JSON line of what it measured.
//!
//! ```text
//! peers-rig --url URL [--conversations N] [--expect-calls K]   # measured, JSON on stdout
//! peers-rig --url URL --once                                     # one conversation, its answer
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rig_agent::prelude::*;
use rig_agent::tool::ToolContext;
use rig_core::providers::openai::OpenAIConfig;
use serde::Deserialize;
use serde_json::json;

/// The model name every contender sends (the mock answers any).
const MODEL: &str = "bench-model";

/// The most model calls one conversation may make: more than any script asks for.
const MAX_TURNS: usize = 64;

/// The arguments of `lookup`, as the mock's script sends them.
#[derive(Deserialize)]
struct LookupArgs {
    item: String,
}

/// Why `lookup` failed: it never does.
#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

/// The bench's tool, as keel bench's: no I/O, each answer its own text from a counter.
#[derive(Clone)]
struct Lookup {
    answers: Arc<AtomicU64>,
}

impl Tool for Lookup {
    const NAME: &'static str = "lookup";
    type Args = LookupArgs;
    type Output = String;
    type Error = Never;

    fn description(&self) -> String {
        "Looks an item up in the stock table.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {"item": {"type": "string"}},
            "required": ["item"]
        })
    }

    async fn call(&self, _: &mut ToolContext, args: LookupArgs) -> Result<String, Never> {
        let stock = self.answers.fetch_add(1, Ordering::Relaxed);
        Ok(format!("{}: {stock} in stock", args.item))
    }
}

/// What the command line asks for.
struct Options {
    url: String,
    conversations: usize,
    expect_calls: usize,
    once: bool,
}

fn options() -> Options {
    let mut options = Options {
        url: String::new(),
        conversations: 1,
        expect_calls: 0,
        once: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().expect("a value after the flag");
        match arg.as_str() {
            "--url" => options.url = value(),
            "--conversations" => options.conversations = value().parse().expect("a count"),
            "--expect-calls" => options.expect_calls = value().parse().expect("a count"),
            "--once" => options.once = true,
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(!options.url.is_empty(), "--url is required");
    options
}

/// One conversation: its answer and how many model calls it took.
async fn converse(agent: &Agent, task: String) -> (String, usize) {
    let response = agent
        .prompt(task)
        .max_turns(MAX_TURNS)
        .await
        .expect("the conversation completes");
    (response.output(), response.completion_calls.len())
}

/// Peak resident memory of this process, in KiB (`VmHWM`).
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() {
    let options = options();
    let model = OpenAIConfig::new("not-a-key")
        .with_base_url(options.url.clone())
        .client()
        .chat(MODEL);
    let agent = Arc::new(
        AgentBuilder::new(model)
            .tool(Lookup {
                answers: Arc::new(AtomicU64::new(0)),
            })
            .build(),
    );

    if options.once {
        let (answer, _) = converse(&agent, "Say hello.".into()).await;
        println!("{answer}");
        return;
    }

    // Unmeasured, as keel bench's warm-up: connections and lazy set-up happen once.
    let (_, calls) = converse(&agent, "Look up every item on the list.".into()).await;
    assert!(
        options.expect_calls == 0 || calls == options.expect_calls,
        "the warm-up made {calls} model calls, not {}",
        options.expect_calls
    );

    let started = Instant::now();
    let mut conversations = tokio::task::JoinSet::new();
    for i in 0..options.conversations {
        let agent = agent.clone();
        conversations.spawn(async move {
            converse(&agent, format!("Look up every item on list {i}.")).await
        });
    }
    let mut total_calls = 0;
    while let Some(joined) = conversations.join_next().await {
        let (_, calls) = joined.expect("a conversation panicked");
        total_calls += calls;
    }
    let wall = started.elapsed().as_secs_f64();
    let report = json!({
        "contender": "rig",
        "conversations": options.conversations,
        "model_calls": total_calls,
        "wall_s": wall,
        "ms_per_call": wall * 1000.0 / total_calls as f64,
        "calls_per_s": total_calls as f64 / wall,
        "peak_rss_mib": peak_rss_kib() as f64 / 1024.0,
    });
    println!("{report}");
}
