//! End to end: `keel serve`'s `/metrics` scraped after a known set of runs through the API — a
//! tool run, a run whose server error was retried, a run whose shell call was denied, and a run
//! the model's provider refused — says what they did; the API's `/metrics` wants an admin key
//! (none: 401, a user's: 403), and `[telemetry] metrics_bind` serves the same without one.

mod common;

use std::path::PathBuf;

use common::daemon::{Daemon, daemon_config, make_key};
use common::{Mock, keel, run, stderr, temp};
use serde_json::json;

/// The steps of the four runs, in order (one conversation, one run at a time).
fn script() -> String {
    json!({"steps": [
        {"text": "Looking.", "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"text": "One file."},
        {"error": {"status": 500}},
        {"text": "Fine."},
        {"tool_calls": [{"name": "shell", "arguments": {"command": "rm -rf ~"}}]},
        {"text": "Not done."},
        {"error": {"status": 400}}
    ]})
    .to_string()
}

/// A port free now, for `metrics_bind`.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The sum of the samples of `name` whose labels hold every one of `labels`.
fn sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .filter(|(series, _)| {
            let (series_name, rest) = series.split_once('{').unwrap_or((series, ""));
            series_name == name && labels.iter().all(|label| rest.contains(label))
        })
        .map(|(_, value)| value.parse::<f64>().unwrap())
        .sum()
}

async fn scrape(url: &str, key: Option<&str>) -> (u16, String) {
    let client = reqwest::Client::builder()
        .timeout(common::bound::REQUEST_TIMEOUT)
        .build()
        .unwrap();
    let mut request = client.get(url);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_the_runs_and_want_an_admin_key_unless_on_metrics_bind() {
    keel_providers::install_crypto_provider();
    let mock = Mock::start(&script());
    let (_h, home) = temp();
    let (_w, workspace) = temp();
    std::fs::write(workspace.join("a.txt"), "hello").unwrap();
    let fake_home: PathBuf = workspace.join("home");
    std::fs::create_dir(&fake_home).unwrap();
    std::fs::write(fake_home.join("canary"), "still here").unwrap();
    let port = free_port();
    daemon_config(
        &home,
        &mock,
        &workspace,
        &format!("[telemetry]\nmetrics_bind = \"127.0.0.1:{port}\"\n"),
    );
    let output = run(keel(&home).args(["users", "set", "ann", "--permission", "admin"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let ann_key = make_key(&home, &["--user", "ann"]);
    let admin_key = make_key(&home, &["--admin"]);
    let daemon = Daemon::start_with(&home, &[("HOME", fake_home.to_str().unwrap())]);
    let ann = daemon.client(&ann_key);
    let conversation = ann.conversation(None).await;

    let listed = ann.send(&conversation, "what is here?").await;
    ann.until_state(&listed, &["completed"]).await;
    let retried = ann.send(&conversation, "again").await;
    ann.until_state(&retried, &["completed"]).await;
    let wiped = ann.send(&conversation, "clean my home").await;
    ann.until_state(&wiped, &["waiting_on_human"]).await;
    let (status, waiting) = ann.get(&format!("/v1/runs/{wiped}/report")).await;
    assert_eq!(status, 200, "{waiting}");
    let call = waiting["approval"]["call_id"].as_str().unwrap().to_string();
    let (status, body) = ann
        .post(
            &format!("/v1/runs/{wiped}/approval"),
            json!({"decision": "deny", "call_id": call}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    ann.until_state(&wiped, &["completed"]).await;
    assert!(fake_home.join("canary").exists(), "a denied call ran");
    let broken = ann.send(&conversation, "break").await;
    let failed = ann.until_state(&broken, &["error"]).await;
    assert_eq!(failed["reason"], "provider_fatal", "{failed}");

    let api = format!("{}/metrics", daemon.url);
    let (status, text) = scrape(&api, None).await;
    assert_eq!(status, 401, "{text}");
    let (status, text) = scrape(&api, Some(&ann_key)).await;
    assert_eq!(status, 403, "{text}");
    let (status, text) = scrape(&api, Some(&admin_key)).await;
    assert_eq!(status, 200, "{text}");

    let runs = "keel_runs_total";
    assert_eq!(sum(&text, runs, &[r#"state="completed""#]), 3.0, "{text}");
    assert_eq!(
        sum(
            &text,
            runs,
            &[r#"state="error""#, r#"reason="provider_fatal""#]
        ),
        1.0,
        "{text}"
    );
    assert_eq!(sum(&text, runs, &[]), 4.0, "{text}");
    let calls = "keel_model_calls_total";
    assert_eq!(sum(&text, calls, &[r#"error="none""#]), 5.0, "{text}");
    assert_eq!(sum(&text, calls, &[r#"error="server""#]), 1.0, "{text}");
    assert_eq!(
        sum(&text, calls, &[r#"error="invalid_request""#]),
        1.0,
        "{text}"
    );
    assert_eq!(
        sum(&text, "keel_provider_retries_total", &[r#"error="server""#]),
        1.0,
        "{text}"
    );
    assert_eq!(
        sum(
            &text,
            "keel_tool_calls_total",
            &[r#"tool="list_dir""#, r#"outcome="ok""#]
        ),
        1.0,
        "{text}"
    );
    assert_eq!(sum(&text, "keel_tool_calls_total", &[]), 1.0, "{text}");
    assert_eq!(
        sum(&text, "keel_approvals_total", &[r#"decision="deny""#]),
        1.0,
        "{text}"
    );
    assert_eq!(
        sum(&text, "keel_model_latency_seconds_count", &[]),
        5.0,
        "{text}"
    );
    assert_eq!(
        sum(&text, "keel_tool_duration_seconds_count", &[]),
        1.0,
        "{text}"
    );
    assert_eq!(sum(&text, "keel_runs_active", &[]), 0.0, "{text}");
    assert_eq!(sum(&text, "keel_runs_queued", &[]), 0.0, "{text}");
    let ann_input = sum(
        &text,
        "keel_user_tokens_total",
        &[r#"user="ann""#, r#"kind="input""#],
    );
    assert!(ann_input > 0.0, "{text}");
    assert_eq!(
        sum(&text, "keel_tokens_total", &[r#"kind="input""#]),
        ann_input,
        "all the calls were ann's: {text}"
    );

    // The keyless listener: the same series, no key asked, nothing else served.
    let keyless = format!("http://127.0.0.1:{port}/metrics");
    let (status, open) = scrape(&keyless, None).await;
    assert_eq!(status, 200, "{open}");
    assert_eq!(sum(&open, runs, &[]), 4.0, "{open}");
    let (status, _) = scrape(
        &format!("http://127.0.0.1:{port}/v1/runs"),
        Some(&admin_key),
    )
    .await;
    assert_eq!(status, 404, "only /metrics is served without a key");
}
