//! End to end: `keel bench` runs its conversations for real (in process and over HTTP against
//! `keel mock-provider`, in memory and with SQLite) and reports what it measured.

mod common;

use common::{keel, run, stderr, stdout, temp};
use serde_json::Value;

fn bench(args: &[&str]) -> Value {
    let (_guard, home) = temp();
    let output = run(keel(&home)
        .args(["bench", "--conversations", "20", "--iterations", "3"])
        .args(["--latency-ms", "5", "--json"])
        .args(args));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    serde_json::from_str(&stdout(&output)).unwrap()
}

fn check(report: &Value, store: &str, transport: &str) {
    assert_eq!(report["completed"], 20, "{report}");
    assert!(report.get("first_failure").is_none(), "{report}");
    assert_eq!(report["setup"]["store"], store);
    assert_eq!(report["setup"]["transport"], transport);
    assert_eq!(report["ideal_ms"], 15.0);
    let overhead = &report["overhead_us"];
    let p50 = overhead["p50"].as_f64().unwrap();
    assert!(
        p50 > 0.0 && p50 <= overhead["p99"].as_f64().unwrap(),
        "{report}"
    );
    assert!(report["wall_ms"].as_f64().unwrap() >= 15.0, "{report}");
    assert!(report["iterations_per_sec"].as_f64().unwrap() > 0.0);
    if cfg!(target_os = "linux") {
        assert!(report["peak_rss_mib"].as_f64().unwrap() > 0.0, "{report}");
    }
}

#[test]
fn in_process_with_memory_and_with_sqlite() {
    check(&bench(&[]), "memory", "in-process");
    check(&bench(&["--store", "sqlite"]), "sqlite", "in-process");
}

#[test]
fn over_http_whole_and_streamed() {
    check(&bench(&["--http"]), "memory", "http");
    let streamed = bench(&["--http", "--stream", "--start", "spread"]);
    check_spread(&streamed);
    assert_eq!(streamed["setup"]["stream"], true);
}

fn check_spread(report: &Value) {
    assert_eq!(report["completed"], 20, "{report}");
    assert_eq!(report["setup"]["start"], "spread");
    // Spread over one latency period: the ideal includes it.
    assert_eq!(report["ideal_ms"], 20.0);
}

#[test]
fn bad_arguments_are_usage_errors() {
    let (_guard, home) = temp();
    let output = run(keel(&home).args(["bench", "--conversations", "0"]));
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("at least 1"),
        "{}",
        stderr(&output)
    );
}
