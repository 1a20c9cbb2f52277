//! `keel bench --serve`: the same conversations, sent through `keel serve` child processes over
//! their HTTP API (`keel mock-provider` as the model): each conversation is one `POST
//! .../messages` (timed: the API's latency) and its run's SSE stream, read to the end. The store
//! is SQLite (one daemon), or a fresh schema of the PostgreSQL database `--database` names,
//! shared by `--daemons N` workers: conversation `i` is sent to and followed on worker `i mod
//! N`, and any worker may run it. Reports iterations per second, wall time against the ideal,
//! the POST latencies, the daemons' peak memory and CPU time, and on PostgreSQL the database's
//! CPU time per safe boundary stored.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::daemon::{Api, DaemonProcess, admin_key, prepare_home, script};
use super::mock_process::MockProcess;
use super::report::Spread;
use crate::cli::{BenchArgs, BenchStart};

/// What `keel bench --serve` measured.
#[derive(Debug, Serialize)]
pub struct ServeReport {
    /// Concurrent conversations.
    pub conversations: usize,
    /// Iterations per conversation.
    pub iterations: u32,
    /// Model latency per call, in milliseconds.
    pub latency_ms: u64,
    /// Conversations whose run completed.
    pub completed: usize,
    /// The first failure, if any.
    pub failure: Option<String>,
    /// First POST to the last run's end, in seconds.
    pub wall_s: f64,
    /// The model's time alone: iterations × latency, in seconds.
    pub ideal_s: f64,
    /// Wall over ideal.
    pub wall_vs_ideal: f64,
    /// Iterations per second, all conversations together.
    pub iterations_per_s: f64,
    /// Latency of `POST /v1/conversations/{id}/messages` (to its 202), in microseconds.
    pub post_latency_us: Spread,
    /// The daemon's peak resident memory, in MiB.
    pub daemon_peak_rss_mib: f64,
    /// The daemon's CPU time (user + system) per iteration, in microseconds (all daemons').
    pub daemon_cpu_per_iteration_us: f64,
    /// `sqlite` or `postgres`.
    pub store: &'static str,
    /// `keel serve` workers sharing the store.
    pub daemons: usize,
    /// Safe boundaries the runs stored (checkpoints).
    pub boundaries: usize,
    /// On PostgreSQL: the local server's CPU time per boundary, in microseconds.
    pub database_cpu_per_boundary_us: Option<f64>,
}

/// Runs `keel bench --serve`, on the PostgreSQL database `database` when given.
pub async fn bench(args: &BenchArgs, database: Option<&str>) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.daemons >= 1, "--daemons must be at least 1");
    anyhow::ensure!(
        args.daemons == 1 || database.is_some(),
        "--daemons {} needs --database postgres://…: a SQLite file is one process's",
        args.daemons
    );
    super::raise_open_files(args.conversations as u64 * 2 + 256)?;
    let schema = match database {
        Some(url) => Some(BenchSchema::create(url).await?),
        None => None,
    };
    let outcome = run(args, schema.as_ref().map(|schema| schema.url.as_str())).await;
    if let Some(schema) = schema {
        schema.drop().await;
    }
    outcome
}

/// A schema of its own for one benchmark, dropped after it.
struct BenchSchema {
    server: String,
    name: String,
    url: String,
}

impl BenchSchema {
    async fn create(server: &str) -> anyhow::Result<BenchSchema> {
        let name = format!("keel_bench_{}", uuid::Uuid::now_v7().simple());
        let url = keel_store::postgres::schemas::create_schema(server, &name).await?;
        Ok(BenchSchema {
            server: server.to_string(),
            name,
            url,
        })
    }

    async fn drop(self) {
        if let Err(error) =
            keel_store::postgres::schemas::drop_schema(&self.server, &self.name).await
        {
            eprintln!("keel bench: {error}");
        }
    }
}

