//! The command line's test kit: `keel bench` and `keel mock-provider`.

use std::path::PathBuf;

use clap::Args;

/// `keel bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Concurrent conversations.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub conversations: usize,

    /// Iterations per conversation: model calls, all but the last asking for a tool.
    #[arg(long, value_name = "K", default_value_t = 5)]
    pub iterations: u32,

    /// Simulated model latency per call, in milliseconds.
    #[arg(long, value_name = "L", default_value_t = 200)]
    pub latency_ms: u64,

    /// Where runs are stored: in memory, or a SQLite file in a temporary directory.
    #[arg(long, value_enum, default_value_t = BenchStore::Memory)]
    pub store: BenchStore,

    /// Talk to `keel mock-provider` in a child process over HTTP (chat completions) instead of
    /// the in-process scripted provider.
    #[arg(long)]
    pub http: bool,

    /// Through a `keel serve` child process over its HTTP API (SQLite, `keel mock-provider`
    /// as the model): POST latency, wall time, throughput and the daemon's memory.
    #[arg(long)]
    pub serve: bool,

    /// With --serve: how many `keel serve` workers share the store (more than one needs
    /// `--database postgres://…`; each benchmark gets a fresh schema there, dropped after).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub daemons: usize,

    /// With --serve: instead of runs, open N conversations' event streams
    /// (`GET /v1/conversations/{id}/events`) and hold them idle: the daemon's memory per
    /// stream, then how fast a probe's event reaches its stream (see --probes).
    #[arg(long, value_name = "N")]
    pub idle_streams: Option<usize>,

    /// With --idle-streams: messages sent to random conversations (a 1-iteration run at 0 ms
    /// each, 50 a second) once the streams are idle, each timed from its event's emission to
    /// its frame's arrival on the conversation's stream.
    #[arg(long, value_name = "P", default_value_t = 500)]
    pub probes: usize,

    /// With --serve: open-loop arrivals instead of a fixed set of conversations: R new
    /// messages per second on a fixed schedule, each to a new conversation, each a run of
    /// --iterations at --latency-ms; latencies counted from each message's scheduled time.
    #[arg(
        long,
        value_name = "R",
        requires = "serve",
        conflicts_with = "idle_streams"
    )]
    pub rate: Option<f64>,

    /// With --rate: seconds of arrivals.
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    pub duration: f64,

    /// With --http or --serve, ask for streamed answers.
    #[arg(long)]
    pub stream: bool,

    /// Start all conversations at once (`burst`), or evenly over the first latency period
    /// (`spread`: no queueing behind each other, so the overhead is the loop's alone).
    #[arg(long, value_enum, default_value_t = BenchStart::Burst)]
    pub start: BenchStart,

    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,

    /// In process: also build every run's trace (keel-telemetry's sink and exporter) and post
    /// it over OTLP/HTTP to a receiver in this process that discards it, to measure what
    /// traces cost the loop.
    #[arg(long)]
    pub traces: bool,
}

/// The store `keel bench` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchStore {
    /// In memory.
    Memory,
    /// A SQLite file with durable checkpoints.
    Sqlite,
}

/// How `keel bench` starts its conversations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchStart {
    /// All at once.
    Burst,
    /// Evenly over the first latency period.
    Spread,
}

/// `keel mock-provider`.
#[derive(Debug, Args)]
pub struct MockProviderArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub bind: std::net::SocketAddr,

    /// JSON script of the responses to give, in order.
    #[arg(long, value_name = "FILE")]
    pub script: PathBuf,

    /// Keep no request bodies (for long benchmark runs).
    #[arg(long)]
    pub no_record: bool,
}
