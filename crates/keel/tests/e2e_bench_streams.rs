//! End to end: `keel bench --serve --idle-streams` holds its conversations' event streams open
//! on a real `keel serve`, and every probe's event reaches its stream (a tiny size: the bench's
//! numbers are its own business, not this test's).

mod common;

use common::{keel, run, stderr, stdout, temp};
use serde_json::Value;

#[test]
fn idle_streams_are_held_and_every_probe_is_delivered() {
    let (_guard, home) = temp();
    let output = run(keel(&home).args([
        "bench",
        "--serve",
        "--idle-streams",
        "12",
        "--probes",
        "6",
        "--json",
    ]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["opened"], 12, "{report}");
    assert_eq!(report["broken"], 0, "{report}");
    assert_eq!(report["accepted"], 6, "{report}");
    assert_eq!(report["delivered"], 6, "{report}");
    assert_eq!(report["lost"], 0, "{report}");
    assert!(report["failure"].is_null(), "{report}");
    assert_eq!(report["timed_event"], "agent.model.request");
    let delivery = &report["delivery_us"];
    let p50 = delivery["p50"].as_f64().unwrap();
    assert!(
        p50 > 0.0 && p50 <= delivery["max"].as_f64().unwrap(),
        "{report}"
    );
    if cfg!(target_os = "linux") {
        assert!(
            report["daemon_rss"]["idle"].as_f64().unwrap() > 0.0,
            "{report}"
        );
        assert!(
            report["daemon_open_files_limit"].as_u64().unwrap() >= 12,
            "{report}"
        );
    }
}

#[test]
fn idle_streams_want_at_least_one_stream() {
    let (_guard, home) = temp();
    let output = run(keel(&home).args(["bench", "--serve", "--idle-streams", "0"]));
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("at least 1"),
        "{}",
        stderr(&output)
    );
}