/// The benchmark proper, on the store `database` names (SQLite in the home when `None`).
async fn run(args: &BenchArgs, database: Option<&str>) -> anyhow::Result<ExitCode> {
    let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
    let mock = MockProcess::start(&script(args.iterations, args.latency_ms), dir.path())?;
    let home = prepare_home(
        dir.path(),
        &mock,
        args.stream,
        args.iterations + 1,
        args.conversations.max(1),
    )?;
    let key = admin_key(&home, database)?;
    let mut daemons = Vec::with_capacity(args.daemons);
    for _ in 0..args.daemons {
        daemons.push(DaemonProcess::start(&home, database)?);
    }
    keel_providers::install_crypto_provider();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.conversations + 16)
        .build()?;
    let apis: Vec<Api> = daemons
        .iter()
        .map(|daemon| Api {
            http: http.clone(),
            base: daemon.url.clone(),
            key: key.clone(),
        })
        .collect();

    // One conversation per worker first, unmeasured (tokenizer tables, statements,
    // connections).
    for api in &apis {
        api.warm_up().await?;
    }
    let mut conversations = Vec::with_capacity(args.conversations);
    for i in 0..args.conversations {
        let api = apis[i % apis.len()].clone();
        conversations.push((api.conversation().await?, api));
    }

    let cpu_before: Duration = daemons.iter().map(DaemonProcess::cpu_time).sum();
    let database_cpu_before = super::report::postgres_cpu_time();
    let gap = match args.start {
        BenchStart::Burst => Duration::ZERO,
        BenchStart::Spread => {
            Duration::from_millis(args.latency_ms) / u32::try_from(args.conversations.max(1))?
        }
    };
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for (i, (conversation, api)) in conversations.into_iter().enumerate() {
        let start_at = started + gap * i as u32;
        tasks.spawn(async move {
            tokio::time::sleep_until(start_at).await;
            let (post, run_id) = api.send(&conversation).await?;
            let state = api.follow(&run_id).await?;
            anyhow::Ok((post, state, run_id))
        });
    }
    let mut posts = Vec::new();
    let mut completed = 0;
    let mut failure = None;
    let mut run_ids = Vec::with_capacity(args.conversations);
    while let Some(joined) = tasks.join_next().await {
        match joined.context("a conversation panicked")? {
            Ok((post, state, run_id)) if state == "completed" => {
                posts.push(post);
                completed += 1;
                run_ids.push(run_id);
            }
            Ok((post, state, run_id)) => {
                posts.push(post);
                failure.get_or_insert(format!("run {run_id} ended {state}"));
            }
            Err(error) => {
                failure.get_or_insert(format!("{error:#}"));
            }
        }
    }
    let wall = started.elapsed();
    let cpu = daemons
        .iter()
        .map(DaemonProcess::cpu_time)
        .sum::<Duration>()
        .saturating_sub(cpu_before);
    let database_cpu = super::report::postgres_cpu_time().saturating_sub(database_cpu_before);
    let peak_rss_kib: u64 = daemons.iter().map(DaemonProcess::peak_rss_kib).sum();
    drop(daemons);
    let boundaries = boundaries(&home, database, &run_ids).await?;
    let iterations = (completed as f64) * f64::from(args.iterations);
    let ideal = Duration::from_millis(args.latency_ms) * args.iterations;
    let report = ServeReport {
        conversations: args.conversations,
        iterations: args.iterations,
        latency_ms: args.latency_ms,
        completed,
        failure,
        wall_s: wall.as_secs_f64(),
        ideal_s: ideal.as_secs_f64(),
        wall_vs_ideal: wall.as_secs_f64() / ideal.as_secs_f64().max(1e-9),
        iterations_per_s: iterations / wall.as_secs_f64(),
        post_latency_us: Spread::of(posts),
        daemon_peak_rss_mib: peak_rss_kib as f64 / 1024.0,
        daemon_cpu_per_iteration_us: cpu.as_secs_f64() * 1e6 / iterations.max(1.0),
        store: if database.is_some() {
            "postgres"
        } else {
            "sqlite"
        },
        daemons: args.daemons,
        boundaries,
        database_cpu_per_boundary_us: database
            .map(|_| database_cpu.as_secs_f64() * 1e6 / (boundaries.max(1) as f64)),
    };
    let failed = report.failure.is_some();
    super::report::finish(&report, args.json, text, failed)
}

/// Safe boundaries the measured runs stored, read from the store once the daemons are gone.
async fn boundaries(
    home: &Path,
    database: Option<&str>,
    run_ids: &[String],
) -> anyhow::Result<usize> {
    use keel_core::Store;
    let store: Box<dyn Store> = match database {
        Some(url) => Box::new(keel_store::PgStore::open(url).await?),
        None => Box::new(keel_store::SqliteStore::open(&home.join("keel.db")).await?),
    };
    let mut count = 0;
    for run_id in run_ids {
        count += store.checkpoints(run_id).await?.len();
    }
    store.close().await;
    Ok(count)
}

fn text(r: &ServeReport) -> String {
    let database = r.database_cpu_per_boundary_us.map_or(String::new(), |us| {
        format!(
            "  database CPU     {us:.0} µs per boundary ({} boundaries)\n",
            r.boundaries
        )
    });
    format!(
        "keel bench --serve: {} conversations × {} iterations, {} ms model latency, {} keel \
         serve on {} over HTTP\n  completed        {}/{}{}\n  wall             {:.2} s \
         (ideal {:.2} s, {:.2}×)\n  throughput       {:.0} iterations/s\n  POST latency     \
         p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms\n  daemon memory    {:.0} MiB peak\n  \
         daemon CPU       {:.0} µs per iteration\n{database}",
        r.conversations,
        r.iterations,
        r.latency_ms,
        r.daemons,
        if r.store == "postgres" {
            "PostgreSQL"
        } else {
            "SQLite"
        },
        r.completed,
        r.conversations,
        r.failure
            .as_ref()
            .map_or(String::new(), |f| format!(" (first failure: {f})")),
        r.wall_s,
        r.ideal_s,
        r.wall_vs_ideal,
        r.iterations_per_s,
        r.post_latency_us.p50 / 1000.0,
        r.post_latency_us.p99 / 1000.0,
        r.post_latency_us.max / 1000.0,
        r.daemon_peak_rss_mib,
        r.daemon_cpu_per_iteration_us,
    )
}
