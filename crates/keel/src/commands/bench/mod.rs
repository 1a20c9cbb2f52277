//! `keel bench`: N concurrent conversations of K iterations each against the scripted model —
//! in process, or `keel mock-provider` over HTTP — with L ms of simulated model latency per
//! call, reporting the loop's own overhead per iteration, wall time against the ideal (K × L),
//! throughput and memory.
//!
//! Every conversation is a real run of the agent: the store (in memory or SQLite) gets its
//! messages, checkpoints, envelope rows and events at every boundary, and each of the first
//! K − 1 model calls asks for a tool that runs. The model answers from a per-turn script, so
//! each conversation walks it from its start whatever the others do.

mod daemon;
mod mock_process;
mod open_loop;
mod report;
mod serve;
mod streams;
mod timing;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use indicatif::{ProgressBar, ProgressStyle};
use keel_core::{
    Agent, AgentState, Provider, RunRequest, Store, Tool, ToolContext, ToolError, ToolOutput,
    ToolSpec,
};
use keel_mock::{Script, ScriptedProvider, Step};
use keel_providers::{OpenAiChat, OpenAiConfig};
use keel_store::MemoryStore;
use keel_store::SqliteStore;
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cli::{BenchArgs, BenchStart, BenchStore};
use crate::config::ConfigError;
use report::{Counters, Report, Setup, cpu_time, rss_kib};
use timing::{TimedProvider, timed};

/// The tool every iteration but the last asks for.
const TOOL: &str = "lookup";

/// The context window of the bench's model: far more than `--iterations` can fill.
const BENCH_WINDOW: u32 = 1 << 24;

