//! End to end: `keel bench --serve --rate R` sends its open-loop schedule through a real `keel
//! serve` child and `keel mock-provider`, and reports every message it scheduled.

mod common;

use common::{keel, run, stderr, stdout, temp};
use serde_json::Value;

#[test]
fn an_open_loop_at_a_tiny_rate_completes_every_scheduled_message() {
    let (_guard, home) = temp();
    let output = run(keel(&home).args([
        "bench",
        "--serve",
        "--rate",
        "40",
        "--duration",
        "0.5",
        "--iterations",
        "2",
        "--latency-ms",
        "5",
        "--json",
    ]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    for count in ["scheduled", "sent", "accepted", "completed"] {
        assert_eq!(report[count], 20, "{count}: {report}");
    }
    assert_eq!(report["failed"], 0, "{report}");
    assert!(report["first_failure"].is_null(), "{report}");
    assert_eq!(report["ideal_end_to_end_ms"], 10.0);
    let accept = &report["accept_ms"];
    let end_to_end = &report["end_to_end_ms"];
    // A run cannot end before its two model calls have taken their latency.
    assert!(end_to_end["p50"].as_f64().unwrap() >= 10.0, "{report}");
    assert!(
        accept["max"].as_f64().unwrap() <= end_to_end["max"].as_f64().unwrap(),
        "{report}"
    );
    assert!(report["achieved_rate_per_s"].as_f64().unwrap() > 0.0);
    if cfg!(target_os = "linux") {
        assert!(report["daemon_peak_rss_mib"].as_f64().unwrap() > 0.0);
        assert!(report["daemon_cpu_per_iteration_us"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn a_rate_without_serve_or_not_positive_is_a_usage_error() {
    let (_guard, home) = temp();
    let output = run(keel(&home).args(["bench", "--rate", "10"]));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let output = run(keel(&home).args(["bench", "--serve", "--rate", "0"]));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("positive"), "{}", stderr(&output));
}
