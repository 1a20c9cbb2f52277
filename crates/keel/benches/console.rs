//! The console and `/metrics` with many stored runs (issue 38): a SQLite home seeded with
//! 1,000 and then 100,000 runs (see `console/seed.rs`: a real daemon writes a template, SQL
//! copies it; seeding is not measured), then a `keel serve` child of this build on it, and
//! each console page and `/metrics` asked for in turn over HTTP (see `console/measure.rs`).
//! One table per size, then how each page's p50 grew from the smallest size to the largest.
//!
//! `cargo bench -p keel --bench console` (release; ~1–2 minutes of seeding at 100,000 runs), or
//! with a release daemon under a bench built in debug (as the other platform benches take
//! `KEEL_BENCH_BIN`): `cargo build --release -p keel && KEEL_BENCH_BIN=$PWD/target/release/keel
//! cargo test -p keel --bench console -- --bench`
//!
//! Under `cargo test --benches` (no `--bench` argument) it runs once at a tiny size, as a smoke
//! test; `tests/e2e_console_bench.rs` does the same under `cargo test`.
//!
//! Flags: `--runs 1000,100000` (the sizes), `--per-conversation 100` (runs per conversation:
//! 1,000 conversations at 100,000 runs), `--requests 200` (per page), `--long-iterations 12`
//! (the model calls of the run whose page is measured; ~50 stored events).

#[path = "console/measure.rs"]
mod measure;
#[path = "console/seed.rs"]
mod seed;

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

/// The bench's flags.
struct Options {
    runs: Vec<usize>,
    sizes: seed::Sizes,
    requests: usize,
}

fn options() -> anyhow::Result<Options> {
    let mut options = Options {
        runs: vec![1_000, 100_000],
        sizes: seed::Sizes {
            runs: 0,
            per_conversation: 100,
            long_iterations: 12,
        },
        requests: 200,
    };
    // Without `--bench` (`cargo test --benches`): a smoke run at a tiny size, other arguments
    // (a test filter, libtest's flags) ignored.
    if !std::env::args().any(|arg| arg == "--bench") {
        options.runs = vec![20];
        options.sizes.per_conversation = 2;
        options.sizes.long_iterations = 4;
        options.requests = 2;
        return Ok(options);
    }
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            // What `cargo bench` passes to every bench.
            "--bench" => {}
            "--runs" => {
                options.runs = value()?
                    .split(',')
                    .map(|n| n.trim().replace('_', "").parse())
                    .collect::<Result<_, _>>()
                    .context("--runs takes numbers separated by commas")?;
            }
            "--per-conversation" => options.sizes.per_conversation = value()?.parse()?,
            "--requests" => options.requests = value()?.parse()?,
            "--long-iterations" => options.sizes.long_iterations = value()?.parse()?,
            other => anyhow::bail!(
                "unknown flag {other} (--runs, --per-conversation, --requests, --long-iterations)"
            ),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(bench()))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("console bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn bench() -> anyhow::Result<()> {
    let options = options()?;
    keel_providers::install_crypto_provider();
    // The keel measured (and seeding with): `KEEL_BENCH_BIN`, else the one built with the bench.
    let bin = std::env::var("KEEL_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_keel").into());
    let exe = Path::new(&bin);
    let mut measured = Vec::new();
    for &runs in &options.runs {
        let sizes = seed::Sizes {
            runs,
            ..options.sizes.clone()
        };
        let seeded = seed::seed(exe, &sizes).await?;
        let result = measure::measure(exe, &seeded, options.requests).await?;
        print!("{}", table(&seeded, &result));
        measured.push((seeded.runs, result));
    }
    if let (Some((small, first)), Some((large, last))) = (measured.first(), measured.last())
        && small != large
    {
        println!("\np50 growth from {small} to {large} stored runs:");
        for (a, b) in first.rows.iter().zip(&last.rows) {
            println!(
                "  {:<30} {:>8.2} ms → {:>8.2} ms  ×{:.1}",
                trimmed(&a.name),
                a.p50_ms,
                b.p50_ms,
                b.p50_ms / a.p50_ms.max(1e-6)
            );
        }
    }
    Ok(())
}

/// A page's name without its event count (it differs little between sizes).
fn trimmed(name: &str) -> &str {
    name.split(" (").next().unwrap_or(name)
}

fn table(seeded: &seed::Seeded, measured: &measure::Measured) -> String {
    let mut out = format!(
        "\nkeel console bench: {} runs in {} conversations of {} users, SQLite (seeded in \
         {:.1} s, not measured)\n",
        seeded.runs,
        seeded.conversations,
        seed::USERS,
        seeded.seconds
    );
    let tables: Vec<String> = seeded
        .tables
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    out.push_str(&format!("  rows: {}\n", tables.join(", ")));
    out.push_str(&format!(
        "  {:<30} {:>5} {:>9} {:>9} {:>9} {:>10} {:>9}\n",
        "page", "n", "p50 ms", "p99 ms", "max ms", "CPU µs/req", "bytes"
    ));
    for row in &measured.rows {
        out.push_str(&format!(
            "  {:<30} {:>5} {:>9.2} {:>9.2} {:>9.2} {:>10.0} {:>9}\n",
            row.name, row.requests, row.p50_ms, row.p99_ms, row.max_ms, row.cpu_us, row.bytes
        ));
    }
    out.push_str(&format!(
        "  daemon RSS {:.0} MiB (peak {:.0} MiB); the generator's own CPU {:.0} ms\n",
        measured.rss_mib.0, measured.rss_mib.1, measured.generator_cpu_ms
    ));
    out
}