/// Runs `keel bench` (`--serve` on the PostgreSQL database `database` when one is named).
pub async fn bench(args: BenchArgs, database: Option<String>) -> anyhow::Result<ExitCode> {
    if args.conversations == 0 || args.iterations == 0 {
        return Err(
            ConfigError("--conversations and --iterations must be at least 1".into()).into(),
        );
    }
    if args.serve && args.idle_streams.is_some() {
        return streams::bench(&args, database.as_deref()).await;
    }
    if args.serve && args.rate.is_some() {
        return open_loop::bench(&args, database.as_deref()).await;
    }
    if args.serve {
        return serve::bench(&args, database.as_deref()).await;
    }
    let setup = Setup {
        conversations: args.conversations,
        iterations: args.iterations,
        latency_ms: args.latency_ms,
        store: match args.store {
            BenchStore::Memory => "memory",
            BenchStore::Sqlite => "sqlite",
        }
        .into(),
        transport: if args.http { "http" } else { "in-process" }.into(),
        stream: args.http && args.stream,
        start: match args.start {
            BenchStart::Burst => "burst",
            BenchStart::Spread => "spread",
        }
        .into(),
    };
    let script = script(args.iterations, args.latency_ms);
    let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
    let (model, _server): (Arc<dyn Provider>, _) = if args.http {
        // Each conversation holds a connection to the mock while its call is in flight.
        let wanted = args.conversations as u64 + 256;
        raise_open_files(wanted)?;
        let server = mock_process::MockProcess::start(&script, dir.path())?;
        let adapter = OpenAiChat::new(OpenAiConfig::new(server.url()))
            .map_err(|e| anyhow::anyhow!("cannot reach the mock: {e}"))?;
        (Arc::new(adapter), Some(server))
    } else {
        let provider = ScriptedProvider::new(script).without_recording();
        (Arc::new(provider), None)
    };
    let store: Arc<dyn Store> = match args.store {
        BenchStore::Memory => Arc::new(MemoryStore::new()),
        BenchStore::Sqlite => Arc::new(
            SqliteStore::open(&dir.path().join("bench.db"))
                .await
                .map_err(|e| anyhow::anyhow!("cannot open the bench database: {e}"))?,
        ),
    };
    let mut builder = Agent::builder();
    let traces = if args.traces {
        let traces = crate::telemetry::BenchTraces::start().await?;
        builder = builder.event_sink(traces.sink());
        Some(traces)
    } else {
        None
    };
    let agent = Arc::new(
        builder
            .provider(Arc::new(TimedProvider::new(model)))
            .model("bench-model")
            .store(store)
            .tool(Arc::new(Lookup::new()))
            .max_iterations(args.iterations + 1)
            // The bench measures the loop, not compaction: the scripted model finds its place
            // in a turn by the turn's messages, which a compaction would drop, so a long
            // conversation (hundreds of iterations) would never reach its answer in 32k.
            .context_window(BENCH_WINDOW)
            .stream(setup.stream)
            .build()?,
    );

    // One conversation first, unmeasured: the tokenizer's regex, the store's statements and
    // the connection pool are set up once per process, not per conversation.
    let warm_up = agent
        .run(RunRequest::new("Look up every item on the list."))
        .await;
    if let Err(failure) = check(warm_up, args.iterations) {
        anyhow::bail!("the warm-up conversation failed: {failure}");
    }

    let progress = progress_bar(args.conversations, args.json);
    let (baseline_rss_kib, _) = rss_kib();
    let cpu_before = cpu_time();
    let started = Instant::now();
    let gap = match args.start {
        BenchStart::Burst => Duration::ZERO,
        BenchStart::Spread => {
            Duration::from_millis(args.latency_ms) / u32::try_from(args.conversations)?
        }
    };
    let mut conversations = JoinSet::new();
    for i in 0..args.conversations {
        let agent = agent.clone();
        let start_at = started + gap * i as u32;
        conversations.spawn(async move {
            tokio::time::sleep_until(start_at).await;
            // Boxed: the timing wrapper would otherwise hold the run's state machine inline,
            // tripling each task's size.
            // Each conversation's texts are its own, as in real use: none of them is counted
            // from a memo filled by another.
            let task = format!("Look up every item on list {i}.");
            timed(Box::pin(agent.run(RunRequest::new(task)))).await
        });
    }
    let mut timelines = Vec::with_capacity(args.conversations);
    let mut first_failure = None;
    while let Some(joined) = conversations.join_next().await {
        progress.inc(1);
        let (outcome, timeline) = joined.context("a conversation panicked")?;
        match check(outcome, args.iterations) {
            Ok(()) => timelines.push(timeline),
            Err(failure) => {
                first_failure.get_or_insert(failure);
            }
        }
    }
    let counters = Counters {
        wall: started.elapsed(),
        cpu: cpu_time().saturating_sub(cpu_before),
        baseline_rss_kib,
        peak_rss_kib: rss_kib().1,
    };
    progress.finish_and_clear();

    if let Some(traces) = traces {
        traces.finish().await;
    }
    let failed = first_failure.is_some();
    let report = Report::new(setup, &timelines, first_failure, counters);
    report::finish(&report, args.json, Report::text, failed)
}

/// The per-turn script: K − 1 tool calls with distinct arguments (so no loop detector fires),
/// then the answer; every step takes `latency_ms` and reports its usage (nothing to estimate).
fn script(iterations: u32, latency_ms: u64) -> Script {
    let mut steps: Vec<Step> = (1..iterations)
        .map(|i| {
            Step::tool_call(TOOL, json!({"item": format!("item-{i}")}))
                .with_text(format!("Looking up item {i}."))
                .with_usage(400 + 60 * u64::from(i), 24)
                .with_delay_ms(latency_ms)
        })
        .collect();
    steps.push(
        Step::text("Every item is looked up: all of them are in stock.")
            .with_usage(400 + 60 * u64::from(iterations), 16)
            .with_delay_ms(latency_ms),
    );
    Script::new(steps).with_per_turn()
}

/// Whether a conversation did what the script says: completed, with every iteration.
fn check(
    outcome: Result<keel_core::RunReport, keel_core::AgentError>,
    iterations: u32,
) -> Result<(), String> {
    let report = outcome.map_err(|e| format!("the run failed: {e}"))?;
    if report.state != AgentState::Completed || report.iterations != iterations {
        return Err(format!(
            "run {} ended {} after {} of {iterations} iterations: {}",
            report.run_id,
            report.state,
            report.iterations,
            report.error.as_deref().unwrap_or("no error")
        ));
    }
    Ok(())
}

