//! End to end: the console bench (`benches/console.rs`) at a tiny size, with this build's
//! debug `keel`: a daemon writes the template, SQL copies it, and every page it measures
//! answers a signed-in console session (and `/metrics` the admin key).

// The bench prints what this test does not look at.
#[allow(dead_code)]
#[path = "../benches/console/measure.rs"]
mod measure;
#[allow(dead_code)]
#[path = "../benches/console/seed.rs"]
mod seed;

use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_bench_seeds_copies_and_measures_every_page() {
    keel_providers::install_crypto_provider();
    let exe = Path::new(env!("CARGO_BIN_EXE_keel"));
    let sizes = seed::Sizes {
        runs: 20,
        per_conversation: 2,
        long_iterations: 4,
    };
    let seeded = seed::seed(exe, &sizes).await.unwrap();
    // 5 users × 2 runs written by the daemon, copied once.
    assert_eq!(seeded.runs, 20, "{:?}", seeded.tables);
    assert_eq!(seeded.conversations, 10, "{:?}", seeded.tables);
    let rows = |table: &str| {
        seeded
            .tables
            .iter()
            .find(|(name, _)| name == table)
            .map_or(0, |(_, n)| *n)
    };
    // Events and tool calls are stored with their checkpoints.
    for table in ["messages", "checkpoints", "token_log", "journals"] {
        assert!(rows(table) > 0, "no {table}: {:?}", seeded.tables);
    }
    assert!(seeded.long_run_events > 8, "{}", seeded.long_run_events);
    let measured = measure::measure(exe, &seeded, 2).await.unwrap();
    assert_eq!(measured.rows.len(), 9);
    for row in &measured.rows {
        assert_eq!(row.requests, 2);
        assert!(row.bytes > 0, "{row:?}");
        assert!(row.p50_ms > 0.0 && row.p50_ms <= row.max_ms, "{row:?}");
    }
}