/// A progress bar on a terminal; hidden for `--json` or when stderr is not a terminal.
fn progress_bar(conversations: usize, json: bool) -> ProgressBar {
    use std::io::IsTerminal;
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(conversations as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {pos}/{len} conversations {elapsed_precise}")
    {
        bar.set_style(style);
    }
    bar
}

/// Raises this process's limit on open files to at least `wanted` (up to the hard limit).
fn raise_open_files(wanted: u64) -> anyhow::Result<()> {
    let got =
        rlimit::increase_nofile_limit(wanted).context("cannot raise the limit on open files")?;
    if got < wanted {
        return Err(ConfigError(format!(
            "--http with this many conversations needs {wanted} open files, and the hard limit \
             is {got}; raise it (ulimit -Hn) or use fewer conversations"
        ))
        .into());
    }
    Ok(())
}

/// The bench's tool: looks an item up (no I/O, so what is measured is the loop around it).
/// Every answer differs, as real tool output does: a stock count from a counter.
struct Lookup {
    spec: ToolSpec,
    answers: AtomicU64,
}

impl Lookup {
    fn new() -> Lookup {
        let mut spec = ToolSpec::new(
            TOOL,
            "Looks an item up in the stock table.",
            json!({
                "type": "object",
                "properties": {"item": {"type": "string"}},
                "required": ["item"]
            }),
        );
        spec.idempotent = true;
        Lookup {
            spec,
            answers: AtomicU64::new(0),
        }
    }
}

#[async_trait]
impl Tool for Lookup {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        arguments: serde_json::Value,
        _: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let item = arguments["item"].as_str().unwrap_or("?");
        let stock = self.answers.fetch_add(1, Ordering::Relaxed);
        Ok(ToolOutput::text(format!("{item}: {stock} in stock")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_conversation_walks_the_whole_script_and_is_timed() {
        let provider: Arc<dyn Provider> =
            Arc::new(ScriptedProvider::new(script(3, 200)).without_recording());
        let agent = Agent::builder()
            .provider(Arc::new(TimedProvider::new(provider)))
            .model("bench-model")
            .store(Arc::new(MemoryStore::new()))
            .tool(Arc::new(Lookup::new()))
            .max_iterations(4)
            .build()
            .unwrap();
        // Two conversations at once: each walks the per-turn script from its start.
        let (first, second) = tokio::join!(
            timed(agent.run(RunRequest::new("go"))),
            timed(agent.run(RunRequest::new("go")))
        );
        let mut outputs = Vec::new();
        for (outcome, timeline) in [first, second] {
            let report = outcome.unwrap();
            assert_eq!(report.tool_calls.len(), 2);
            assert!(report.tool_calls[1].output.starts_with("item-2: "));
            outputs.extend(report.tool_calls.iter().map(|call| call.output.clone()));
            check(Ok(report), 3).unwrap();
            // Paused time: each model call takes exactly the latency, the loop no virtual time.
            assert!(
                timeline
                    .model_times()
                    .all(|d| d == Duration::from_millis(200))
            );
            assert_eq!(timeline.overheads().len(), 3);
            assert_eq!(timeline.wall(), Duration::from_millis(600));
        }
        outputs.sort();
        outputs.dedup();
        assert_eq!(outputs.len(), 4, "every tool answer differs");
    }

    #[test]
    fn a_short_conversation_is_a_failure_with_a_reason() {
        let report = keel_core::RunReport {
            run_id: "r".into(),
            session_id: "s".into(),
            state: AgentState::Error,
            reason: None,
            final_text: None,
            error: Some("boom".into()),
            iterations: 1,
            model: "m".into(),
            tool_calls: Vec::new(),
            usage: Default::default(),
            cost: 0.0,
            question: None,
            choices: Vec::new(),
            approval: None,
            files: Vec::new(),
        };
        let failure = check(Ok(report), 3).unwrap_err();
        assert!(
            failure.contains("after 1 of 3") && failure.contains("boom"),
            "{failure}"
        );
    }
}
